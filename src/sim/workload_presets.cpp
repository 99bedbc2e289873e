// The workload presets (`--workload`) and the jitter levels J0-J3 (sim/workload.hpp); the
// rest of the workload, its checks and its draws, is in sim/workload.cpp.
#include <string>
#include <vector>

#include "core/error.hpp"
#include "sim/workload.hpp"

namespace rrfp {

namespace {

std::string known_presets() {
  std::string out;
  for (const auto& n : workload_names())
    out += (out.empty() ? "" : ", ") + n;
  return out;
}

WorkloadParams language() {
  WorkloadParams w;
  w.preset = "language";
  w.forward_us = 4000;
  w.backward_ratio_min = 1.6;
  w.backward_ratio_max = 2.1;
  w.head_factor = 1.5;
  w.compute_sigma = 0.03;
  w.tokens_sigma = 0.5;
  w.tokens_max = 4 * w.tokens_mean;  // the context window bounds a packed microbatch
  w.comm_latency_us = 30;
  w.comm_bandwidth_gbps = 50;
  w.comm_sigma = 0.2;
  return w;
}

// The regime the paper measured (arXiv 2605.18750; docs/results-paper.md says how each value
// was fitted and where the fit falls short):
// * compute spread (p95-p5)/p50 = 0.73 at fixed inputs (§2.2): log-normal sigma 0.209;
// * per-stage forward 18 ms and backward 0.4-0.6 of it (Fig. 2 shows backward below forward;
//   the scale fits Table 3's compute per iteration, 0.86 s at PP16 and 32 microbatches);
// * the last stage (LM head and loss) 1.35x the others: slowest for about half the
//   microbatches at P = 8 (Fig. 6 has 86-97%), but a larger head bounds the speedup below
//   Table 3's (RRFP's iteration is 1.75x the mean compute, so no stage may carry more);
// * messages bimodal: most about 0.45 ms, 15% about 27 ms: (p95-p5)/p50 about 60 (§2.2: 58.7)
//   and Fig. 2's 0-30 ms; with these, fixed 1F1B is blocked 66% at PP16 (Table 3: 66.7%).
WorkloadParams paper() {
  WorkloadParams w;
  w.preset = "paper";
  w.forward_us = 18000;
  w.backward_ratio_min = 0.4;
  w.backward_ratio_max = 0.6;
  w.head_factor = 1.35;
  w.compute_sigma = 0.209;
  w.tokens_sigma = 0;
  w.comm_latency_us = 450;
  w.comm_sigma = 0.1;
  w.comm_slow_prob = 0.15;
  w.comm_slow_us = 27000;
  return w;
}

}  // namespace

JitterLevel jitter_level(int j) {
  switch (j) {
    case 0:
      return {0, 0, 0};
    case 1:
      return {0.1, 5000, 0.5};
    case 2:
      return {0.2, 10000, 1.0};
    case 3:
      return {0.3, 15000, 1.5};
  }
  throw InputError("jitter level must be J0..J3, got J" + std::to_string(j));
}

const std::vector<std::string>& workload_names() {
  static const std::vector<std::string> n = {"uniform",    "language",  "multimodal", "jitter:J0",
                                             "jitter:J1",  "jitter:J2", "jitter:J3",  "straggler",
                                             "paper-comm", "paper"};
  return n;
}

WorkloadParams workload_preset(const std::string& name, const std::string& what) {
  if (name == "uniform") return WorkloadParams{};
  if (name == "language") return language();
  if (name == "multimodal") {
    WorkloadParams w = language();
    w.preset = name;
    w.images_scale = 3;
    w.images_alpha = 1.5;
    w.images_max = 32;
    w.image_us = 1200;
    w.image_tokens = 256;
    w.vision_chunks = 1;
    return w;
  }
  if (name == "jitter" || name.rfind("jitter:", 0) == 0) {
    WorkloadParams w = language();
    // Fixed inputs and no compute noise: besides the injected jitter, only the backward's ratio
    // to its forward (drawn per task) and the messages' noise vary.
    w.tokens_sigma = 0;
    w.compute_sigma = 0;
    const std::string lvl = name == "jitter" ? "J2" : name.substr(7);
    if (lvl.size() != 2 || (lvl[0] != 'J' && lvl[0] != 'j') || lvl[1] < '0' || lvl[1] > '3')
      throw InputError(what + ": unknown jitter level '" + lvl + "' (expected J0, J1, J2 or J3)");
    w.jitter = jitter_level(lvl[1] - '0');
    // One name per level, whatever the spelling ("jitter", "jitter:j2"): a sweep tells the
    // same preset given twice by it.
    w.preset = std::string("jitter:J") + lvl[1];
    return w;
  }
  if (name == "straggler") {
    WorkloadParams w = language();
    w.preset = name;
    w.straggler_stage = -2;
    w.straggler_factor = 2.5;
    return w;
  }
  if (name == "paper-comm") {
    // The spread the paper measured at fixed inputs: (p95-p5)/p50 = 0.73 for compute, 58.7 for
    // messages. Log-normal: sigma 0.209 gives 0.70, sigma 2.48 gives 59.
    WorkloadParams w = language();
    w.preset = name;
    w.tokens_sigma = 0;
    w.compute_sigma = 0.209;
    w.comm_latency_us = 50;
    w.comm_bandwidth_gbps = 0;
    w.comm_sigma = 2.48;
    return w;
  }
  if (name == "paper") return paper();
  throw InputError(what + ": unknown preset '" + name + "' (expected one of " + known_presets() +
                   ")");
}

}  // namespace rrfp
