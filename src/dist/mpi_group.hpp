#pragma once
// The tensor-parallel collective of a group whose ranks are processes: its own communicator
// (split from the job by replica and stage). Each all-reduce first all-gathers the task id and
// size of every rank, so ranks that entered different tasks' collectives all fail with
// CollectiveMismatchError naming ranks and tasks; then it all-gathers the data and sums it in
// rank order, the same bits as the in-process TpGroup. Waiting polls a non-blocking
// collective with short sleeps rather than spinning inside MPI, and gives up when aborted.
#include <atomic>

#include "runtime/collective.hpp"

namespace rrfp {

class MpiTpGroup final : public TpCollective {
 public:
  MpiTpGroup(void* comm, int stage);  // `comm`: an MPI_Comm, kept opaque here
  ~MpiTpGroup() override;

  int size() const override { return size_; }
  void all_reduce(int rank, const TaskId& task, std::span<float> data,
                  CollectiveIdle* idle) override;
  void poke(int) override { poked_.store(true); }  // this process hosts one rank of the group
  void abort() override { aborted_.store(true); }

 private:
  // Until `request` completes; runs `idle` (may be null) when poked meanwhile.
  void wait(void* request, CollectiveIdle* idle);

  void* comm_;
  int stage_, size_ = 1, rank_ = 0;
  std::atomic<bool> aborted_{false};
  std::atomic<bool> poked_{false};
};

}  // namespace rrfp
