#pragma once
// `rrfp train`'s flags, parsed by the `rrfp` program (which has no LibTorch) and run by the
// `rrfp-train` program beside it (which has): `rrfp` parses the flags and refuses a few
// combinations, then hands the same command line to `rrfp-train` (exec, same process), which
// checks the values; so every other subcommand starts without loading LibTorch (0.45 s and
// 160 MB for nothing, on every process of an MPI job).
#include <cstdint>
#include <functional>
#include <string>

#include "cli/options.hpp"
#include "train/options.hpp"

namespace rrfp {

struct TrainFlags {
  ShapeFlags shape;
  DispatchFlags dispatch;
  train::TrainRun run;  // model, data, optimizer and output flags land here directly
  std::uint64_t seed = 1;
  double timeout_s = 0;  // set from the training options' default
  int window = 1;        // --window: RuntimeOptions::window
  int idle_spin_us = 0;  // --idle-spin-us: RuntimeOptions::idle_spin_us
  std::string inject_jitter;
  TransportKind transport = TransportKind::Inproc;
};

// What `rrfp train` does once its flags are parsed. `rrfp-train` installs the trainer
// (install_trainer, cli/train_run.cpp); without one, `rrfp train` runs `rrfp-train` from its own
// directory with the same arguments, or says this build has no LibTorch.
using TrainRunner = std::function<void(const TrainFlags&)>;
void set_train_runner(TrainRunner run);
void install_trainer();  // defined only in rrfp-train (cli/train_run.cpp)

// The command line main() was given, for handing it on.
void set_command_line(int argc, char** argv);

}  // namespace rrfp
