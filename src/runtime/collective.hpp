#pragma once
// The collective of one stage's T tensor-parallel ranks, whatever carries it (threads of one
// process: TpGroup; processes: comm/mpi_group). An all-reduce is tagged with the task that
// runs it, so ranks that enter the collectives of different tasks are reported
// (CollectiveMismatchError naming ranks and tasks) instead of summing unrelated data or
// waiting forever. Sums are taken in rank order on every rank, so every rank gets the same
// bits, and the in-process and the multi-process groups give the same bits too.
#include <span>

#include "core/task.hpp"

namespace rrfp {

class TpCollective {
 public:
  virtual ~TpCollective() = default;
  virtual int size() const = 0;
  // Blocks until every rank of the group has entered the collective of `task`, then leaves
  // the elementwise sum in `data` on every rank. Throws Aborted when the step is torn down; a
  // mismatch is reported through the step's FailureState first.
  virtual void all_reduce(int rank, const TaskId& task, std::span<float> data) = 0;
  // Wakes every rank of this process waiting in a collective; they throw Aborted.
  virtual void abort() = 0;
};

}  // namespace rrfp
