// The trainer's intra-op threads (train/run.hpp): one a stage thread unless OMP_NUM_THREADS
// says otherwise, checked first.
#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "core/error.hpp"
#include "train/run.hpp"

namespace rrfp::train {

namespace {

// Starts as many threads at once as LibTorch's thread pool makes (one a core), then ends them.
// That pool waits for workers that never started: where no thread could be made (a thread or
// memory limit), `rrfp train` sat silent in at::set_num_threads for ever.
void check_threads_can_start() {
  const unsigned n = std::max(1u, std::thread::hardware_concurrency());
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  std::string failed;
  for (unsigned i = 0; i < n && failed.empty(); ++i) {
    try {
      threads.emplace_back([&go] { go.wait(false); });
    } catch (const std::system_error& e) {
      failed = e.code().message();
    }
  }
  go.store(true);
  go.notify_all();
  for (auto& t : threads)
    t.join();
  if (!failed.empty())
    throw Error("could not start LibTorch's " + std::to_string(n) + " pool threads (" + failed +
                "): this machine's thread or memory limit");
}

}  // namespace

void use_one_intra_op_thread() {
  const char* omp = std::getenv("OMP_NUM_THREADS");
  if (omp != nullptr && *omp != '\0') {
    // A count past the machine's reach ended the run mid-step in OpenMP's own words.
    char* end = nullptr;
    const long n = std::strtol(omp, &end, 10);
    if (end == omp || (*end != '\0' && *end != ',') || n < 1 || n > kMaxOmpThreads)
      throw InputError("OMP_NUM_THREADS: '" + std::string(omp).substr(0, 40) +
                       "' is no thread count (1 to " + std::to_string(kMaxOmpThreads) + ")");
  }
  check_threads_can_start();
  if (omp == nullptr || *omp == '\0') at::set_num_threads(1);
}

}  // namespace rrfp::train
