#pragma once
// Flags shared by the subcommands, bound to CLI11 with their defaults.
#include <CLI/CLI.hpp>
#include <string>

#include "cli/experiment.hpp"

namespace rrfp {

// Ends the program with `code` and no message: the other processes of an mpirun job when
// rank 0 has already printed the one line about bad input that they all hit.
struct QuietExit {
  int code;
};

struct ShapeFlags {
  int pp = 8, vpp = 1, microbatches = 32;
  std::string placement = "loop";
  std::string split = "auto";
};

struct WorkloadFlags {
  std::string workload = "multimodal";
  std::string workload_file, replay;
  std::uint64_t seed = 1;
  int tp = 1;
  std::string tp_protocol = "leader";
};

void add_shape_flags(CLI::App* app, ShapeFlags& f);
void add_workload_flags(CLI::App* app, WorkloadFlags& f);
PipelineConfig to_config(const ShapeFlags& f);  // validated; split decided per run
WorkloadParams load_workload(const WorkloadFlags& f);

void setup_simulate(CLI::App& app);
void setup_run(CLI::App& app);
void setup_train(CLI::App& app);
void setup_schedule(CLI::App& app);
void setup_sweep(CLI::App& app);

}  // namespace rrfp
