#pragma once
// The collective of one stage's T tensor-parallel ranks, whatever carries it (threads of one
// process: TpGroup; processes: dist/mpi_group). An all-reduce is tagged with the task that
// runs it, so ranks that enter the collectives of different tasks are reported
// (CollectiveMismatchError naming ranks and tasks) instead of summing unrelated data or
// waiting forever. Sums are taken in rank order on every rank, so every rank gets the same
// bits, and the in-process and the multi-process groups give the same bits too.
#include <span>

#include "core/task.hpp"

namespace rrfp {

// What a rank waiting in a collective for its peers does meanwhile. Under blocking transfers it
// accepts the offers an idle rank would take: a peer may be held by a send that only this
// rank's stage can take, and would otherwise never enter the collective (semantics.md §4).
class CollectiveIdle {
 public:
  virtual ~CollectiveIdle() = default;
  // Called on the waiting rank's own thread, with no lock of the collective held.
  virtual void serve() = 0;
};

class TpCollective {
 public:
  virtual ~TpCollective() = default;
  virtual int size() const = 0;
  // Blocks until every rank of the group has entered the collective of `task`, then leaves
  // the elementwise sum in `data` on every rank. Throws Aborted when the step is torn down; a
  // mismatch is reported through the step's FailureState first. While it waits for its peers
  // to enter, the rank runs `idle` (may be null) each time it is poked.
  virtual void all_reduce(int rank, const TaskId& task, std::span<float> data,
                          CollectiveIdle* idle) = 0;
  // Something came that `rank`'s idle work may take: run it if the rank waits for its peers,
  // else when it next does. Any thread; may be called under the stage's lock.
  virtual void poke(int rank) = 0;
  // Wakes every rank of this process waiting in a collective; they throw Aborted.
  virtual void abort() = 0;
};

}  // namespace rrfp
