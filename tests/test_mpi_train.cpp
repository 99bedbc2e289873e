// Training over Open MPI, one process per rank (ctest runs this program under mpirun with the
// process count each test needs and a gtest filter). Every process also runs the in-process
// equivalent itself (threads) and compares the parameters it holds.
#include <gtest/gtest.h>

#include "core/error.hpp"
#include "mpi_main.hpp"
#include "runtime/errors.hpp"
#include "train_helpers.hpp"
#include "train_job.hpp"

namespace rrfp::train {
namespace {

using test::g_world;

TrainOptions base(int tp, const std::string& hint, Policy policy, bool split) {
  TrainOptions o = small_run(2, 4, 4, 11);
  o.pipe.split_backward = split;
  o.hint = hint;
  o.runtime.arbiter.policy = policy;
  o.runtime.tp = tp;
  return o;
}

void delay(TrainOptions& o, std::uint64_t seed) {
  o.wrap = [seed](std::unique_ptr<StageProgram> p, int stage,
                  int r) -> std::unique_ptr<StageProgram> {
    return std::make_unique<Delayed>(std::move(p), stage + 100 * r, seed);
  };
}

std::vector<double> train(Trainer& t) {
  std::vector<double> losses;
  for (int s = 0; s < 3; ++s)
    losses.push_back(t.step().loss);
  return losses;
}

// Largest difference between the chunks this process holds (TP rank `tp_rank`) and an
// in-process trainer's: the same TP rank's, or with `cut` the matching shards of a TP=1 run.
double compare(Trainer& mine, Trainer& ref, int tp_rank, bool cut = false) {
  const int stage = g_world->stage();
  double worst = 0;
  for (int c : mine.model().chunks_of(stage)) {
    Chunk& a = *mine.chunk(tp_rank, c);
    Chunk& b = *ref.chunk(cut ? 0 : tp_rank, c);
    for (size_t i = 0; i < a.params().size(); ++i) {
      const auto want = cut ? a.cut(static_cast<int>(i), b.params()[i]) : b.params()[i];
      worst = std::max(worst, (want - a.params()[i]).abs().max().item<double>());
    }
  }
  return worst;
}

struct Case {
  const char* hint;
  Policy policy;
  bool split;
};

// mpirun -np 2: PP=2 over MPI equals the in-process run bit for bit.
TEST(MpiTrain, PipelineMatchesInProcessBitwise) {
  for (const Case& c : {Case{"1f1b", Policy::Fixed, false}, Case{"bf", Policy::Ready, false},
                        Case{"bfw", Policy::Ready, true}}) {
    Trainer ref(base(1, c.hint, c.policy, c.split));
    const auto ref_loss = train(ref);
    for (std::uint64_t seed : {1, 2}) {
      TrainOptions o = base(1, c.hint, c.policy, c.split);
      o.job = g_world;
      delay(o, seed);
      Trainer mine(o);
      const auto loss = train(mine);
      EXPECT_EQ(loss, ref_loss) << c.hint << " seed " << seed;
      EXPECT_EQ(compare(mine, ref, 0), 0.0) << c.hint << " seed " << seed;
      // Bitwise, not merely close:
      for (int ch : mine.model().chunks_of(g_world->stage()))
        for (size_t i = 0; i < mine.chunk(0, ch)->params().size(); ++i)
          EXPECT_TRUE(torch::equal(mine.chunk(0, ch)->params()[i], ref.chunk(0, ch)->params()[i]));
    }
  }
}

// mpirun -np 4: PP=2 x TP=2 with per-rank delays, both protocols: bitwise the in-process TP=2
// run, and within 1e-5 of TP=1 (why: test_train_tp.cpp).
TEST(MpiTrain, Tp2MatchesInProcessAndTp1) {
  Trainer tp1(base(1, "bfw", Policy::Ready, true));
  const auto loss1 = train(tp1);
  for (TpProtocol p : {TpProtocol::Leader, TpProtocol::Agree}) {
    TrainOptions in = base(2, "bfw", Policy::Ready, true);
    in.runtime.tp_protocol = p;
    Trainer tp2(in);
    train(tp2);
    TrainOptions o = in;
    o.job = g_world;
    delay(o, 3 + g_world->rank());
    Trainer mine(o);
    const auto loss = train(mine);
    const int r = g_world->tp_rank();
    EXPECT_EQ(compare(mine, tp2, r), 0.0) << to_string(p);
    const double d = compare(mine, tp1, r, true);
    EXPECT_LE(d, 1e-5) << to_string(p);
    for (int s = 0; s < 3; ++s)
      EXPECT_NEAR(loss[s], loss1[s], 1e-5);
  }
}

// mpirun -np 8: PP=2 x TP=2 x DP=2 over MPI holds bitwise what the in-process job of 8 threads
// holds, rank for rank.
TEST(MpiTrain, FullLayoutMatchesTheInProcessJob) {
  auto make = [] {
    TrainOptions o = base(2, "bfw", Policy::Ready, true);
    o.dp = 2;
    o.runtime.tp_protocol = TpProtocol::Agree;
    return o;
  };
  TrainOptions o = make();
  o.job = g_world;
  Trainer mine(o);
  const auto loss = train(mine);
  const std::uint64_t h = param_hash(mine);
  const std::vector<double> out{static_cast<double>(h >> 32), static_cast<double>(h & 0xffffffff),
                                loss[2]};
  const auto all = g_world->all_gather(out);
  if (g_world->rank() != 0) return;
  const auto ranks = train_local_job(8, 3, make);
  for (int r = 0; r < 8; ++r) {
    const std::uint64_t got =
        (static_cast<std::uint64_t>(all[r][0]) << 32) | static_cast<std::uint64_t>(all[r][1]);
    EXPECT_EQ(got, ranks[r].hash) << "rank " << r;
    EXPECT_EQ(all[r][2], ranks[r].losses[2]) << "rank " << r;
  }
}

}  // namespace
}  // namespace rrfp::train

RRFP_MPI_TEST_MAIN()
