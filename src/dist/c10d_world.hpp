#pragma once
// A job whose processes share torch.distributed process groups (torchrun): one stage per
// process over the c10d transport. With data parallelism, the caller makes the subgroups
// (torch.distributed.new_group, which every process must call alike): this replica's pipeline
// (ranks replica * P .. replica * P + P - 1, its stage = its rank there) and this stage's
// replicas (the same stage of every replica, by replica). No TP.
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <chrono>

#include "dist/job.hpp"

namespace rrfp {

class C10dWorld final : public Job {
 public:
  // `pipeline`: the group of this replica's stages; `replicas`: this stage's group across the
  // replicas, or null with one replica. `timeout`: the deadline of the barrier before each
  // step and of the gathers.
  C10dWorld(c10::intrusive_ptr<c10d::ProcessGroup> pipeline,
            c10::intrusive_ptr<c10d::ProcessGroup> replicas, std::chrono::milliseconds timeout);

  int rank() const override { return replica_ * stages_ + stage_; }
  int size() const override { return stages_ * replicas_; }
  void set_layout(const JobLayout& l) override;
  int replica() const override { return replica_; }
  int endpoint() const override { return stage_; }
  Hosting hosting() override;
  std::vector<std::vector<std::byte>> all_gather_bytes(std::span<const std::byte> mine) override;
  // Unlike the Job contract with DP: rank 0 gets the bytes of its replica's stages only (all a
  // step record needs; the replicas' own stages are not gathered across).
  std::vector<std::vector<std::byte>> gather_to_root(std::span<const std::byte> mine) override;
  std::vector<std::vector<std::byte>> dp_all_gather(std::span<const std::byte> mine) override;
  std::vector<std::vector<std::byte>> replica_all_gather(std::span<const std::byte> mine) override {
    return gather_bytes(*pg_, mine);
  }
  // Sends and receives on the pipeline group with tags above every transport channel's.
  std::vector<std::vector<std::byte>> exchange(std::span<const std::byte> mine,
                                               std::span<const int> peers) override;
  // c10d cannot end the other processes: this one exits, and the launcher (torchrun) ends
  // the rest when it sees a worker fail.
  [[noreturn]] void abort(int code) override;

 private:
  // Every rank's bytes of `pg`, by rank: one all-gather of each size with its first bytes, and
  // a second of padded buffers only when one is longer.
  std::vector<std::vector<std::byte>> gather_bytes(c10d::ProcessGroup& pg,
                                                   std::span<const std::byte> mine);
  void barrier();
  void wait(const c10::intrusive_ptr<c10d::Work>& w, const char* what);

  c10::intrusive_ptr<c10d::ProcessGroup> pg_, dp_;
  std::chrono::milliseconds timeout_;
  int stage_ = 0, stages_ = 1, replica_ = 0, replicas_ = 1;
};

}  // namespace rrfp
