#include "sim/timeline.hpp"

#include <map>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <utility>

#include "core/error.hpp"
#include "core/format.hpp"
#include "sim/fold_w.hpp"
#include "sim/metrics.hpp"
#include "sim/timeline_clocks.hpp"

namespace rrfp {

namespace {

std::string missing_per_stage(const RealizedWork& r, const WorkModel& m, int tp) {
  std::string missing;
  int stages = 0;  // that miss tasks: three are named, the rest counted (--pp 4096 on a 3-stage
                   // trace made one line of 233 KB)
  for (int s = 0; s < m.pp(); ++s) {
    int count = 0;
    std::string names;
    for (const TaskId& t : m.stage_tasks(s))
      for (int rank = 0; rank < tp; ++rank)
        if (r.compute_ns[static_cast<size_t>(rank) * r.num_tasks + m.index(t)] < 0 && count++ < 3)
          names += (names.empty() ? "" : ", ") + to_string(t) +
                   (tp > 1 ? " (tp rank " + std::to_string(rank) + ")" : "");
    if (count > 0 && ++stages <= 3)
      missing += (missing.empty() ? "" : "; ") + std::string("stage ") + std::to_string(s) + ": " +
                 std::to_string(count) + " (" + names + (count > 3 ? ", ..." : "") + ")";
  }
  if (stages > 3) missing += "; and " + std::to_string(stages - 3) + " more stages";
  return missing;
}

// Whether every task the timeline lacks is a W.
bool misses_only_w(const RealizedWork& r, const WorkModel& m, int tp) {
  for (int s = 0; s < m.pp(); ++s)
    for (const TaskId& t : m.stage_tasks(s))
      for (int rank = 0; rank < tp; ++rank)
        if (r.compute_ns[static_cast<size_t>(rank) * r.num_tasks + m.index(t)] < 0 &&
            t.kind != Kind::W)
          return false;
  return true;
}

// How far task `b` may start before the earlier task `a` of its rank ends and still be read as
// after it: the clocks' jitter and rounding (a legacy exporter's whole microseconds: 1 us, and 1%
// of the earlier task), but never half the shorter task or more, which no rounding makes of
// tasks that ran one after the other (two 0.5 us tasks at one ts were accepted); and 1 ns, the
// finest any format prints, for the rounding of a start plus a duration.
double overlap_tolerance_us(const TimelineTask& a, const TimelineTask& b) {
  return std::min(1.0 + 0.01 * a.dur_us, 0.5 * std::min(a.dur_us, b.dur_us)) + 1e-3;
}

// A rank runs one task at a time: two tasks of one (stage, TP rank) that overlap by more than
// overlap_tolerance_us are refused, naming both.
void check_no_overlap(const Timeline& tl, const WorkModel& m, const std::string& where) {
  std::map<std::pair<int, int>, std::vector<const TimelineTask*>> by_rank;
  for (const TimelineTask& e : tl.tasks)
    by_rank[{m.stage_of(e.task), e.tp_rank}].push_back(&e);
  for (auto& [rank, tasks] : by_rank) {
    // Of tasks that start together the shorter first: a task of no time before the one it
    // started with, as a rank runs them.
    std::sort(tasks.begin(), tasks.end(), [](const TimelineTask* a, const TimelineTask* b) {
      return a->start_us != b->start_us ? a->start_us < b->start_us : a->dur_us < b->dur_us;
    });
    for (size_t i = 1; i < tasks.size(); ++i) {
      const TimelineTask& a = *tasks[i - 1];
      const TimelineTask& b = *tasks[i];
      if (b.start_us < a.start_us + a.dur_us - overlap_tolerance_us(a, b))
        throw InputError(where + ": tasks " + to_string(a.task) + " and " + to_string(b.task) +
                         " overlap on stage " + std::to_string(rank.first) +
                         (rank.second > 0 ? " tp rank " + std::to_string(rank.second) : "") + " (" +
                         fmt("%.3f", b.start_us) + " us is before " +
                         fmt("%.3f", a.start_us + a.dur_us) +
                         " us); a rank runs one task at a time");
    }
  }
}

// The shape, for the errors of a trace recorded with other stages: "P=3 V=1".
std::string shape_of(const WorkModel& m) {
  return "P=" + std::to_string(m.pp()) + " V=" + std::to_string(m.vpp());
}

constexpr const char* kStageLacked =
    ": the trace records a stage the shape lacks (a rank's file missing?)";

// Where each task of the run ran, per (tp rank, task) slot, in the trace's microseconds.
struct Spans {
  std::vector<double> start, end;
  std::vector<char> measured;  // the message's latency came from the trace
  // The end of the W folded into the slot's B (NaN: none), on the B's clock: the step spans it.
  std::vector<double> folded_end;
  double first = std::numeric_limits<double>::infinity(), last = -first;
};

// What a task seen twice says of the timeline. A whole trace (no step spans) holds several steps;
// else the task ran twice in one step, and a Megatron step's rank is likely in two files. Each
// such error said "a trace of several steps needs --step", given --step or not.
std::string twice(const Timeline& tl) {
  if (tl.step < 0 && tl.format == "torch")
    return " (a trace of several steps needs step spans, ProfilerStep#N, to replay one)";
  if (tl.format == "megatron") return " in one step (two files for one rank?)";
  return " in one step";
}

// The tasks' durations into `r` (and send_us where given), checked against the shape.
Spans read_tasks(const Timeline& tl, const WorkModel& m, int tp, const std::string& origin,
                 RealizedWork& r) {
  const size_t slots = static_cast<size_t>(tp) * r.num_tasks;
  Spans sp;
  sp.start.assign(slots, 0);
  sp.end.assign(slots, 0);
  sp.measured.assign(slots, 0);
  sp.folded_end.assign(slots, std::numeric_limits<double>::quiet_NaN());
  // W times folded into their B (sim/fold_w.hpp): the B's end stays where it was, when the B
  // sent its gradient.
  FoldedW folded_w(slots);
  const TimelineTask* half = nullptr;  // the first input half of a split backward, if any
  bool any_w = false;
  for (const TimelineTask& e : tl.tasks) {
    if (e.input_half && !half) half = &e;
    any_w = any_w || e.task.kind == Kind::W;
    const std::string where = origin + ": task " + to_string(e.task);
    const TaskId b{Kind::B, e.task.chunk, e.task.mb};
    const bool fold = folds_into_b(m, e.task);
    if (!fold && !m.valid(e.task)) throw InputError(where + " does not exist in this run");
    if (e.tp_rank < 0 || e.tp_rank >= tp)
      throw InputError(where + ": tp rank " + std::to_string(e.tp_rank) + " >= `tp` " +
                       std::to_string(tp));
    const size_t at = static_cast<size_t>(e.tp_rank) * r.num_tasks + m.index(fold ? b : e.task);
    std::int64_t& into = fold ? folded_w[at] : r.compute_ns[at];
    if (into >= 0)
      throw InputError(where + " appears twice" +
                       (tp > 1 ? " on tp rank " + std::to_string(e.tp_rank) : std::string()) +
                       twice(tl));
    const std::string what = where + ": duration";
    into = duration_ns(e.dur_us, what.c_str());
    // A folded W still ran within the step: the measured step spans it (a zb trace ends on W
    // tasks, and the step read without them was shorter than the one recorded). So does the TP
    // collective after a task, where the trace records its ranks' waits in it: a group's task
    // ends there, and a step read to its last compute's end left its last collective out (1F1B
    // at P=1 M=1 TP=2 with 1 ms tasks and collectives measured 2 ms of its 3).
    sp.first = std::min(sp.first, e.start_us);
    sp.last = std::max(sp.last, e.start_us + e.dur_us + std::max(e.collective_us, 0.0));
    if (fold) {
      sp.folded_end[at] = e.start_us + e.dur_us;
      continue;
    }
    // Its W's work is within it: nothing more to fold (a trace mixing whole backwards with
    // split ones was refused for the whole ones' W). A W recorded for it is then a task twice.
    if (e.whole_backward && !m.split()) {
      if (folded_w[at] >= 0) throw InputError(where + ", a whole backward, and its W both appear");
      folded_w[at] = 0;
    }
    if (e.send_us >= 0 && sends_across(m, e.task, where)) {
      const std::string send = where + ": send_us";
      r.message_ns[at] = duration_ns(e.send_us, send.c_str());
      sp.measured[at] = 1;
    }
    sp.start[at] = e.start_us;
    sp.end[at] = e.start_us + e.dur_us;
  }
  const std::string missing = missing_per_stage(r, m, tp);
  if (!missing.empty())
    throw MissingTasks(
        origin + ": the " + (tl.format.empty() ? "" : tl.format + " ") +
            "timeline lacks tasks this shape needs: " + missing +
            "; if it was recorded with another shape, give that one (`pp`, `vpp`, `microbatches`" +
            // At TP 2 or more the ranks it lacks may be the shape's: a TP 2 trace read at 3.
            (tp > 1 ? ", `tp`)" : ")"),
        misses_only_w(r, m, tp));
  // Input halves without a W: read as whole backwards, the step was short of every W's work.
  if (half && !any_w)
    throw MissingTasks(origin + ": task " + to_string(half->task) +
                           " is the input half of a split backward (a torch 'I' span), but the "
                           "step records no W task: a split backward needs its W spans, a whole "
                           "one is a 'B'",
                       true);
  // As a missing W of a split backward is (misses_only_w): a step cut short, passed over.
  if (const std::string w = folded_w.missing(m); !w.empty())
    throw MissingTasks(origin + ": " + w, true);
  check_no_overlap(tl, m, origin);
  folded_w.add_to(r.compute_ns);
  return sp;
}

// Receives: the producer's message took from its end (or the receive's start, if later) to
// the receive's end. One a consumer's input, ending before the consumer starts.
void read_receives(const std::vector<TimelineRecv>& recvs, const WorkModel& m, int tp,
                   const std::string& origin, Spans& sp, RealizedWork& r) {
  std::vector<char> received(sp.start.size(), 0);  // by the consumer's slot
  for (const TimelineRecv& rv : recvs) {
    const std::string what = origin + ": receive of " + to_string(rv.consumer);
    // A receive of a task or from a stage the shape lacks: the trace was recorded with more
    // stages (it was skipped, and a rank's file alone replayed as a pipeline of one).
    if (!m.valid(rv.consumer))
      throw InputError(what + ": no such task in " + shape_of(m) + kStageLacked);
    if (rv.tp_rank < 0 || rv.tp_rank >= tp)
      throw InputError(what + ": tp rank " + std::to_string(rv.tp_rank) + " >= `tp` " +
                       std::to_string(tp));
    const std::optional<TaskId> from = data_producer(rv.consumer);
    if (from && !m.valid(*from))
      throw InputError(what + ": its input would come from " + to_string(*from) + ", no task of " +
                       shape_of(m) + kStageLacked);
    // Either was read as a timed message, exit 0: a receive given twice (the first taken),
    // or one ending after its consumer had started (its latency counted from the trace alone).
    const size_t mine = static_cast<size_t>(rv.tp_rank) * r.num_tasks + m.index(rv.consumer);
    if (std::exchange(received[mine], 1)) throw InputError(what + " appears twice");
    // A clock's rounding: an exporter of whole microseconds rounds a span's start and length
    // each (up to 1.5 us past), and a double's sum of them adds a trace of its own.
    if (rv.end_us > sp.start[mine] + 2.0)
      throw InputError(what + " ends at " + fmt("%.3f", rv.end_us) + " us, after its consumer " +
                       "started (" + fmt("%.3f", sp.start[mine]) +
                       " us): a task starts once its input is there");
    TaskId producer;
    if (!cross_stage_producer(m, rv.consumer, producer))
      continue;  // its input is made on its own stage: no message
    const size_t at = static_cast<size_t>(rv.tp_rank) * r.num_tasks + m.index(producer);
    if (sp.measured[at]) continue;  // the trace said it directly
    const double us = std::max(0.0, rv.end_us - std::max(rv.start_us, sp.end[at]));
    r.message_ns[at] = duration_ns(us, what.c_str());
    sp.measured[at] = 1;
  }
}

// Stage s's tasks in the order TP rank r started them (ties: the model's order, so zero-length
// tasks keep their dependencies).
std::vector<TaskId> rank_order(const WorkModel& m, const std::vector<double>& start, int s, int r) {
  std::vector<TaskId> o = m.stage_tasks(s);
  const size_t at = static_cast<size_t>(r) * m.num_tasks();
  std::stable_sort(o.begin(), o.end(), [&](const TaskId& a, const TaskId& b) {
    return start[at + m.index(a)] < start[at + m.index(b)];
  });
  return o;
}

// The recorded order: rank 0's per stage. Every rank of a TP group runs one order (their
// collectives meet in it): a trace whose ranks did not is refused, naming where they part (it was
// replayed in rank 0's order without a word: a run that diverged, or a trace read with the wrong
// `tp`).
ListHint recorded_order(const WorkModel& m, int tp, const std::vector<double>& start,
                        const std::string& origin) {
  ListHint order;
  order.stages.assign(m.pp(), {});
  for (int s = 0; s < m.pp(); ++s) {
    order.stages[s] = rank_order(m, start, s, 0);
    for (int r = 1; r < tp; ++r) {
      const std::vector<TaskId> mine = rank_order(m, start, s, r);
      const auto [a, b] =
          std::mismatch(order.stages[s].begin(), order.stages[s].end(), mine.begin());
      if (a == order.stages[s].end()) continue;
      throw InputError(origin + ": stage " + std::to_string(s) + ": tp rank " + std::to_string(r) +
                       " ran " + to_string(*b) + " where tp rank 0 ran " + to_string(*a) +
                       " (its task " + std::to_string(a - order.stages[s].begin() + 1) +
                       "); the ranks of a tensor-parallel group run one order (a run whose "
                       "ranks diverged, or a trace read with the wrong `tp`?)");
    }
  }
  return order;
}

// The TP collective's own time (ImportedRun::collective_measured), as the simulator models it:
// a group's F or B ends when its last rank has computed, plus the collective (a W has none). Of
// each F and B whose every rank is in the timeline, from its last compute's end to its last
// rank's leaving the collective; the mean over them (their total kept: a wake-up late by a
// millisecond is time the step spent), in ns; -1 when the timeline records no wait in a
// collective. A W folded into its B (a rule run with the backward whole) adds nothing: its B's
// collective counts.
std::int64_t measured_collective(const Timeline& tl, const WorkModel& m, int tp) {
  if (tp < 2 || std::none_of(tl.tasks.begin(), tl.tasks.end(),
                             [](const TimelineTask& e) { return e.collective_us >= 0; }))
    return -1;
  const double none = -std::numeric_limits<double>::infinity();
  std::vector<double> end(m.num_tasks(), none), leave(m.num_tasks(), none);
  std::vector<int> ranks(m.num_tasks(), 0);
  for (const TimelineTask& e : tl.tasks) {
    if (!m.valid(e.task) || e.task.kind == Kind::W) continue;
    const int i = m.index(e.task);
    const double done = e.start_us + e.dur_us;
    end[i] = std::max(end[i], done);
    leave[i] = std::max(leave[i], done + std::max(e.collective_us, 0.0));
    ++ranks[i];
  }
  double sum = 0;  // in the tasks' order
  int n = 0;
  for (int i = 0; i < m.num_tasks(); ++i)
    if (ranks[i] == tp) {
      sum += leave[i] - end[i];
      ++n;
    }
  return n == 0 ? -1 : std::llround(sum / n * 1e3);
}

// The TP coordination's latency (ImportedRun::coordination_measured), in ns: agree's shortest
// round where the trace records rounds; else, under a leader, a follower starts a task only once
// the leader's choice has reached it, so the least lag of a follower's start behind its leader's
// is the choice's latency (a simulated step's coord_ns exactly: some follower sat free). -1 when
// TP = 1, or a follower ever started first or with its leader (no coordination: a fixed list's
// ranks of even work start together, and that read as a protocol of 0 us, its rules predicted
// without the latency a ready run pays).
std::int64_t measured_coordination(const Timeline& tl, const WorkModel& m, int tp,
                                   const std::vector<double>& start) {
  if (tp < 2) return -1;
  if (tl.coordination_us >= 0) return std::llround(tl.coordination_us * 1e3);
  // The starts on one clock (build_run's, aligned where the trace's ranks kept their own).
  const size_t n = static_cast<size_t>(m.num_tasks());
  double least = std::numeric_limits<double>::infinity();
  for (int r = 1; r < tp; ++r)
    for (size_t i = 0; i < n; ++i)
      least = std::min(least, start[r * n + i] - start[i]);
  return std::isfinite(least) && least > 0 ? std::llround(least * 1e3) : -1;
}

}  // namespace

bool sends_across(const WorkModel& m, const TaskId& t, const std::string& where,
                  const char* lacked) {
  const TaskId next{t.kind, t.kind == Kind::F ? t.chunk + 1 : t.chunk - 1, t.mb};
  if (t.kind == Kind::W || !m.valid(next))
    throw InputError(where + ": send_us says its output went to another stage, but no task of " +
                     shape_of(m) + " takes it" + (lacked ? lacked : kStageLacked));
  return m.stage_of(next) != m.stage_of(t);
}

void refuse_needless_message_us(const ImportedRun& run, double message_us,
                                const std::string& origin) {
  // As a CSV's send_us column (replay_csv.cpp): the latency was taken and ignored, and a "what
  // if messages took X" answered with the recorded ones.
  if (message_us >= 0 && run.messages > 0 && run.messages_measured >= run.messages)
    throw InputError(origin + (run.run.empty() ? "" : " (" + run.run + ")") +
                     ": the trace times every message (" + std::to_string(run.messages) +
                     "), so `message_us` has none to time; leave it out");
}

ImportedRun build_run(const Timeline& tl, const WorkModel& m, int tp, double message_us,
                      const std::string& origin) {
  ImportedRun out;
  out.format = tl.format;
  out.run = tl.run;
  out.step = tl.step;
  out.ordered_forwards = tl.ordered_forwards;
  if (tl.step_us) out.run_step_ns = std::llround(*tl.step_us * 1e3);
  out.work.offer_payload = tl.offer_payload.value_or(false);
  if (tl.offer_ack_us) out.work.link_latency_ns = duration_ns(*tl.offer_ack_us, "`offer_ack_us`");
  out.fixed_blocking = tl.fixed_blocking;
  out.ready_blocking = tl.ready_blocking;
  out.has_w = std::any_of(tl.tasks.begin(), tl.tasks.end(),
                          [](const TimelineTask& t) { return t.task.kind == Kind::W; });
  RealizedWork& r = out.work;
  r.tp = tp;
  r.num_tasks = m.num_tasks();
  const size_t slots = static_cast<size_t>(tp) * r.num_tasks;
  r.compute_ns.assign(slots, -1);
  r.message_ns.assign(slots, message_us < 0 ? 0 : duration_ns(message_us, "`message_us` latency"));
  r.message_bytes.assign(r.num_tasks, 0);
  const std::string in_run = origin + (tl.run.empty() ? "" : " (" + tl.run + ")");
  Spans sp = read_tasks(tl, m, tp, in_run, r);
  std::vector<TimelineRecv> recvs = tl.recvs;
  // Only the legacy PyTorch exporter's clocks are unaligned, and it records no collective waits:
  // the ends of the compute are the step's.
  if (!tl.clocks_aligned) {
    const std::vector<double> unaligned = sp.start;
    align_clocks(m, tp, sp.start, sp.end, recvs);
    sp.first = *std::min_element(sp.start.begin(), sp.start.end());
    sp.last = *std::max_element(sp.end.begin(), sp.end.end());
    // A folded W ran on its B's rank: its end moves by the B's shift.
    for (size_t i = 0; i < slots; ++i)
      if (!std::isnan(sp.folded_end[i]))
        sp.last = std::max(sp.last, sp.folded_end[i] + sp.start[i] - unaligned[i]);
  }
  // The step began at its first recorded wait where that came before every task: agree's
  // first round, which the twin replays (the measured step left it out, and an exact replay
  // read +3.6%). Waits are rrfp's own spans, on one clock.
  if (tl.clocks_aligned) sp.first = std::min(sp.first, tl.first_wait_us);
  read_receives(recvs, m, tp, in_run, sp, r);
  // 100 us: over the error of the clocks rrfp's ranks align at start-up (docs/twin.md).
  const EarlyInputs early = early_inputs(m, tp, sp.start, sp.end, 100);
  out.early_inputs = early.count;
  out.early_worst_ns = std::llround(early.worst_us * 1e3);
  for (char c : sp.measured)
    out.messages_measured += c;
  if (message_us < 0)
    out.messages_inferred = infer_latencies(m, tp, sp.start, sp.end, sp.measured, r);
  for (int i = 0; i < r.num_tasks; ++i) {
    TaskId consumer = m.task(i), producer;
    if (cross_stage_producer(m, consumer, producer)) out.messages += tp;
  }
  out.start_ns.resize(slots);
  for (size_t i = 0; i < slots; ++i)
    out.start_ns[i] = static_cast<std::int64_t>((sp.start[i] - sp.first) * 1e3 + 0.5);
  if (!tl.tasks.empty())
    out.measured_ns = static_cast<std::int64_t>((sp.last - sp.first) * 1e3 + 0.5);
  out.order = recorded_order(m, tp, sp.start, in_run);
  if (const std::int64_t c = measured_collective(tl, m, tp); c >= 0) {
    r.collective_ns = c;
    out.collective_measured = true;
  }
  if (const std::int64_t c = measured_coordination(tl, m, tp, sp.start); c >= 0) {
    r.coord_ns = c;
    out.coordination_measured = true;
  }
  if (tl.coordination_us >= 0) out.tp_protocol = TpProtocol::Agree;
  // A trace's step, named as such: it said "workload", and not that latencies it inferred from
  // gaps between tasks (days long in a trace of a stalled step) could be what adds up.
  check_total(r, origin + ": the step",
              out.messages_inferred > 0
                  ? "its messages' latencies were inferred from the gaps between tasks; give "
                    "them (`message_us`), or take another step (`step`)"
                  : "take another step (`step`)");
  return out;
}

Timeline timeline_of(const StepRecord& r) {
  Timeline t;
  t.format = "rrfp";
  for (const TaskRecord& x : r.tasks)
    t.tasks.push_back({x.task, x.rank, static_cast<double>(x.start) / 1e3,
                       static_cast<double>(x.compute_end - x.start) / 1e3,
                       x.send_ns >= 0 ? static_cast<double>(x.send_ns) / 1e3 : -1.0});
  return t;
}

}  // namespace rrfp
