#pragma once
// Job conformance (after the transport conformance suite): the same tests of the collectives a
// job offers outside a step, for every implementation of Job that runs with threads as ranks. A
// test program instantiates the suite with its jobs' factory: test_runtime_job.cpp for the local
// job, test_c10d_transport.cpp for the c10d job over Gloo. The MPI job, one process a rank, has
// its replica gather and exchange checked under mpirun in test_mpi_job.cpp. Layout: P = 4
// stages x DP = 2 replicas, 8 ranks.
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "core/error.hpp"
#include "dist/job.hpp"
#include "expect_error.hpp"

namespace rrfp::test {

// The jobs of `pp` x `dp` ranks, each laid out (set_layout) by the factory.
using JobFactory = std::function<std::vector<std::unique_ptr<Job>>(int pp, int dp)>;

class JobConformance : public ::testing::TestWithParam<std::pair<const char*, JobFactory>> {
 protected:
  static constexpr int kP = 4, kDp = 2, kRanks = kP * kDp;
  // Builds the jobs, then runs body(rank, job) on every rank's thread.
  void on_every_rank(const std::function<void(int, Job&)>& body) {
    auto jobs = GetParam().second(kP, kDp);
    std::vector<std::thread> th;
    for (int r = 0; r < kRanks; ++r)
      th.emplace_back([&, r] { body(r, *jobs[r]); });
    for (auto& t : th)
      t.join();
  }
  // Runs gather(job, bytes_of_rank(r)) on every rank r, which must get `count` members' bytes,
  // member i's being those of rank from(r, i).
  using Gather = std::vector<std::vector<std::byte>> (*)(Job&, std::span<const std::byte>);
  void expect_gathered(Gather gather, int count, int (*from)(int, int), std::size_t extra = 0);
};

// r + 1 bytes of value r: every rank's its own size.
inline std::vector<std::byte> bytes_of_rank(int r, std::size_t extra = 0) {
  return std::vector<std::byte>(static_cast<std::size_t>(r + 1) + extra, std::byte(r));
}

// `extra` bytes more for each rank after the first (rank r: r * extra more).
inline void JobConformance::expect_gathered(Gather gather, int count, int (*from)(int, int),
                                            std::size_t extra) {
  auto mine = [&](int r) { return bytes_of_rank(r, static_cast<std::size_t>(r) * extra); };
  std::vector<std::vector<std::vector<std::byte>>> got(kRanks);
  on_every_rank([&](int r, Job& job) { got[r] = gather(job, mine(r)); });
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_EQ(got[r].size(), static_cast<std::size_t>(count)) << r;
    for (int i = 0; i < count; ++i)
      EXPECT_EQ(got[r][i], mine(from(r, i))) << "rank " << r << ", member " << i;
  }
}

TEST_P(JobConformance, AllGatherGivesEveryRanksValuesByRank) {
  std::vector<std::vector<std::vector<double>>> got(kRanks);
  on_every_rank([&](int r, Job& job) {
    std::vector<double> mine(static_cast<std::size_t>(r), 0.5 + r);  // rank 0: none
    got[r] = job.all_gather(mine);
  });
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_EQ(got[r].size(), static_cast<std::size_t>(kRanks)) << r;
    for (int from = 0; from < kRanks; ++from)
      EXPECT_EQ(got[r][from], std::vector<double>(static_cast<std::size_t>(from), 0.5 + from));
  }
}

// Over the whole job, short and long buffers in one gather (the closing exchange of a step
// carries a record of some KiB from replica 0 and a few bytes from the others).
TEST_P(JobConformance, AllGatherBytesGivesEveryRanksBytesByRank) {
  expect_gathered([](Job& job, auto mine) { return job.all_gather_bytes(mine); }, kRanks,
                  [](int, int i) { return i; }, 1500);
}

TEST_P(JobConformance, ReplicaAllGatherGivesItsOwnStagesBytesByStage) {
  expect_gathered([](Job& job, auto mine) { return job.replica_all_gather(mine); }, kP,
                  [](int r, int s) { return r / kP * kP + s; });
}

// Buffers from a few bytes to several KiB in one gather: a transport may carry short ones in a
// first round and the rest in a second (c10d's), and every rank must take the same path.
TEST_P(JobConformance, ReplicaAllGatherCarriesShortAndLongBuffersAlike) {
  expect_gathered([](Job& job, auto mine) { return job.replica_all_gather(mine); }, kP,
                  [](int r, int s) { return r / kP * kP + s; }, 1500);
}

TEST_P(JobConformance, DpAllGatherGivesItsStagesBytesInEveryReplica) {
  expect_gathered([](Job& job, auto mine) { return job.dp_all_gather(mine); }, kDp,
                  [](int r, int d) { return d * kP + r % kP; });
}

// Stages 0, 2 and 3 of each replica exchange messages of different sizes (1 MiB and more) while
// stage 1 takes no part; a list without this stage, or out of order, is refused.
TEST_P(JobConformance, ExchangeSwapsBytesAmongItsPeersAlone) {
  std::vector<std::vector<std::vector<std::byte>>> got(kRanks);
  std::vector<std::string> errors(kRanks);
  const std::vector<int> peers = {0, 2, 3}, backwards = {3, 1};
  on_every_rank([&](int r, Job& job) {
    try {
      if (r % kP == 1) {
        EXPECT_ERROR(job.exchange({}, backwards), InputError,
                     "`peers`: endpoints in ascending order between 0 and 3, got 1 at place 1");
        job.exchange({}, peers);
      } else {
        got[r] = job.exchange(bytes_of_rank(r, 1u << 20), peers);
      }
    } catch (const InputError& e) {
      errors[r] = e.what();
    }
  });
  for (int r = 0; r < kRanks; ++r) {
    if (r % kP == 1) {
      EXPECT_NE(errors[r].find("must include this endpoint"), std::string::npos) << errors[r];
      continue;
    }
    ASSERT_EQ(got[r].size(), peers.size()) << r << ": " << errors[r];
    for (std::size_t i = 0; i < peers.size(); ++i)
      EXPECT_EQ(got[r][i], bytes_of_rank(r / kP * kP + peers[i], 1u << 20))
          << "rank " << r << ", from stage " << peers[i];
  }
}

}  // namespace rrfp::test
