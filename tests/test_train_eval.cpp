// Validation as evaluation passes through the pipeline: the held-out loss is bitwise that of
// one thread running every chunk, on any pipeline layout and schedule; it leaves the training
// step's gradients alone; tensor-parallel ranks and the processes of a job (threads standing
// in for them) take part and agree. The reference line the losses are drawn against is the
// entropy of the bytes they predict.
#include <gtest/gtest.h>

#include <cmath>

#include "train/data.hpp"
#include "train/image_text.hpp"
#include "train/trainer.hpp"
#include "train_helpers.hpp"
#include "train_job.hpp"

namespace rrfp::train {
namespace {

constexpr int kBatches = 2;

// The held-out loss as a plain loop computes it: every chunk in order on this thread, the
// microbatch losses added in order. `t` holds every chunk (TP 1, one process).
double plain_validation(const Trainer& t, const TrainOptions& o) {
  torch::NoGradGuard no_grad;
  double sum = 0;
  int n = 0;
  const int chunks = t.model().chunks(), mbs = t.model().microbatches();
  for (int b = 0; b < kBatches; ++b) {
    const StepBatch vb = t.data().batch(o.data_seed, b, mbs, o.window, true);
    for (int mb = 0; mb < mbs; ++mb) {
      torch::Tensor x = vb.tokens[mb];
      const torch::Tensor images = vb.images.empty() ? torch::Tensor() : vb.images[mb];
      for (int c = 0; c < chunks; ++c)
        x = t.chunk(0, c)->forward(x, vb.targets[mb], nullptr, c == 0 ? images : torch::Tensor());
      sum += x.item<double>();
      ++n;
    }
  }
  return sum / n;
}

TrainOptions layout(int pp, int vpp, const std::string& hint, Policy policy, bool split) {
  TrainOptions o = small_run(pp, 4, 4, 11);
  o.pipe.vpp = vpp;
  o.hint = hint;
  o.runtime.arbiter.policy = policy;
  o.pipe.split_backward = split;
  return o;
}

TEST(TrainEval, TheLossIsBitwiseAPlainLoopsOnEveryLayout) {
  struct Case {
    int pp, vpp;
    const char* hint;
    Policy policy;
    bool split;
  };
  for (const Case& c :
       {Case{1, 1, "1f1b", Policy::Fixed, false}, Case{2, 1, "1f1b", Policy::Fixed, false},
        Case{2, 1, "bfw", Policy::Ready, true}, Case{2, 2, "bf", Policy::Ready, false},
        Case{4, 1, "zb-h1", Policy::Fixed, true}}) {
    const TrainOptions o = layout(c.pp, c.vpp, c.hint, c.policy, c.split);
    Trainer t(o);
    t.step();
    const auto v = t.validation_loss(kBatches);
    ASSERT_TRUE(v.has_value());
    EXPECT_EQ(*v, plain_validation(t, o))
        << "P=" << c.pp << " V=" << c.vpp << " " << c.hint << (c.split ? " split" : "");
    EXPECT_GT(*v, 0.0);
  }
}

TEST(TrainEval, TheImageTextTaskToo) {
  TrainOptions o = small_run(2, 4, 4, 3);
  o.task = "image-text";
  o.max_images = 3;
  Trainer t(o);
  const auto v = t.validation_loss(kBatches);
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(*v, plain_validation(t, o));
}

// A validation between two steps changes no bit of what training computes.
TEST(TrainEval, ValidatingBetweenStepsLeavesTrainingAsItWas) {
  for (const bool split : {false, true}) {
    const TrainOptions o = layout(2, 1, split ? "bfw" : "1f1b", Policy::Ready, split);
    Trainer plain(o), validated(o);
    std::vector<double> want, got;
    for (int s = 0; s < 3; ++s) {
      want.push_back(plain.step().loss);
      got.push_back(validated.step().loss);
      ASSERT_TRUE(validated.validation_loss(1).has_value());
    }
    EXPECT_EQ(got, want) << (split ? "split" : "whole");
    const auto a = plain.parameters(), b = validated.parameters();
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i)
      EXPECT_TRUE(bitwise_equal(a[i], b[i])) << plain.parameter_names()[i];
  }
}

TEST(TrainEval, AStopRequestEndsItBeforeTheFirstBatch) {
  Trainer t(small_run(2, 4, 4, 11));
  std::atomic<int> stop{15};
  EXPECT_FALSE(t.validation_loss(1000, &stop).has_value());
  stop = 0;
  EXPECT_TRUE(t.validation_loss(1, &stop).has_value());
}

// TP sums its row-parallel products in another order: within float32 rounding of TP 1.
TEST(TrainEval, TensorParallelRanksValidateTogether) {
  const TrainOptions one = small_run(2, 4, 4, 11);
  Trainer ref(one);
  const double want = *ref.validation_loss(kBatches);
  for (const TpProtocol p : {TpProtocol::Leader, TpProtocol::Agree}) {
    TrainOptions o = one;
    o.runtime.tp = 2;
    o.runtime.tp_protocol = p;
    Trainer t(o);
    const auto v = t.validation_loss(kBatches);
    ASSERT_TRUE(v.has_value());
    EXPECT_NEAR(*v, want, 1e-5 * want);
    EXPECT_NE(*v, 0.0);
  }
}

// Every process of a job gets the same loss: bitwise the in-process run's for a pipeline of
// processes, and for PP 2 x TP 2 x DP 2 (M=4 each) that of one replica of M=8 within float32
// rounding: the held-out batch is the job's, 8 microbatches, as for that replica.
TEST(TrainEval, EveryProcessOfAJobGetsTheLoss) {
  struct Layout {
    int world, tp, dp;
  };
  for (const Layout l : {Layout{2, 1, 1}, Layout{4, 1, 2}, Layout{8, 2, 2}}) {
    const int m = 4 * l.dp;
    Trainer ref(small_run(2, m, 4, 11));
    const double want = *ref.validation_loss(kBatches);
    auto jobs = make_local_jobs(l.world);
    std::vector<double> got(l.world, -1);
    test::on_every_rank(l.world, [&](int r) {
      TrainOptions o = small_run(2, 4, 4, 11);
      o.runtime.tp = l.tp;
      o.runtime.tp_protocol = TpProtocol::Agree;
      o.dp = l.dp;
      o.job = jobs[r].get();
      Trainer t(o);
      got[r] = t.validation_loss(kBatches).value_or(-2);
    });
    for (int r = 0; r < l.world; ++r) {
      if (l.tp == 1)
        EXPECT_EQ(got[r], want) << "world " << l.world << " rank " << r;
      else
        EXPECT_NEAR(got[r], want, 1e-5 * want) << "world " << l.world << " rank " << r;
      EXPECT_EQ(got[r], got[0]) << "world " << l.world << " rank " << r;
    }
  }
}

// The reference line of the image-text task is the entropy of the bytes its loss predicts: the
// captions' targets. It was measured on their inputs (the first byte in, the last out): 2.727
// nats where the targets' is 2.681, at the default 4 images.
TEST(ImageTextData, TheUnigramEntropyIsThatOfTheTargets) {
  const ImageText data;
  ByteHistogram targets, inputs;
  for (int i = 0; i < 64; ++i) {
    const StepBatch b = data.batch(12345, i, 8, {}, false);
    for (size_t mb = 0; mb < b.targets.size(); ++mb) {
      for (std::int64_t j = 0; j < b.targets[mb].size(0); ++j)
        if (const auto t = b.targets[mb][j].item<std::int64_t>(); t >= 0)
          targets.add(static_cast<unsigned char>(t));
      for (std::int64_t j = 0; j < b.tokens[mb].size(0); ++j)
        inputs.add(static_cast<unsigned char>(b.tokens[mb][j].item<std::int64_t>()));
    }
  }
  EXPECT_EQ(data.unigram_entropy(), targets.entropy());
  EXPECT_GT(std::abs(inputs.entropy() - targets.entropy()), 0.01);
}

}  // namespace
}  // namespace rrfp::train
