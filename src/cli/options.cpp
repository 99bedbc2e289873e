#include "cli/options.hpp"

#include "core/error.hpp"

namespace rrfp {

void add_shape_flags(CLI::App* app, ShapeFlags& f) {
  app->add_option("--pp", f.pp, "pipeline stages P")->capture_default_str();
  app->add_option("--vpp", f.vpp, "model chunks per stage V")->capture_default_str();
  app->add_option("--placement", f.placement, "chunk placement: loop or vshape")
      ->capture_default_str();
  app->add_option("--microbatches,-m", f.microbatches, "microbatches per step M")
      ->capture_default_str();
  app->add_option("--split-backward", f.split,
                  "split backward into B (input grad) and W (weight grad): auto (on for zb-* and "
                  "bfw), on, off")
      ->capture_default_str();
}

void add_workload_flags(CLI::App* app, WorkloadFlags& f) {
  app->add_option("--workload", f.workload,
                  "preset: uniform, language, multimodal, jitter:J0..J3, straggler, paper-comm")
      ->capture_default_str();
  app->add_option("--workload-file", f.workload_file, "JSON overriding any workload parameter");
  app->add_option(
      "--replay", f.replay,
      "CSV of measured durations: stage,chunk,microbatch,kind,duration_us[,tp_rank][,send_us]");
  app->add_option("--seed", f.seed, "seed of every random duration")->capture_default_str();
  app->add_option("--tp", f.tp, "tensor-parallel ranks per stage T")->capture_default_str();
  app->add_option("--tp-protocol", f.tp_protocol, "TP coordination: leader or agree")
      ->capture_default_str();
}

PipelineConfig to_config(const ShapeFlags& f) {
  PipelineConfig c;
  c.pp = f.pp;
  c.vpp = f.vpp;
  c.microbatches = f.microbatches;
  c.placement = parse_placement(f.placement);
  validate(c);
  resolve_split(f.split, "");  // rejects a bad value early
  return c;
}

WorkloadParams load_workload(const WorkloadFlags& f) {
  if (f.tp < 1) throw InputError("--tp: must be at least 1, got " + std::to_string(f.tp));
  parse_tp_protocol(f.tp_protocol);
  if (!f.workload_file.empty()) return read_workload_file(f.workload_file, f.workload);
  return workload_preset(f.workload);
}

}  // namespace rrfp
