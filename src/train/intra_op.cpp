// The trainer's intra-op threads (train/run.hpp): one a stage thread unless OMP_NUM_THREADS
// says otherwise, checked first; and a job's processes' counts compared (train/run_parts.hpp).
#include <ATen/Parallel.h>

#include <span>
#include <string>

#include "core/cores.hpp"
#include "core/error.hpp"
#include "core/format.hpp"
#include "core/omp_env.hpp"
#include "core/threads.hpp"
#include "dist/job.hpp"
#include "train/run.hpp"
#include "train/run_parts.hpp"

namespace rrfp::train {

namespace {

// Starts as many threads at once as LibTorch's thread pool makes (one a core), then ends them.
// That pool waits for workers that never started: where no thread could be made (a thread or
// memory limit), `rrfp train` sat silent in at::set_num_threads for ever.
void check_threads_can_start() {
  const int n = machine_cores();
  run_together(
      n, [](int) {}, [n](int) { return "LibTorch's " + std::to_string(n) + " pool threads"; });
}

}  // namespace

void use_one_intra_op_thread() {
  // A count past the machine's reach ended the run mid-step in OpenMP's own words.
  if (omp_num_threads_set())
    return;  // torch's pool takes that count; LibTorch makes it as it needs
  // LibTorch's pool, made here, waits for workers that never started.
  check_threads_can_start();
  at::set_num_threads(1);
}

std::string intra_op_threads_differ(Job& job) {
  const double mine = at::get_num_threads();
  const Differing d = differing_over_job(job, std::span(&mine, 1)).at(0);
  if (d.other.empty()) return {};
  std::string each;
  for (int r : d.other)
    if (each.size() < 200) each += ", rank " + std::to_string(r) + " " + fmt("%g", d.by_rank[r]);
  return "OMP_NUM_THREADS: the processes compute with other intra-op thread counts (rank " +
         std::to_string(d.first) + " " + fmt("%g", d.by_rank[d.first]) + each +
         "); a step's last bits depend on the count, so the job's results match no one-process "
         "run's: give every process the same (mpirun -x OMP_NUM_THREADS=N)";
}

}  // namespace rrfp::train
