#pragma once
// The collective of one stage's T tensor-parallel ranks, in one process: an all-reduce (sum)
// of a small float buffer, tagged with the task that runs it. Ranks that enter the collectives
// of different tasks are reported (CollectiveMismatchError naming ranks and tasks) instead of
// silently summing unrelated data or waiting forever.
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <span>
#include <vector>

#include "core/task.hpp"
#include "runtime/failure.hpp"

namespace rrfp {

class TpGroup {
 public:
  TpGroup(int stage, int size, FailureState& failure)
      : stage_(stage), size_(size), failure_(failure) {}

  int size() const { return size_; }
  // Blocks until every rank of the group has entered the collective of `task`, then leaves the
  // elementwise sum in `data` on every rank. Throws Aborted when the step is torn down (a
  // mismatch is reported through the FailureState first).
  void all_reduce(int rank, const TaskId& task, std::span<float> data);
  // Wakes every rank waiting in a collective; they throw Aborted.
  void abort();

 private:
  int stage_, size_;
  FailureState& failure_;
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0, first_rank_ = 0;
  std::uint64_t generation_ = 0;
  TaskId task_{};
  std::vector<float> sum_, result_;
  bool aborted_ = false;
};

}  // namespace rrfp
