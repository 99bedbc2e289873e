#pragma once
// Shared helpers for simulator tests: build a model, a hint and realized work, then run.
#include "core/hint.hpp"
#include "sim/metrics.hpp"
#include "sim/simulator.hpp"
#include "sim/workload.hpp"

namespace rrfp::test {

struct SimRun {
  StepRecord result;
  RunMetrics metrics;
};

inline PipelineConfig config(int p, int m, int v = 1, bool split = false,
                             Placement pl = Placement::Loop) {
  PipelineConfig c;
  c.pp = p;
  c.microbatches = m;
  c.vpp = v;
  c.split_backward = split;
  c.placement = pl;
  return c;
}

// Uniform work: F = f, B (whole backward) = b, split B = W = b / 2; no communication cost.
inline RealizedWork unit_work(const WorkModel& m, double f_us = 1000, double b_us = 1000) {
  WorkloadParams w;
  w.forward_us = f_us * m.vpp();  // per-stage cost; a chunk costs 1/V of it
  w.backward_ratio_min = w.backward_ratio_max = b_us / f_us;
  w.weight_share = 0.5;
  return realize(w, m, 1, 1);
}

inline SimRun run(const WorkModel& m, const std::string& hint_name, Policy policy,
                  const RealizedWork& work, SimOptions opt = {}) {
  Hint h = make_hint(hint_name, m);
  opt.arbiter.policy = policy;
  SimRun r;
  r.result = simulate(m, h, work, opt);
  r.metrics = compute_metrics(r.result, lower_bound(m, work));
  return r;
}

}  // namespace rrfp::test
