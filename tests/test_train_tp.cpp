// Tensor parallelism in the GPT (threads as ranks): after 3 steps a TP=2 run's shards equal
// the matching slices of the TP=1 run's parameters within a float32 tolerance, for both
// coordination protocols, under random per-rank delays, with and without the split backward;
// with coordination disabled, ranks that see arrivals in different orders run different
// collectives, and that is reported as a CollectiveMismatchError instead of wrong numbers.
#include <gtest/gtest.h>

#include "core/error.hpp"
#include "expect_error.hpp"
#include "train/trainer.hpp"
#include "train_helpers.hpp"

namespace rrfp::train {
namespace {

// Why this tolerance: TP sums each row-parallel product in two halves and adds them (and the
// bias) in another order than one GEMM does, so gradients differ in the last bits (~1e-7
// relative). AdamW divides by sqrt(v), which turns a gradient near zero into a step of up to
// lr in either direction, so we keep lr small and eps large enough that no element's update
// depends on rounding: then 3 steps stay within 1e-5 of each other (measured: 4.8e-7).
constexpr double kTolerance = 1e-5;

TrainOptions options(int tp, TpProtocol protocol, const std::string& hint, bool split) {
  TrainOptions o = small_run(2, 4, 2, 5);
  o.pipe.split_backward = split;
  o.hint = hint;
  o.runtime.tp = tp;
  o.runtime.tp_protocol = protocol;
  return o;
}

void delay(TrainOptions& o, std::uint64_t seed, int before_f_us = 0, int after_b_us = 0,
           int slow_rank = -1) {
  o.wrap = [=](std::unique_ptr<StageProgram> p, int stage, int r) -> std::unique_ptr<StageProgram> {
    const bool slow = r == slow_rank;
    return std::make_unique<Delayed>(std::move(p), stage + 100 * r, seed,
                                     stage == 0 ? before_f_us : 0, slow ? after_b_us : 0);
  };
}

// Largest |TP shard - slice of the TP=1 parameter| over every parameter of every rank.
double max_diff(Trainer& tp, Trainer& ref, int t) {
  double worst = 0;
  for (int c = 0; c < ref.model().chunks(); ++c) {
    Chunk& whole = *ref.chunk(0, c);
    for (int r = 0; r < t; ++r) {
      Chunk& part = *tp.chunk(r, c);
      for (size_t i = 0; i < whole.params().size(); ++i) {
        const auto want = part.cut(static_cast<int>(i), whole.params()[i]);
        EXPECT_EQ(want.sizes(), part.params()[i].sizes()) << whole.names()[i];
        worst = std::max(worst, (want - part.params()[i]).abs().max().item<double>());
      }
    }
  }
  return worst;
}

struct Schedule {
  const char* hint;
  bool split;
};

TEST(TrainTp, Tp2MatchesTp1ForBothProtocolsUnderPerRankDelays) {
  for (const Schedule& c : {Schedule{"1f1b", false}, Schedule{"bfw", true}}) {
    Trainer ref(options(1, TpProtocol::Leader, c.hint, c.split));
    std::vector<double> ref_loss;
    for (int s = 0; s < 3; ++s)
      ref_loss.push_back(ref.step().loss);
    for (TpProtocol p : {TpProtocol::Leader, TpProtocol::Agree})
      for (std::uint64_t seed : {1, 2}) {
        TrainOptions o = options(2, p, c.hint, c.split);
        delay(o, seed);
        Trainer tp(o);
        for (int s = 0; s < 3; ++s)
          EXPECT_NEAR(tp.step().loss, ref_loss[s], 1e-5) << c.hint << " step " << s;
        const double d = max_diff(tp, ref, 2);
        EXPECT_LE(d, kTolerance) << c.hint << " " << to_string(p) << " seed " << seed;
        EXPECT_GT(tp.parameters().size(), ref.parameters().size());  // two ranks' shards
      }
  }
}

TEST(TrainTp, ShardsAreCutFromTheWholeInitialization) {
  Trainer ref(options(1, TpProtocol::Leader, "1f1b", false));
  Trainer tp(options(2, TpProtocol::Leader, "1f1b", false));
  EXPECT_EQ(max_diff(tp, ref, 2), 0.0);
  EXPECT_ERROR(Trainer(options(3, TpProtocol::Leader, "1f1b", false)), InputError,
               "`tp`: 3 does not divide `heads` 4");  // 4 heads
  // The data's tokens are bytes: a smaller vocabulary failed the first forward in LibTorch's
  // words ("index out of range in self").
  TrainOptions small = options(1, TpProtocol::Leader, "1f1b", false);
  small.model.vocab = 100;
  EXPECT_ERROR(Trainer{small}, InputError,
               "`vocab`: must be between 256 (the data's tokens are bytes) and 1048576, got 100");
}

// Stage 1's TP rank 1 holds each B's output back 100 ms, so stage 0's rank 1 gets every
// gradient later than rank 0 while F tasks (5 ms each, 16 of them) are still ready: under bf,
// rank 0 turns to the first B at about 15 ms, rank 1 to the next F, and their collectives
// differ. Rank 0 would have to fall 100 ms behind for both to choose alike: with a 15 ms hold
// and 8 forwards, 10 ms behind did, in about one run in twenty on a loaded machine.
TEST(TrainTp, WithoutCoordinationTheDivergenceIsReported) {
  TrainOptions o = options(2, TpProtocol::None, "bf", false);
  o.pipe.microbatches = 16;
  o.runtime.arbiter.limit = 16;
  delay(o, 1, 5'000, 100'000, 1);
  Trainer tp(o);
  try {
    tp.step();
    FAIL() << "no mismatch reported";
  } catch (const CollectiveMismatchError& e) {
    EXPECT_NE(std::string(e.what()).find("collective order diverged"), std::string::npos)
        << e.what();
  }
  // The same skew under both protocols trains normally.
  for (TpProtocol p : {TpProtocol::Leader, TpProtocol::Agree}) {
    o.runtime.tp_protocol = p;
    Trainer ok(o);
    EXPECT_NO_THROW(ok.step()) << to_string(p);
  }
}

}  // namespace
}  // namespace rrfp::train
