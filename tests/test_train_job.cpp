// Training as a job of ranks (threads standing in for the processes of an mpirun job):
// PP x TP x DP layouts through the same Trainer code that runs over MPI.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "core/error.hpp"
#include "dist/job.hpp"
#include "expect_error.hpp"
#include "train/run.hpp"
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
  EXPECT_ERROR(train_local_job(3, 1, [] { return base(2, 4); }), InputError,
               "a local job of 3 ranks: the layout `pp` 2 x `tp` 1 x `dp` 1 needs 2 ranks");
  TrainOptions o = base(2, 4);
  o.dp = 2;
  EXPECT_ERROR(Trainer{o}, InputError,
               "`dp`: data-parallel replicas run as processes");  // DP needs a job
}

// `rrfp train` over a job, long enough to cross what happens every few steps (durations.csv
// keeps the steps after the second, the progress line every step): rank 0's record of each
// step is replica 0's, so every task appears once and no bubble is negative. A data-parallel
// run merged every replica's tasks into it and stopped at step 3 ("task F c0 m0 appears twice").
// Where the `n`th comma of a CSV row is (1-based).
size_t nth_comma(const std::string& row, int n) {
  size_t at = std::string::npos;
  for (int i = 0; i < n; ++i)
    at = row.find(',', at + 1);
  return at;
}

struct Layout {
  int pp, tp, dp;
};

std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> out;
  for (std::string l; std::getline(in, l);)
    out.push_back(l);
  return out;
}

TEST(TrainJob, RunTrainingOverEveryLayoutKeepsEachStepOnce) {
  constexpr int kSteps = 8;
  for (const Layout l : {Layout{2, 1, 2}, Layout{1, 1, 2}, Layout{2, 2, 1}, Layout{2, 2, 2}}) {
    const std::string name =
        "P" + std::to_string(l.pp) + " T" + std::to_string(l.tp) + " D" + std::to_string(l.dp);
    const std::string dir = ::testing::TempDir() + "rrfp-job-run-" + std::to_string(l.pp) +
                            std::to_string(l.tp) + std::to_string(l.dp);
    std::filesystem::remove_all(dir);
    const int world = l.pp * l.tp * l.dp;
    auto jobs = make_local_jobs(world);
    std::vector<TrainSummary> sums(world);
    test::on_every_rank(world, [&](int r) {
      TrainRun o;
      o.train = small_run(l.pp, 4, 4, 5);
      o.train.steps = kSteps;
      o.train.runtime.tp = l.tp;
      o.train.runtime.tp_protocol = TpProtocol::Agree;
      o.train.dp = l.dp;
      o.train.job = jobs[r].get();
      o.quiet = true;
      o.eval_every = 0;
      o.out = dir;
      sums[r] = run_training(o);
    });
    const int tasks = Trainer(small_run(l.pp, 4, 4, 5)).model().num_tasks();
    const TrainSummary& s = sums[0];
    EXPECT_EQ(s.steps, kSteps) << name;
    EXPECT_GE(s.mean_bubble, 0.0) << name;
    EXPECT_LT(s.mean_bubble, 1.0) << name;
    const auto log = lines_of(dir + "/loss.csv");
    ASSERT_EQ(log.size(), kSteps + 1u) << name;
    for (size_t i = 1; i < log.size(); ++i) {
      const double bubble = std::stod(log[i].substr(nth_comma(log[i], 8) + 1));
      EXPECT_GE(bubble, 0.0) << name << " step " << i;
    }
    // The last step is validated (column 3), by every process together.
    const std::string& last = log.back();
    EXPECT_GT(nth_comma(last, 2), nth_comma(last, 1) + 1) << name << ": " << last;
    EXPECT_GT(s.val_loss, 0.0) << name;
    // durations.csv: steps 3..8, each task of the model once per TP rank.
    std::map<int, int> rows;
    const auto d = lines_of(dir + "/durations.csv");
    ASSERT_FALSE(d.empty()) << name;
    for (size_t i = 1; i < d.size(); ++i)
      ++rows[std::stoi(d[i])];
    ASSERT_EQ(rows.size(), kSteps - 2u) << name;
    for (const auto& [step, n] : rows) {
      EXPECT_GE(step, 3) << name;
      EXPECT_EQ(n, tasks * l.tp) << name << " step " << step;
    }
  }
}

// The processes of a job on one machine share its memory: their needs are summed, and every
// process refuses alike. Each counted alone, a limit above one process's need let through a run
// that needed twice the limit.
TEST(TrainJob, ProcessesOnOneMachineAreCountedTogetherAgainstItsMemory) {
  auto refusals = [](const std::string& limit) {
    setenv("RRFP_MEMORY_LIMIT", limit.c_str(), 1);
    auto jobs = make_local_jobs(2);
    std::vector<std::string> said(2);
    test::on_every_rank(2, [&](int r) {
      TrainOptions o = base(2, 4);
      o.model.max_seq = 512;
      o.window = {512, 512};
      o.job = jobs[r].get();
      try {
        Trainer t(o);
      } catch (const InputError& e) {
        said[r] = e.what();
      }
    });
    unsetenv("RRFP_MEMORY_LIMIT");
    return said;
  };
  const auto tiny = refusals("1K");
  ASSERT_NE(tiny[0].find("summed over the 2 processes of the job on one machine; RRFP_MEMORY_"
                         "LIMIT allows "),
            std::string::npos)
      << tiny[0];
  EXPECT_NE(tiny[0].find(": lower `d_model`, `max_len`"), std::string::npos) << tiny[0];
  EXPECT_EQ(tiny[1], tiny[0]);
  // "about N MB of memory": both processes' needs.
  const double both_mb = std::stod(tiny[0].substr(tiny[0].find("about ") + 6));
  ASSERT_GE(both_mb, 8) << tiny[0];
  const auto between = refusals(std::to_string(static_cast<int>(both_mb * 0.75)) + "M");
  EXPECT_NE(between[0].find("summed over the 2 processes"), std::string::npos) << between[0];
  EXPECT_EQ(between[1], between[0]);
  const auto ample = refusals(std::to_string(static_cast<int>(both_mb * 2)) + "M");
  EXPECT_EQ(ample[0], "");
  EXPECT_EQ(ample[1], "");
}

// A refusal that one process of a job makes alone (a path its node lacks) is every process's:
// the first refusing rank's carries its line, and the others point to it. Without it, the
// refusing process left and the others waited in their next collective until --timeout.
TEST(TrainJob, ARefusalOnOneProcessIsAgreedByAll) {
  auto jobs = make_local_jobs(3);
  std::vector<std::string> said(3);
  std::vector<int> speaks(3, -1);
  test::on_every_rank(3, [&](int r) {
    try {
      agree_on_input(jobs[r].get(), [&] {
        if (r > 0)
          throw InputError("`data`: 'corp' is not a directory (rank " + std::to_string(r) + ")");
      });
    } catch (const JobInputError& e) {
      said[r] = e.what();
      speaks[r] = e.speaks() ? 1 : 0;
    }
  });
  EXPECT_EQ(said[1], "mpi rank 1: `data`: 'corp' is not a directory (rank 1)");
  EXPECT_EQ(speaks, (std::vector<int>{0, 1, 0}));
  EXPECT_EQ(said[0], "mpi rank 1 refused its input (its line says why)");
  EXPECT_EQ(said[2], said[0]);
  // None refuses: nothing is thrown, on any process.
  test::on_every_rank(3, [&](int r) { agree_on_input(jobs[r].get(), [] {}); });
  // A Trainer whose corpus is missing on rank 1 only: both processes refuse, together.
  auto pair = make_local_jobs(2);
  test::on_every_rank(2, [&](int r) {
    TrainOptions o = base(2, 4);
    o.job = pair[r].get();
    if (r == 1) o.data_dir = "/nonexistent";
    try {
      Trainer t(o);
      said[r] = "";
    } catch (const JobInputError& e) {
      said[r] = e.what();
    }
  });
  EXPECT_EQ(said[1], "mpi rank 1: `data`: '/nonexistent' does not exist");
  EXPECT_EQ(said[0], "mpi rank 1 refused its input (its line says why)");
}

// A checkpoint of the image-text task resumed by a text job: refused by its processes as by one
// process, naming `task`; each checked only its own tensors, and the job trained on without the
// encoder, with a warning about `task`.
TEST(TrainJob, AJobRefusesACheckpointOfAnotherTask) {
  const std::string path = ::testing::TempDir() + "rrfp-job-image-text.ckpt";
  TrainOptions it = base(2, 4);
  it.task = "image-text";
  it.max_images = 2;
  Trainer(it).save(path);
  auto jobs = make_local_jobs(2);
  std::vector<std::string> said(2);
  test::on_every_rank(2, [&](int r) {
    TrainOptions o = base(2, 4);
    o.job = jobs[r].get();
    Trainer t(o);
    try {
      t.resume(path);
    } catch (const InputError& e) {
      said[r] = e.what();
    }
  });
  EXPECT_NE(said[0].find("was written by a run of `task` \"image-text\"; this run's is \"text\""),
            std::string::npos)
      << said[0];
  EXPECT_NE(said[1], "");
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace rrfp::train
