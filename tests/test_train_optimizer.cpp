// The optimizer of `rrfp train` against what it states, checked outside its own code: the
// learning rate's warm-up and cosine decay in closed form, the clip of the global gradient
// norm to `clip`, and one AdamW step against LibTorch's torch::optim::AdamW. Every other
// training test compares a pipelined run with a single-stage run, and both share this code: a
// decay without its floor, a warm-up off by one, a wrong bias correction or a clip to half its
// value passed them all.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "train/trainer.hpp"
#include "train_helpers.hpp"

namespace rrfp::train {
namespace {

// A checkpoint's tensors (train/checkpoint.hpp's format, read here on its own): the
// parameters, then AdamW's first and second moments, each in the header's order.
struct Saved {
  std::vector<torch::Tensor> params, exp_avg, exp_avg_sq;
};

Saved read_saved(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  const std::string bytes{std::istreambuf_iterator<char>(in), {}};
  std::uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data() + 12, sizeof header_len);  // after magic and version
  const auto header = nlohmann::json::parse(bytes.substr(20, header_len));
  size_t at = 20 + header_len;
  Saved s;
  for (auto* group : {&s.params, &s.exp_avg, &s.exp_avg_sq})
    for (const auto& t : header.at("tensors")) {
      const auto shape = t.at("shape").get<std::vector<std::int64_t>>();
      torch::Tensor x = torch::empty(shape, torch::kFloat32);
      std::memcpy(x.data_ptr(), bytes.data() + at, x.nbytes());
      at += x.nbytes();
      group->push_back(x);
    }
  EXPECT_EQ(at + 8, bytes.size()) << "then the checksum";
  return s;
}

TEST(Optimizer, TheLearningRateWarmsUpThenDecaysAlongACosine) {
  TrainOptions o = small_run(1, 2, 1, 1);
  o.steps = 9;
  o.opt.warmup = 3;
  o.opt.lr = 1e-3;
  o.opt.min_lr_ratio = 0.1;
  Trainer t(o);
  const double lr = 1e-3, floor = 1e-4, pi = std::acos(-1.0);
  for (int s = 0; s < o.steps; ++s) {
    // Warm-up: (s + 1) / warmup of lr. Then from lr down a half cosine over steps - warmup
    // steps, towards the floor (the last step stops short of it).
    const double want =
        s < 3 ? lr * (s + 1) / 3 : floor + 0.5 * (lr - floor) * (1 + std::cos(pi * (s - 3) / 6.0));
    EXPECT_NEAR(t.step().lr, want, 1e-15) << "step " << s;
  }
}

TEST(Optimizer, AStepIsLibTorchsAdamWOnTheClippedGradient) {
  const std::string path = ::testing::TempDir() + "rrfp-optimizer.bin";
  for (const double clip : {0.0, 1e-2}) {
    TrainOptions o = small_run(1, 2, 1, 1);
    o.opt.clip = clip;
    o.opt.weight_decay = 0.1;
    Trainer t(o);
    std::vector<torch::Tensor> ref;
    for (const auto& p : t.parameters())
      ref.push_back(p.detach().clone());
    const StepReport r = t.step();
    t.save(path);
    const Saved s = read_saved(path);
    // From moments of zero, the first is (1 - beta1) times the gradient the step used.
    double sq = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      const torch::Tensor g = s.exp_avg[i] / (1 - o.opt.beta1);
      EXPECT_TRUE(torch::allclose(s.exp_avg_sq[i], (1 - o.opt.beta2) * g * g, 1e-5, 1e-12));
      sq += g.to(torch::kFloat64).pow(2).sum().item<double>();
      ref[i].mutable_grad() = g;
    }
    if (clip == 0) {
      EXPECT_NEAR(std::sqrt(sq), r.grad_norm, 1e-5 * r.grad_norm);
    } else {
      ASSERT_GT(r.grad_norm, 10 * clip) << "the case no longer clips";
      EXPECT_NEAR(std::sqrt(sq), clip, 1e-5 * clip) << "clipped to `clip`";
    }
    torch::optim::AdamW adamw(ref, torch::optim::AdamWOptions(r.lr)
                                       .betas({o.opt.beta1, o.opt.beta2})
                                       .eps(o.opt.eps)
                                       .weight_decay(o.opt.weight_decay));
    adamw.step();
    const auto now = t.parameters();
    for (size_t i = 0; i < ref.size(); ++i) {
      EXPECT_TRUE(torch::allclose(now[i], ref[i], 1e-6, 1e-9))
          << "clip " << clip << " tensor " << i;
      EXPECT_TRUE(bitwise_equal(now[i], s.params[i]));
    }
  }
}

}  // namespace
}  // namespace rrfp::train
