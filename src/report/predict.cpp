#include "report/predict.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "core/error.hpp"
#include "core/hint_io.hpp"
#include "sim/fold_w.hpp"
#include "sim/metrics.hpp"
#include "sim/simulator.hpp"
#include "sim/workload.hpp"

namespace rrfp {

namespace {

ReportRun simulate_run(const WorkModel& m, const Hint& hint, const ImportedRun& in, Policy policy,
                       int limit, const std::string& label, CommMode comm) {
  const RealizedWork& w = in.work;
  SimOptions opt;
  opt.arbiter.policy = policy;
  opt.arbiter.limit = limit;
  opt.comm = comm;
  opt.tp_protocol = in.tp_protocol;
  // The recorded order replayed as a fixed list: its groups wait for their protocol where the
  // recorded run's did (a ready run's; a fixed run's ranks each follow the list).
  opt.coordinate_fixed = in.coordination_measured;
  opt.record = true;
  ReportRun r;
  r.label = label;
  r.hint = hint.name;
  r.policy = to_string(policy);
  r.comm = to_string(opt.comm);
  r.cfg = m.config();
  r.result = simulate(m, hint, w, opt);
  const bool held = policy == Policy::Ready && m.vpp() == 1;
  r.metrics = compute_metrics(r.result, lower_bound(m, w, held ? r.result.arbiter.limit : 0));
  return r;
}

// The rules' TP coordination, set once the recorded order is replayed (PredictOptions::
// tp_protocol, coord_us): the trace's where it measured it, else the option's or the simulator's
// default latency.
void coordinate_rules(ImportedRun& in, int tp, const PredictOptions& o, Prediction& p) {
  if (tp < 2) return;
  // A latency measured under one protocol is no other's: a leader's hop read as an agree round.
  const bool other = o.tp_protocol && *o.tp_protocol != in.tp_protocol;
  if (o.tp_protocol) in.tp_protocol = *o.tp_protocol;
  if (o.coord_us >= 0 || !in.coordination_measured || other) {
    p.coordination_from = o.coord_us >= 0 ? "option" : "default";
    const double us = o.coord_us >= 0 ? o.coord_us : WorkloadParams{}.coord_latency_us;
    in.work.coord_ns = std::llround(us * 1e3);
  }
}

// The trace's own timeline as a step record, so reports and SVGs show it like a run.
ReportRun measured_run(const WorkModel& m, const ImportedRun& in, const Hint& recorded,
                       CommMode comm) {
  const RealizedWork& w = in.work;
  StepRecord r;
  r.pp = m.pp();
  r.tp = w.tp;
  r.makespan = in.measured_ns;
  r.ranks.assign(static_cast<size_t>(m.pp()) * w.tp, {});
  for (int rank = 0; rank < w.tp; ++rank)
    for (int i = 0; i < w.num_tasks; ++i) {
      TaskRecord t;
      t.task = m.task(i);
      t.stage = m.stage_of(t.task);
      t.rank = rank;
      t.start = in.start_ns[static_cast<size_t>(rank) * w.num_tasks + i];
      t.compute_end = t.end = t.start + w.compute(rank, i);
      r.ranks[static_cast<size_t>(t.stage) * w.tp + rank].busy += w.compute(rank, i);
      r.tasks.push_back(t);
    }
  r.peak_d = fixed_order_peaks(recorded.list(), m);
  r.peak_pending_w.assign(m.pp(), 0);
  r.arbiter.policy = Policy::Fixed;
  ReportRun out;
  out.label = "measured (" + in.format + ")";
  out.hint = "recorded";
  out.policy = "fixed";
  out.comm = to_string(comm);
  out.cfg = m.config();
  out.result = std::move(r);
  out.metrics = compute_metrics(out.result, lower_bound(m, w));
  return out;
}

// The step's work with each W's time added to its B's, on `whole` (the step's shape with the
// backward whole): what a rule that runs the backward whole does with the recorded durations.
ImportedRun folded(const ImportedRun& in, const WorkModel& split, const WorkModel& whole) {
  ImportedRun out = in;
  const RealizedWork& w = in.work;
  RealizedWork& f = out.work;
  f.num_tasks = whole.num_tasks();
  const size_t slots = static_cast<size_t>(w.tp) * f.num_tasks;
  f.compute_ns.assign(slots, 0);
  f.message_ns.assign(slots, 0);
  f.message_bytes.assign(f.num_tasks, 0);
  FoldedW folded_w(slots);
  for (int i = 0; i < w.num_tasks; ++i) {
    const TaskId t = split.task(i);
    const bool fold = folds_into_b(whole, t);
    const int j = whole.index(fold ? TaskId{Kind::B, t.chunk, t.mb} : t);
    if (!fold) f.message_bytes[j] = w.message_bytes[i];
    for (int r = 0; r < w.tp; ++r) {
      const size_t at = static_cast<size_t>(r) * f.num_tasks + j;
      if (fold) {
        folded_w[at] = w.compute(r, i);
      } else {
        f.compute_ns[at] = w.compute(r, i);
        f.message_ns[at] = w.message(r, i);
      }
    }
  }
  folded_w.add_to(f.compute_ns);
  return out;
}

// With ordered forwards, a recorded order that ran a chunk's forwards out of microbatch order
// cannot be replayed: its fixed order deadlocked ("run failed", exit 1). Refused, saying where.
void check_recorded_ordering(const WorkModel& m, const ListHint& order, bool from_trace) {
  if (!m.config().ordered_forwards) return;
  for (int s = 0; s < m.pp(); ++s) {
    std::vector<int> last(m.chunks(), -1);  // the microbatch of each chunk's latest forward
    for (const TaskId& t : order.stages[s]) {
      if (t.kind != Kind::F) continue;
      if (t.mb > last[t.chunk]) {
        last[t.chunk] = t.mb;
        continue;
      }
      const std::string ran = "ran " + to_string(TaskId{Kind::F, t.chunk, last[t.chunk]}) +
                              " before " + to_string(t) + " on stage " + std::to_string(s);
      throw InputError(from_trace ? "the trace's run says its forwards were ordered, but it " +
                                        ran + "; replay it with `ordered_forwards` off"
                                  : "`ordered_forwards` on: the recorded step " + ran +
                                        ", so its forwards were not in microbatch order; give "
                                        "auto (the trace's own) or off");
    }
  }
}

}  // namespace

// NaN when either step took no time (durations all zero): no error to tell, where -100% was
// printed (the report says "-", its JSON null).
double Prediction::reproduction_error() const {
  if (replayed.metrics.makespan <= 0 || measured.metrics.makespan <= 0)
    return std::numeric_limits<double>::quiet_NaN();
  return static_cast<double>(replayed.metrics.makespan) /
             static_cast<double>(measured.metrics.makespan) -
         1;
}

int Prediction::largest_d(const ReportRun& r) {
  const auto& d = r.result.peak_d;
  return d.empty() ? 0 : *std::max_element(d.begin(), d.end());
}

// At the recorded memory by what a run held, not by its limit: at V >= 2 a run at the neutral
// limit may hold up to V more while a microbatch drains (P=2 V=2: ready bf at limit 2 reached
// D 3 where the recorded step held 2, and was called the best at that memory, 13.7% saved).
const ReportRun& Prediction::best() const {
  const ReportRun* b = &replayed;
  for (const ReportRun& r : runs)
    if (largest_d(r) <= neutral_limit && r.metrics.makespan < b->metrics.makespan) b = &r;
  return *b;
}

const ReportRun* Prediction::faster_holding_more() const {
  const ReportRun* f = nullptr;
  const std::int64_t best_ns = best().metrics.makespan;
  for (const ReportRun& r : runs)
    if (r.metrics.limit <= neutral_limit && largest_d(r) > neutral_limit &&
        r.metrics.makespan < (f ? f->metrics.makespan : best_ns))
      f = &r;
  return f;
}

Prediction predict(ImportedRun imported, const PipelineConfig& cfg, int tp,
                   const PredictOptions& o) {
  Prediction p;
  p.cfg = cfg;
  p.tp = tp;
  // The ordering the step ran under, unless asked otherwise: predicted without it, a step of a
  // batch-norm model showed adaptive 5% faster where rrfp, held to it, runs it as BFW.
  p.ordered_from = o.ordered_forwards ? "option" : imported.ordered_forwards ? "trace" : "default";
  p.cfg.ordered_forwards = o.ordered_forwards.value_or(imported.ordered_forwards.value_or(false));
  const WorkModel m(p.cfg);
  Hint recorded;
  recorded.name = "recorded";
  recorded.body = imported.order;
  check_recorded_ordering(m, imported.order, p.ordered_from == "trace");
  // An order no step can have run (a task before one it depends on, on its stage or through
  // another's: a trace edited or cut) is the input's fault: its replay deadlocked, "run
  // failed", exit 1.
  try {
    validate_hint(imported.order, m, "the trace's recorded order");
  } catch (const HintError& e) {
    // At V >= 2 the placement decides which chunks share a stage: a loop's trace read as a
    // V-shape's was told as a cyclic wait alone.
    if (m.vpp() < 2) throw;
    throw HintError(std::string(e.what()) + " (or the trace was recorded with another shape: `" +
                    "placement` " + to_string(m.config().placement) +
                    " was taken; give the one it ran with, and `pp`, `vpp`)");
  }
  const std::vector<int> peaks = fixed_order_peaks(imported.order, m);
  p.neutral_limit = std::max(1, *std::max_element(peaks.begin(), peaks.end()));
  // rrfp's own trace names a blocking run "fixed 1f1b (blocking)" or "ready bf (blocking)":
  // replayed async, a fixed one came out 10-19% short unless `comm` said blocking, a ready one
  // 6-13% short (4-7% long as a fixed order's rendezvous). A ready run accepted its offers as
  // they came, which a fixed order's receives may not follow: it is replayed under the ready
  // policy (replay, below); where even that deadlocks, async, and the report says so.
  const bool rrfp = imported.format == "rrfp";
  const bool says_blocking = rrfp && (imported.fixed_blocking || imported.ready_blocking);
  p.comm_from_trace = !o.recorded_comm && says_blocking;
  p.recorded_comm =
      o.recorded_comm ? *o.recorded_comm : (says_blocking ? CommMode::Blocking : CommMode::Async);
  auto replay = [&] {
    p.measured = measured_run(m, imported, recorded, p.recorded_comm);
    // A ready run under blocking accepted its offers as they came. As a fixed order, whose
    // receives are posted one at a time in the recorded order, it waited where the run took
    // another offer first (a simulated ready interleaved step replayed +8.5%). Under the ready
    // policy, ranked by the recorded order and held to its peak D, the run's own choices come
    // back: at each of them the task it took was ready, and first in that order.
    const bool as_ready = p.recorded_comm == CommMode::Blocking && imported.ready_blocking;
    p.replayed =
        simulate_run(m, recorded, imported, as_ready ? Policy::Ready : Policy::Fixed,
                     as_ready ? p.neutral_limit : 0, "recorded order (twin)", p.recorded_comm);
  };
  try {
    replay();
  } catch (const DeadlockError&) {
    if (p.recorded_comm != CommMode::Blocking) throw;
    // A fixed order posts its receives in its own order; a ready run under blocking accepted
    // its offers as they came, in an order the fixed one may never post.
    if (!p.comm_from_trace || !imported.ready_blocking)
      throw InputError(
          "`comm` blocking: the recorded order deadlocks with a rendezvous per message when "
          "replayed as a fixed order (a step recorded under the ready policy accepted its "
          "offers as they came); replay it async, or give the step of a fixed order");
    p.recorded_comm = CommMode::Async;
    p.blocking_deadlocked = true;
    replay();
  }
  coordinate_rules(imported, tp, o, p);
  std::vector<int> limits{p.neutral_limit};
  if (o.large_limit > p.neutral_limit) limits.push_back(o.large_limit);
  // Said, not dropped without a word: a limit at or below the recorded memory's.
  if (o.large_limit > 0 && o.large_limit <= p.neutral_limit)
    p.skipped.push_back("the rows at the larger limit " + std::to_string(o.large_limit) +
                        ": it is not above the memory-neutral limit " +
                        std::to_string(p.neutral_limit) + " (the recorded order's peak D)");
  // BF on a step recorded under BFW runs its backward whole, as `--hint bf` does: its row was
  // BF with deferred W tasks, 8-9% faster than the BF a user would run.
  PipelineConfig whole_cfg = p.cfg;
  whole_cfg.split_backward = false;
  const WorkModel whole(whole_cfg);
  std::optional<ImportedRun> whole_run;
  for (int limit : limits)
    for (const std::string& name : o.hints) {
      const bool fold = o.rules_split_as_they_run && m.split() && !hint_wants_split(name);
      if (fold && !whole_run) whole_run = folded(imported, m, whole);
      const WorkModel& hm = fold ? whole : m;
      // Said in its own words: "`hint` bfw: needs `split_backward` on" named an option that
      // predict does not take, on every trace of whole backwards predicted by default.
      if (hint_needs_split(name) && !hm.split()) {
        if (limit == limits.front())
          p.skipped.push_back("`hints` " + name +
                              ": its rows defer W tasks, and the step is replayed with its "
                              "backward whole (the step replayed records no W task, where "
                              "another step of the trace may: `step`; or `split_backward` "
                              "is off)");
        continue;
      }
      const Hint h = make_hint(name, hm);
      p.runs.push_back(simulate_run(hm, h, fold ? *whole_run : imported, Policy::Ready, limit,
                                    "ready " + name + " @" + std::to_string(limit),
                                    CommMode::Async));
    }
  // Every row skipped: the report's "no readiness-first rule beats the recorded order" would
  // speak of rules it never ran.
  if (p.runs.empty()) {
    std::string why;
    for (const std::string& s : p.skipped)
      if (s.starts_with("`hints`")) why += (why.empty() ? "" : "; ") + s.substr(8);
    throw InputError("`hints`: none of the rules given can run on this step (" + why + ")");
  }
  p.imported = std::move(imported);
  return p;
}

Prediction predict(const std::string& trace_path, const PipelineConfig& cfg, int tp,
                   const TraceOptions& trace, const PredictOptions& o) {
  const WorkModel m(cfg);
  return predict(import_trace(trace_path, m, tp, trace), cfg, tp, o);
}

}  // namespace rrfp
