#pragma once
// A c10d Work that has completed, for fake process groups in the c10d tests.
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <chrono>

namespace rrfp::test {

class DoneWork final : public c10d::Work {
 public:
  bool wait(std::chrono::milliseconds) override { return true; }
  bool isCompleted() override { return true; }
  void abort() override {}
};

}  // namespace rrfp::test
