// Training as a job of ranks (threads standing in for the processes of an mpirun job):
// PP x TP x DP layouts through the same Trainer code that runs over MPI.
#include <gtest/gtest.h>

#include "core/error.hpp"
#include "train_helpers.hpp"
#include "train_job.hpp"

namespace rrfp::train {
namespace {

TrainOptions base(int pp, int microbatches) {
  return small_run(pp, microbatches, 4, 7);
}

TEST(TrainJob, PipelineRanksAsJobMatchTheInProcessRunBitwise) {
  Trainer ref(base(2, 4));
  std::vector<double> ref_loss;
  for (int s = 0; s < 3; ++s)
    ref_loss.push_back(ref.step().loss);
  const auto ranks = train_local_job(2, 3, [] { return base(2, 4); });
  for (int s = 0; s < 3; ++s)
    EXPECT_EQ(ranks[0].losses[s], ref_loss[s]);
  std::vector<torch::Tensor> got;
  for (const auto& r : ranks)
    for (const auto& p : r.trainer->parameters())
      got.push_back(p);
  const auto want = ref.parameters();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_TRUE(torch::equal(got[i], want[i])) << ref.parameter_names()[i];
}

// PP=2 x TP=2 x DP=2 (8 ranks, M=4 each) against one pipeline of M=8 without TP: the same data
// and math, summed in another order (float32 tolerance, see test_train_tp.cpp).
TEST(TrainJob, FullLayoutMatchesTheSingleReplicaRun) {
  TrainOptions one = base(2, 8);
  Trainer ref(one);
  std::vector<double> ref_loss;
  for (int s = 0; s < 3; ++s)
    ref_loss.push_back(ref.step().loss);
  const auto ranks = train_local_job(8, 3, [] {
    TrainOptions o = base(2, 4);
    o.runtime.tp = 2;
    o.dp = 2;
    o.runtime.tp_protocol = TpProtocol::Agree;
    return o;
  });
  for (const auto& r : ranks)
    for (int s = 0; s < 3; ++s)
      EXPECT_NEAR(r.losses[s], ref_loss[s], 1e-5);
  double worst = 0;
  for (int rank = 0; rank < 8; ++rank) {
    Trainer& t = *ranks[rank].trainer;
    const int e = rank % 4, stage = e / 2, tp_rank = e % 2;
    for (int c : t.model().chunks_of(stage)) {
      Chunk& part = *t.chunk(tp_rank, c);
      Chunk& whole = *ref.chunk(0, c);
      for (size_t i = 0; i < whole.params().size(); ++i)
        worst =
            std::max(worst, (part.cut(static_cast<int>(i), whole.params()[i]) - part.params()[i])
                                .abs()
                                .max()
                                .item<double>());
    }
  }
  EXPECT_LE(worst, 1e-5);
  EXPECT_GT(worst, 0.0);  // not bitwise: a test that compares for real
  // Both replicas hold the same bits.
  for (int e = 0; e < 4; ++e)
    EXPECT_EQ(ranks[e].hash, ranks[4 + e].hash) << "endpoint " << e;
}

TEST(TrainJob, BadLayoutsAreRefused) {
  EXPECT_THROW(train_local_job(3, 1, [] { return base(2, 4); }), InputError);
  TrainOptions o = base(2, 4);
  o.dp = 2;
  EXPECT_THROW(Trainer{o}, InputError);  // DP needs a job
}

}  // namespace
}  // namespace rrfp::train
