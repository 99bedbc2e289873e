#pragma once
// A job whose processes share a c10d ProcessGroup (torchrun, or any torch.distributed group):
// one pipeline, one stage per process, over the c10d transport. Data parallelism and TP need
// subgroups, which this job does not make yet: the layout must be P x 1 x 1.
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <chrono>

#include "dist/job.hpp"

namespace rrfp {

class C10dWorld final : public Job {
 public:
  // `timeout`: the deadline of the barrier before each step and of the gathers.
  C10dWorld(c10::intrusive_ptr<c10d::ProcessGroup> group, std::chrono::milliseconds timeout);

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void set_layout(const JobLayout& l) override;
  int replica() const override { return 0; }
  int endpoint() const override { return rank_; }
  Hosting hosting() override;
  std::vector<std::vector<double>> all_gather(std::span<const double> mine) override;
  std::vector<std::vector<std::byte>> gather_to_root(std::span<const std::byte> mine) override;
  std::vector<std::vector<float>> dp_all_gather(std::span<const float> mine) override;
  // c10d cannot end the other processes: this one exits, and the launcher (torchrun) ends
  // the rest when it sees a worker fail.
  [[noreturn]] void abort(int code) override;

 private:
  // Every rank's bytes, by rank (an all-gather of sizes, then of padded buffers).
  std::vector<std::vector<std::byte>> gather_bytes(std::span<const std::byte> mine);
  void barrier();

  c10::intrusive_ptr<c10d::ProcessGroup> pg_;
  std::chrono::milliseconds timeout_;
  int rank_ = 0, size_ = 1;
};

}  // namespace rrfp
