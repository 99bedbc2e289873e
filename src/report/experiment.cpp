#include "report/experiment.hpp"

#include <cstdio>

#include "core/error.hpp"
#include "sim/replay.hpp"

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

std::string default_label(const RunSpec& r) {
  return to_string(r.policy) + " " + r.hint + " (" + to_string(r.comm) + ")";
}

ReportHeader header_of(const Scenario& sc) {
  ReportHeader h;
  h.workload = sc.replay_path.empty() ? sc.workload_name : "replay:" + sc.replay_path;
  h.seed = sc.seed;
  h.tp = sc.tp;
  h.tp_protocol = to_string(sc.tp_protocol);
  return h;
}

PipelineConfig config_for(const Scenario& sc, const RunSpec& spec) {
  PipelineConfig cfg = sc.cfg;
  cfg.split_backward = resolve_split(sc.split_mode, spec.hint);
  return cfg;
}

void check_spec(const Scenario& sc, const RunSpec& spec) {
  WorkModel m(config_for(sc, spec));
  const Hint hint = make_hint(spec.hint, m);
  ArbiterOptions a;
  a.policy = spec.policy;
  a.limit = sc.limit;
  a.max_pending_w = sc.max_pending_w;
  resolve_options(a, hint, m);
}

RealizedWork realized_work(const Scenario& sc, const WorkModel& m) {
  if (sc.replay_path.empty()) return realize(sc.workload, m, sc.tp, sc.seed);
  RealizedWork work = read_replay_file(sc.replay_path, m, sc.tp, sc.trace);
  // A jitter preset on top of a replay disturbs the measured durations (predictions for
  // `rrfp train --inject-jitter`).
  if (sc.workload.jitter.p > 0) apply_jitter(work, m, sc.workload.jitter, sc.seed);
  if (sc.tp > 1) {
    work.collective_ns = static_cast<std::int64_t>(sc.workload.tp_collective_us * 1000);
    work.coord_ns = static_cast<std::int64_t>(sc.workload.coord_latency_us * 1000);
  }
  return work;
}

ReportRun run_scenario(const Scenario& sc, const RunSpec& spec, const Executor& exec) {
  const PipelineConfig cfg = config_for(sc, spec);
  WorkModel m(cfg);
  Hint hint = make_hint(spec.hint, m);
  const RealizedWork work = realized_work(sc, m);
  SimOptions opt;
  opt.arbiter.policy = spec.policy;
  opt.arbiter.limit = sc.limit;
  opt.arbiter.max_pending_w = sc.max_pending_w;
  opt.comm = spec.comm;
  opt.tp_protocol = sc.tp_protocol;
  opt.record = sc.record;
  ReportRun out;
  out.label = spec.label.empty() ? default_label(spec) : spec.label;
  if (sc.progress)
    opt.progress = [&out](std::int64_t done, std::int64_t total) {
      std::fprintf(stderr, "\r%s: %lld of %lld tasks (%.0f%%)", out.label.c_str(),
                   static_cast<long long>(done), static_cast<long long>(total),
                   100.0 * static_cast<double>(done) / static_cast<double>(total));
      std::fflush(stderr);
    };
  out.hint = spec.hint;
  out.policy = to_string(spec.policy);
  out.comm = to_string(spec.comm);
  out.cfg = cfg;
  out.result = exec(m, hint, work, opt);
  if (sc.progress && m.num_tasks() >= (1 << 20)) std::fprintf(stderr, "\r\033[K");
  // The memory bound where the limit holds D (sim/metrics.hpp): ready dispatch, V = 1.
  const bool held = spec.policy == Policy::Ready && m.vpp() == 1;
  out.metrics =
      compute_metrics(out.result, lower_bound(m, work, held ? out.result.arbiter.limit : 0));
  return out;
}

}  // namespace rrfp
