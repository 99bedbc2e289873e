#pragma once
// The schedules the training tests run a small model under (test_train.cpp, on a GPU
// test_train_cuda.cpp) and the options of one on the CPU (test_train.cpp,
// test_train_checkpoint.cpp): one hint, policy, P, V and split each.
#include <cstdint>
#include <memory>
#include <string>

#include "train/trainer.hpp"
#include "train_helpers.hpp"

namespace rrfp::train {

struct Case {
  const char* name;
  int pp, vpp;
  std::string hint;
  Policy policy;
  bool split;
  Placement placement = Placement::Loop;
};

inline TrainOptions options(const Case& c, std::uint64_t delay_seed) {
  TrainOptions o;
  o.model.d_model = 32;
  o.model.heads = 2;
  o.model.layers = 4;
  o.model.max_seq = 64;
  o.model.seed = 3;
  o.pipe.pp = c.pp;
  o.pipe.vpp = c.vpp;
  o.pipe.microbatches = 4;
  o.pipe.split_backward = c.split;
  o.pipe.placement = c.placement;
  o.hint = c.hint;
  o.runtime.arbiter.policy = c.policy;
  o.steps = 3;
  o.opt.warmup = 1;
  o.opt.lr = 1e-2;
  o.opt.clip = 0.5;  // small enough to clip: the global norm must agree bitwise too
  o.window = {8, 48};
  o.runtime.timeout_ms = 60'000;
  if (delay_seed)
    o.wrap = [delay_seed](std::unique_ptr<StageProgram> p, int stage,
                          int) -> std::unique_ptr<StageProgram> {
      return std::make_unique<Delayed>(std::move(p), stage, delay_seed);
    };
  return o;
}

}  // namespace rrfp::train
