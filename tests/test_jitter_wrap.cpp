// The jitter `rrfp train --inject-jitter` adds to real compute (emulate/jitter.hpp): a stall
// after a training step's F and B, none in an evaluation pass.
#include <gtest/gtest.h>

#include "core/clock.hpp"
#include "emulate/jitter.hpp"

namespace rrfp {
namespace {

// A program whose tasks do nothing, in a training step or an evaluation pass as told.
class Idle final : public StageProgram {
 public:
  explicit Idle(bool eval) : eval_(eval) {}
  Payload forward(TaskContext&, int, int, Payload p) override { return p; }
  Payload backward(TaskContext&, int, int, Payload p) override { return p; }
  bool evaluating() const override { return eval_; }

 private:
  bool eval_;
};

// Seconds a forward and a backward of `program` take, both hit (p = 1).
double seconds_of_f_and_b(StageProgram& program) {
  const std::int64_t t0 = now_ns();
  TaskContext f(0, 0, 1, {Kind::F, 0, 0}, nullptr);
  program.forward(f, 0, 0, {});
  TaskContext b(0, 0, 1, {Kind::B, 0, 0}, nullptr);
  program.backward(b, 0, 0, {});
  return static_cast<double>(now_ns() - t0) / 1e9;
}

TEST(InjectedJitter, StallsATrainingStepsTasksAndNoEvaluationPasses) {
  JitterLevel hit_always;
  hit_always.p = 1;
  hit_always.alpha = 1;
  hit_always.floor_us = 0.1e6;  // each stall at least 0.05 s
  auto training = with_jitter(std::make_unique<Idle>(false), hit_always, 1, 7);
  EXPECT_GE(seconds_of_f_and_b(*training), 0.1);
  EXPECT_FALSE(training->evaluating());
  // In an evaluation pass the backward does nothing: each task drew a stall sized by the floor
  // (here at least 15 s each, slower than the bound below by far).
  hit_always.floor_us = 30e6;
  auto evaluation = with_jitter(std::make_unique<Idle>(true), hit_always, 1, 7);
  EXPECT_TRUE(evaluation->evaluating());
  EXPECT_LT(seconds_of_f_and_b(*evaluation), 10.0);
}

}  // namespace
}  // namespace rrfp
