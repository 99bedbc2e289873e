#pragma once
// The tensor-parallel collective of one stage whose T ranks are threads of this process.
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <optional>
#include <vector>

#include "runtime/collective.hpp"

namespace rrfp {

class TpGroup final : public TpCollective {
 public:
  TpGroup(int stage, int size) : stage_(stage), size_(size), in_(size), poked_(size) {}

  int size() const override { return size_; }
  void all_reduce(int rank, const TaskId& task, std::span<float> data,
                  CollectiveIdle* idle) override;
  void poke(int rank) override;
  void abort() override;

 private:
  // Aborted, or the divergence that ended the group (under mu_).
  [[noreturn]] void throw_aborted() const;

  int stage_, size_;
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  std::uint64_t generation_ = 0;
  std::optional<TaskId> task_;
  int first_rank_ = 0;
  std::vector<std::vector<float>> in_;  // by rank: this collective's contributions
  std::vector<float> result_;
  std::vector<char> poked_;  // by rank: poke() since its idle work last ran
  bool aborted_ = false;
  std::exception_ptr diverged_;  // the CollectiveMismatchError that aborted it, if one did
};

}  // namespace rrfp
