// The optimizer of `rrfp train` and the gradient it steps on, against what they state, checked
// outside their own code: the learning rate's warm-up and cosine decay in closed form, the clip
// of the global gradient norm to `clip`, one AdamW step against LibTorch's torch::optim::AdamW,
// and the gradient against plain autograd of the step's loss. Every other training test
// compares a pipelined run with a single-stage run, and both share this code: a decay without
// its floor, a warm-up off by one, a wrong bias correction or a clip to half its value passed
// them all, and so did a gradient M times too large, or one of a single microbatch.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "dist/local_job.hpp"
#include "rank_threads.hpp"
#include "train/trainer.hpp"
#include "train_helpers.hpp"

namespace rrfp::train {
namespace {

// A checkpoint's tensors (train/checkpoint.hpp's format, read here on its own): the
// parameters, then AdamW's first and second moments, each in the header's order.
struct Saved {
  std::vector<std::string> names;
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
  for (const auto& t : header.at("tensors"))
    s.names.push_back(t.at("name").get<std::string>());
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

// model.hpp's GPT written again in plain LibTorch ops, in float64, from the parameters by name:
// the loss of one microbatch, the mean cross-entropy of its positions.
torch::Tensor reference_loss(const std::map<std::string, torch::Tensor>& p, const GptConfig& c,
                             const torch::Tensor& tokens, const torch::Tensor& targets) {
  auto at = [&](const std::string& name) { return p.at(name); };
  auto norm = [&](const torch::Tensor& x, const std::string& n) {
    return torch::layer_norm(x, {c.d_model}, at(n + ".weight"), at(n + ".bias"));
  };
  auto linear = [&](const torch::Tensor& x, const std::string& n) {
    return torch::nn::functional::linear(x, at(n + ".weight"), at(n + ".bias"));
  };
  const std::int64_t n = tokens.size(0), hd = c.d_model / c.heads;
  auto x = at("embed.tokens").index_select(0, tokens) + at("embed.positions").slice(0, 0, n);
  const auto future = torch::ones({n, n}, torch::kBool).triu(1);
  for (int l = 0; l < c.layers; ++l) {
    const std::string b = "block" + std::to_string(l) + ".";
    const auto qkv = linear(norm(x, b + "ln1"), b + "qkv").split(c.d_model, 1);
    auto heads = [&](const torch::Tensor& t) { return t.view({n, c.heads, hd}).transpose(0, 1); };
    const auto scores = heads(qkv[0]).matmul(heads(qkv[1]).transpose(1, 2)) / std::sqrt(hd * 1.0);
    const auto att = scores.masked_fill(future, -INFINITY).softmax(-1).matmul(heads(qkv[2]));
    x = x + linear(att.transpose(0, 1).reshape({n, c.d_model}), b + "proj");
    x = x + linear(torch::gelu(linear(norm(x, b + "ln2"), b + "fc1")), b + "fc2");
  }
  return torch::nn::functional::cross_entropy(linear(norm(x, "head.ln"), "head.out"), targets);
}

// The first step's gradient of `layout` (P stages, `dp` replicas of M microbatches each; a job
// of threads where dp > 1) against autograd of the mean loss over the step's dp * M
// microbatches, in float64. From AdamW's moments of zero, the first moment the checkpoint holds
// is (1 - beta1) times the gradient the step used (no clip).
void check_first_gradient(int pp, int microbatches, int dp) {
  const std::string path = ::testing::TempDir() + "rrfp-gradient.bin";
  auto make = [&] {
    TrainOptions o = small_run(pp, microbatches, 2, 3);
    o.opt.clip = 0;
    o.dp = dp;
    return o;
  };
  const int world = dp > 1 ? pp * dp : 1;  // P stages alone run in this process's threads
  auto jobs = make_local_jobs(world);
  std::vector<std::unique_ptr<Trainer>> ranks(world);
  test::on_every_rank(world, [&](int r) {
    TrainOptions o = make();
    if (world > 1) o.job = jobs[r].get();
    ranks[r] = std::make_unique<Trainer>(o);
    ranks[r]->step();
    ranks[r]->save(path);
  });
  const Saved s = read_saved(path);
  const TrainOptions o = make();
  const GptConfig c = o.model;
  // The model as it was before the step, in float64.
  std::map<std::string, torch::Tensor> p;
  {
    std::vector<std::unique_ptr<Chunk>> whole;
    for (int k = 0; k < pp; ++k) {
      whole.push_back(std::make_unique<Chunk>(c, k, pp));
      for (size_t i = 0; i < whole.back()->params().size(); ++i)
        p[whole.back()->names()[i]] =
            whole.back()->params()[i].detach().to(torch::kFloat64).requires_grad_(true);
    }
  }
  ASSERT_EQ(p.size(), s.names.size());
  const StepBatch batch =
      ranks[0]->data().batch(o.data_seed, 0, microbatches * dp, o.window, false);
  torch::Tensor loss = torch::zeros({}, torch::kFloat64);
  for (int mb = 0; mb < batch.microbatches(); ++mb)
    loss = loss + reference_loss(p, c, batch.tokens[mb], batch.targets[mb]);
  (loss / batch.microbatches()).backward();
  for (size_t i = 0; i < s.names.size(); ++i) {
    const torch::Tensor want = p.at(s.names[i]).grad();
    const torch::Tensor got = s.exp_avg[i].to(torch::kFloat64) / (1 - o.opt.beta1);
    const double err = (got - want).norm().item<double>(), size = want.norm().item<double>();
    EXPECT_LE(err, 1e-4 * size + 1e-9)
        << s.names[i] << ": |trained - autograd| " << err << " of |autograd| " << size
        << " (P=" << pp << " M=" << microbatches << " DP=" << dp << ")";
  }
}

TEST(Gradient, IsAutogradsOfTheMeanLossOverTheStepsMicrobatches) {
  check_first_gradient(1, 4, 1);
  check_first_gradient(2, 3, 1);
}

TEST(Gradient, ReplicasAverageTheirGradients) {
  check_first_gradient(2, 2, 2);
}

}  // namespace
}  // namespace rrfp::train
