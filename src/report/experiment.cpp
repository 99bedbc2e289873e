#include "report/experiment.hpp"

#include <algorithm>
#include <cstdio>
#include <future>
#include <system_error>
#include <thread>
#include <utility>

#include "core/error.hpp"
#include "core/format.hpp"
#include "core/progress_line.hpp"
#include "sim/hint_check.hpp"
#include "sim/parallel.hpp"
#include "sim/replay.hpp"
#include "sim/trace_import.hpp"

namespace rrfp {

bool resolve_split(const std::string& mode, const std::string& hint) {
  if (mode == "on") return true;
  if (mode == "off") return false;
  if (mode == "auto") return hint_wants_split(hint);
  throw InputError("`split_backward`: expected auto, on or off, got '" + mode + "'");
}

PipelineConfig make_config(int pp, int vpp, int microbatches, const std::string& placement,
                           const std::string& split_mode, const std::string& hint) {
  PipelineConfig c;
  c.pp = pp;
  c.vpp = vpp;
  c.microbatches = microbatches;
  c.placement = parse_placement(placement);
  validate(c);
  c.split_backward = resolve_split(split_mode, hint);
  return c;
}

std::string tasks_done(const std::string& label, std::int64_t done, std::int64_t total,
                       const std::string& of) {
  return label + ": " + std::to_string(done) + " of " + (of.empty() ? "" : of + " ") +
         std::to_string(total) + " tasks (" +
         fmt("%.0f", 100.0 * static_cast<double>(done) / static_cast<double>(total)) + "%)";
}

std::string default_label(const RunSpec& r) {
  return to_string(r.policy) + " " + r.hint + " (" + to_string(r.comm) + ")";
}

Scenario with_replay_step(Scenario sc, const std::vector<RunSpec>& specs) {
  const bool find_step = sc.trace.step < 0;
  if (sc.replay_path.empty() || specs.empty() || (!find_step && !sc.ordered_from_replay)) return sc;
  if (!is_trace_path(sc.replay_path)) {  // a CSV: its last step, whatever the shape
    if (find_step) sc.trace.step = replay_csv_last_step(sc.replay_path);
    return sc;  // and no word on the ordering: off
  }
  const RunSpec* shape = &specs.front();
  for (const RunSpec& s : specs)
    if (config_for(sc, s).split_backward) {
      shape = &s;
      break;
    }
  sc.replay_read_for = config_for(sc, *shape);
  ImportedRun in = import_trace(sc.replay_path, WorkModel(sc.replay_read_for), sc.tp, sc.trace);
  sc.trace.step = in.step;
  if (sc.ordered_from_replay) sc.cfg.ordered_forwards = in.ordered_forwards.value_or(false);
  sc.replay_read = std::make_shared<const RealizedWork>(std::move(in.work));
  sc.replay_read_coordination = in.coordination_measured;
  sc.replay_passed_over = in.passed_over;
  return sc;
}

ReportHeader header_of(const Scenario& sc) {
  ReportHeader h;
  h.workload = sc.replay_path.empty() ? sc.workload_name : "replay:" + sc.replay_path;
  if (!sc.replay_path.empty() && sc.trace.step >= 0)
    h.workload += " step " + std::to_string(sc.trace.step);
  if (!sc.replay_path.empty() && sc.replay_passed_over > 0)
    h.workload += " (the first complete: " + std::to_string(sc.replay_passed_over) +
                  (sc.replay_passed_over == 1 ? " before it lacks" : " before it lack") + " tasks)";
  // The jitter a replay takes on top (realized_work): its makespans are not the measured ones.
  if (!sc.replay_path.empty() && sc.workload.jitter.p > 0) h.workload += " + " + sc.workload_name;
  if (draws_from_seed(sc)) h.seed = sc.seed;  // a replay's header said seed=1 drawing nothing
  h.tp = sc.tp;
  h.tp_protocol = to_string(sc.tp_protocol);
  return h;
}

PipelineConfig config_for(const Scenario& sc, const RunSpec& spec) {
  PipelineConfig cfg = sc.cfg;
  cfg.split_backward = resolve_split(sc.split_mode, spec.hint);
  return cfg;
}

std::optional<std::int64_t> offer_ack_ns(const RealizedWork& work, CommMode comm) {
  if (comm != CommMode::Blocking || !work.offer_payload) return std::nullopt;
  return work.link_latency_ns;
}

bool draws_from_seed(const Scenario& sc) {
  return sc.replay_path.empty() || sc.workload.jitter.p > 0;
}

void refuse_unused_seed(const Scenario& sc, bool seed_given) {
  if (!seed_given || draws_from_seed(sc)) return;
  throw InputError(
      "`seed`: a `replay`'s durations are measured, and nothing is drawn to seed; it seeds the "
      "jitter a `workload` jitter:J1..J3 (or a `workload_file`'s jitter) adds on top");
}

// A replay's measured durations replace every drawn one: a preset's times and spreads were
// taken and changed nothing. Its jitter applies on top, and with TP its collective's and
// coordination's latencies where the trace has none. A workload file is held to the same rule
// (it was taken and ignored where the preset was refused).
void refuse_replaced_workload(Scenario& sc, const std::string& preset_given,
                              const std::string& workload_file, bool flags) {
  if (sc.replay_path.empty()) return;
  const auto name = [flags](std::string flag) {
    if (flags) return "--" + flag;
    std::replace(flag.begin(), flag.end(), '-', '_');
    return "`" + flag + "`";
  };
  // What realized_work takes from the workload on top of the measured durations.
  const bool tp = sc.tp > 1;
  const std::string with =
      ": with " + name("replay") + (tp ? "" : " (and " + name("tp") + " 1)") + " only ";
  const std::string takes =
      tp ? "jitter and the tensor-parallel latencies apply (jitter_p, jitter_floor_us, "
           "jitter_alpha or a jitter preset, on top of the measured durations; tp_collective_us "
           "and coord_latency_us where the trace timed none)"
         : "jitter applies (jitter_p, jitter_floor_us, jitter_alpha or a jitter preset, on top "
           "of the measured durations)";
  if (!preset_given.empty() && preset_given.rfind("jitter", 0) != 0)
    throw InputError(name("workload") + with +
                     "a jitter preset applies (jitter:J0..J3, on top of the measured durations); "
                     "got '" +
                     preset_given + "'");
  // jitter:J0 draws nothing: taken, it replayed the trace unchanged without a word (a file
  // drawing none is refused below).
  if (!preset_given.empty() && workload_file.empty() && sc.workload.jitter.p == 0)
    throw InputError(name("workload") + with + takes + "; '" + preset_given +
                     "' draws no jitter (its jitter_p is 0): leave it out to replay the "
                     "durations as measured");
  if (workload_file.empty()) return;
  std::vector<std::string> ignored;
  bool jitter = false, latency = false;  // what the file sets that the replay takes
  for (const std::string& f : workload_file_fields(workload_file)) {
    if (f == "calibration") continue;  // the measurements behind a calibration: no field
    const bool j = f.rfind("jitter_", 0) == 0 || f.rfind("preset jitter", 0) == 0;
    const bool l = tp && (f == "tp_collective_us" || f == "coord_latency_us");
    sc.file_sets_collective = sc.file_sets_collective || (tp && f == "tp_collective_us");
    sc.file_sets_coordination = sc.file_sets_coordination || (tp && f == "coord_latency_us");
    jitter = jitter || j;
    latency = latency || l;
    if (!j && !l) ignored.push_back(f);
  }
  if (!ignored.empty()) {
    std::string list;
    for (const std::string& f : ignored)
      list += (list.empty() ? "" : ", ") + f;
    throw InputError(name("workload-file") + with + takes + "; '" + workload_file + "' also sets " +
                     list + ", which the replay would ignore");
  }
  if (!jitter && !latency)
    throw InputError(name("workload-file") + with + takes + "; '" + workload_file + "' sets none");
  if (!latency && sc.workload.jitter.p == 0)  // {"jitter_alpha": 2} drew nothing, silently
    throw InputError(name("workload-file") + with + takes + "; '" + workload_file +
                     "' draws no jitter (its jitter_p is 0)");
}

void check_spec(const Scenario& sc, const RunSpec& spec) {
  WorkModel m(config_for(sc, spec));
  const Hint hint = make_hint(spec.hint, m);
  ArbiterOptions a;
  a.policy = spec.policy;
  a.limit = sc.limit;
  a.max_pending_w = sc.max_pending_w;
  resolve_options(a, hint, m);
  // A file's order may deadlock the rendezvous where its dependencies allow it.
  refuse_blocking_deadlock(m, hint, spec.policy, spec.comm, sc.tp, sc.tp_protocol);
}

namespace {

// Whether a trace imported for `a` holds the durations of `b`'s tasks: the import reads tasks
// by their index, which the ordering of forwards leaves as it is.
bool same_shape(const PipelineConfig& a, const PipelineConfig& b) {
  return a.pp == b.pp && a.vpp == b.vpp && a.microbatches == b.microbatches &&
         a.placement == b.placement && a.split_backward == b.split_backward;
}

}  // namespace

RealizedWork realized_work(const Scenario& sc, const WorkModel& m) {
  if (sc.replay_path.empty()) return realize(sc.workload, m, sc.tp, sc.seed);
  bool coordination_measured = false;
  RealizedWork work;
  if (sc.replay_read && same_shape(sc.replay_read_for, m.config())) {
    work = *sc.replay_read;
    coordination_measured = sc.replay_read_coordination;
  } else {
    work = read_replay_file(sc.replay_path, m, sc.tp, sc.trace, &coordination_measured);
  }
  // A jitter preset on top of a replay disturbs the measured durations (predictions for
  // `rrfp train --inject-jitter`).
  if (sc.workload.jitter.p > 0) apply_jitter(work, m, sc.workload.jitter, sc.seed);
  if (sc.tp > 1) {
    // A workload file's latency where the trace measured its own was taken and ignored (a
    // file's tp_collective_us 100 or 3000 replayed 88.41 ms alike).
    const auto measured = [&sc](const char* field, const char* what) {
      return InputError("`workload_file`: '" + sc.workload.origin + "' sets " + field +
                        ", but the replayed trace measured the " + what +
                        ", which the replay keeps: leave it out of the file");
    };
    // A trace of rrfp's own measured its collective (ImportedRun::collective_measured): kept.
    if (work.collective_ns == 0)
      work.collective_ns = static_cast<std::int64_t>(sc.workload.tp_collective_us * 1000);
    else if (sc.file_sets_collective)
      throw measured("tp_collective_us", "TP collective's time");
    // Likewise its coordination (ImportedRun::coordination_measured): a simulated step's
    // replays with the latency it was simulated with, not the --workload preset's.
    if (!coordination_measured)
      work.coord_ns = static_cast<std::int64_t>(sc.workload.coord_latency_us * 1000);
    else if (sc.file_sets_coordination)
      throw measured("coord_latency_us", "TP coordination's latency");
  }
  return work;
}

namespace {

SimOptions sim_options(const Scenario& sc, const RunSpec& spec) {
  SimOptions opt;
  opt.arbiter.policy = spec.policy;
  opt.arbiter.limit = sc.limit;
  opt.arbiter.max_pending_w = sc.max_pending_w;
  opt.comm = spec.comm;
  opt.tp_protocol = sc.tp_protocol;
  opt.record = sc.record;
  return opt;
}

// The limit of the lower bound's memory term (sim/metrics.hpp): the run's resolved limit where
// the limit holds D, that is ready dispatch with V = 1; none elsewhere.
int bound_limit(const RunSpec& spec, const WorkModel& m, int resolved_limit) {
  return spec.policy == Policy::Ready && m.vpp() == 1 ? resolved_limit : 0;
}

// Runs `spec` on work already drawn; the caller fills in the metrics.
ReportRun execute(const Scenario& sc, const RunSpec& spec, const WorkModel& m, const Hint& hint,
                  const RealizedWork& work, SimOptions opt, const Executor& exec) {
  ReportRun out;
  out.label = spec.label.empty() ? default_label(spec) : spec.label;
  ProgressLine progress(sc.progress);  // a line per 2^20 tasks ended at most
  if (sc.progress || sc.poll)
    opt.progress = [&sc, &out, &progress](std::int64_t done, std::int64_t total) {
      if (sc.poll) sc.poll();
      if ((done & ((1 << 20) - 1)) != 0 || !progress.due()) return;
      progress.show(tasks_done(out.label, done, total));
    };
  out.hint = spec.hint;
  out.policy = to_string(spec.policy);
  out.comm = to_string(spec.comm);
  out.cfg = m.config();
  out.result = exec(m, hint, work, opt);
  progress.finish();
  return out;
}

// The fewest tasks a shape holds whose lower bound is summed on a thread of its own, beside the
// simulation: a run of them takes a millisecond or more, a thread's start some 50 us.
constexpr int kBoundThreadTasks = 4096;

// The lower bounds of the runs of one shape, by their bound_limit(): the same work and limit
// give the same bound, so runs that share them (fixed 1F1B blocking and async) reckon it once.
class Bounds {
 public:
  Bounds(const WorkModel& m, const RealizedWork& work) : m_(m), work_(work) {}
  // The bound for `limit`: the one known or under way, or one started now on `threads`
  // threads of its own (0: one a core). Beside a simulation, which takes one core, the caller
  // passes the rest. Where no thread can be started (a process limit), it is summed on the
  // calling thread when asked for.
  std::shared_future<LowerBound> bound(int limit, int threads) {
    for (const auto& [l, f] : bounds_)
      if (l == limit) return f;
    auto sum = [this, limit, threads] { return lower_bound(m_, work_, limit, threads); };
    std::shared_future<LowerBound> f;
    // A small shape's bound is summed when asked for: a thread's start took longer than its
    // run and bound (a sweep of 20,000 points of P = 1 spent 70 us a run, most of it in the
    // kernel starting threads; 8 us now).
    const bool small = static_cast<double>(m_.num_tasks()) * work_.tp < kBoundThreadTasks;
    try {
      if (!small) f = std::async(std::launch::async, sum).share();
    } catch (const std::system_error&) {
    }
    if (!f.valid()) f = std::async(std::launch::deferred, sum).share();
    bounds_.push_back({limit, f});
    return f;
  }

 private:
  const WorkModel& m_;
  const RealizedWork& work_;
  std::vector<std::pair<int, std::shared_future<LowerBound>>> bounds_;
};

// The simulator's runs of one shape, `specs[i]` for each i in `which`, on one draw of the work.
// Each run's lower bound is reckoned beside its simulation, on the cores it leaves free.
void simulate_shape(const Scenario& sc, const std::vector<RunSpec>& specs,
                    const std::vector<std::size_t>& which, std::vector<ReportRun>& out) {
  const WorkModel m(config_for(sc, specs[which.front()]));
  const RealizedWork work = realized_work(sc, m);
  Bounds bounds(m, work);
  const int spare = std::max(cores(), 2) - 1;
  for (const std::size_t i : which) {
    const Hint hint = make_hint(specs[i].hint, m);
    const SimOptions opt = sim_options(sc, specs[i]);
    // The simulator resolves the options the same way, so the limit is known before the run.
    const int limit = bound_limit(specs[i], m, resolve_options(opt.arbiter, hint, m).limit);
    const std::shared_future<LowerBound> bound = bounds.bound(limit, spare);
    out[i] = execute(sc, specs[i], m, hint, work, opt, simulate);
    out[i].offer_ack_ns = offer_ack_ns(work, opt.comm);
    if (bound_limit(specs[i], m, out[i].result.arbiter.limit) != limit)
      throw Error("internal: the simulator resolved another limit than the bound's");
    out[i].metrics = compute_metrics(out[i].result, bound.get());
  }
}

}  // namespace

ReportRun run_scenario(const Scenario& sc, const RunSpec& spec, const Executor& exec,
                       Measured measured) {
  WorkModel m(config_for(sc, spec));
  Hint hint = make_hint(spec.hint, m);
  RealizedWork work = realized_work(sc, m);
  ReportRun out = execute(sc, spec, m, hint, work, sim_options(sc, spec), exec);
  // In one process the messages stay the model's, which the runtime emulated. Only a record of
  // the whole step is used: under mpirun a process other than rank 0 holds its own stages'
  // tasks alone (and reports nothing).
  const auto all = static_cast<std::size_t>(work.tp) * static_cast<std::size_t>(work.num_tasks);
  if (measured != Measured::No && out.result.tasks.size() == all)
    use_measured_compute(m, work, out.result);
  if (measured == Measured::OverTransport)
    std::fill(work.message_ns.begin(), work.message_ns.end(), 0);
  out.metrics = compute_metrics(
      out.result, lower_bound(m, work, bound_limit(spec, m, out.result.arbiter.limit)));
  return out;
}

ReportRun run_scenario(const Scenario& sc, const RunSpec& spec) {
  return std::move(run_scenarios(sc, {spec}).front());
}

std::vector<ReportRun> run_scenarios(const Scenario& sc, const std::vector<RunSpec>& specs) {
  std::vector<ReportRun> out(specs.size());
  // Runs of one shape (within a scenario only the split backward differs) share one draw of
  // the work; shape by shape, so that one draw is held at a time. The runs are deterministic,
  // so running them out of order changes no result; only the progress lines come in shape
  // order, and of two runs that cannot run, the error may name the later (callers check every
  // spec first: check_spec).
  for (const bool split : {false, true}) {
    std::vector<std::size_t> which;
    for (std::size_t i = 0; i < specs.size(); ++i)
      if (config_for(sc, specs[i]).split_backward == split) which.push_back(i);
    if (!which.empty()) simulate_shape(sc, specs, which, out);
  }
  return out;
}

}  // namespace rrfp
