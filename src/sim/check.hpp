#pragma once
// Invariant checks over an executed run (simulated or real): used by the property tests of
// the simulator and, later, of the threaded runtime.
#include <string>
#include <vector>

#include "sim/simulator.hpp"

namespace rrfp {

struct CheckOptions {
  Policy policy = Policy::Ready;
  int limit = 0;          // D bound under `ready` (V >= 2: limit + V); 0 = unchecked
  int max_pending_w = 0;  // 0 = unchecked
};

// Every task ran exactly once on every rank, after all its inputs; no rank ran two tasks at
// once; D and pending W stayed within bounds. Returns the violations (empty = all good).
std::vector<std::string> check_run(const WorkModel& m, int tp, const std::vector<TaskRecord>& tasks,
                                   const CheckOptions& opt);

}  // namespace rrfp
