#pragma once
// The step as a weighted task graph, for the planner's priorities and bounds: each task's
// duration (its TP group's slowest rank plus the collective), the lag of each cross-stage
// message, a topological order, and each task's tail (the longest path after it ends).
#include <array>
#include <cstdint>
#include <vector>

#include "sim/workload.hpp"

namespace rrfp {

struct TaskGraph {
  int n = 0;
  std::vector<int> stage;                // by task index
  std::vector<std::int64_t> dur;         // slowest rank's compute + collective
  std::vector<std::int64_t> lag;         // message latency of the task's output (rank 0's)
  std::vector<int> topo;                 // every task, each after its dependencies
  std::vector<std::int64_t> tail;        // longest path from the task's end to the step's end
  std::vector<std::array<int, 2>> deps;  // dependency indices (-1: none)
  std::vector<std::array<bool, 2>> dep_remote;

  // The earliest the dependency `k` of `j` can let `j` start, given its end.
  std::int64_t arrival(int j, int k, std::int64_t dep_end) const {
    return dep_end + (dep_remote[j][k] ? lag[deps[j][k]] : 0);
  }
};

TaskGraph make_graph(const WorkModel& m, const RealizedWork& w);

}  // namespace rrfp
