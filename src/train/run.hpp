#pragma once
// `rrfp train` as a library call. This header is free of LibTorch so the CLI can include it;
// run_training lives in the training layer.
#include <vector>

#include "train/options.hpp"

namespace rrfp::train {

struct TrainSummary {
  int steps = 0;
  double first_loss = 0, last_loss = 0;
  double val_loss = 0, unigram_entropy = 0;
  double tokens_per_s = 0, mean_step_ms = 0, mean_bubble = 0;
  double overhead_share = 0;          // dispatch gaps / (gaps + model compute), all ranks
  double outside_pipeline_share = 0;  // step time outside the runtime step (optimizer, data)
  // The ready policy's limit as resolved (0 under the fixed policy, whose list decides) and the
  // largest D = F done - B done each stage reached over the steps (semantics.md §2).
  int limit = 0;
  std::vector<int> peak_d = {};
  int stopped_by = 0;  // the signal that stopped the run early (0: it ran every step)
};

// Trains, printing progress, and writes into `out`: loss.csv, loss.svg, and the last step's
// trace.json and timeline.svg. Throws InputError for bad options, data or output directory.
TrainSummary run_training(const TrainRun& o);

// One intra-op thread a stage thread for the process's runs, unless OMP_NUM_THREADS sets
// another count (`rrfp train` calls it; a library caller keeps torch's count): the stage threads
// are the parallelism, and torch's default (half the cores) oversubscribed larger machines and
// made the weights differ in their last bits from one machine to another. Throws InputError for
// an OMP_NUM_THREADS that is no list of counts of 1 to kMaxOmpThreads (core/omp_env.hpp; an
// empty one counts as unset), and Error where the threads of LibTorch's pool cannot be started.
void use_one_intra_op_thread();

// The largest allocation kept_freed_host_memory() serves from malloc's heap, and how much freed
// memory the heap keeps rather than hands back to the system.
constexpr int kKeptAllocationBytes = 32 << 20;
constexpr int kKeptFreeBytes = 1 << 30;

// Keeps the host memory a step frees for the next step (`rrfp train` calls it; a library caller
// keeps its process's malloc settings): allocations of up to kKeptAllocationBytes come from the
// heap, which keeps up to kKeptFreeBytes of freed memory, so a step's tensors reuse the last
// step's pages instead of faulting fresh ones in. Peak memory stays what the steps need.
// GLIBC_TUNABLES that set malloc's thresholds take precedence; outside glibc it does nothing.
void keep_freed_host_memory();

}  // namespace rrfp::train
