// The job's collectives outside a step over MPI, one process per stage (run by ctest in the
// same program as test_mpi_transport.cpp, through tests/mpirun.sh with 3 processes).
#include <gtest/gtest.h>

#include <cstddef>
#include <vector>

#include "core/error.hpp"
#include "dist/mpi_world.hpp"
#include "expect_error.hpp"
#include "mpi_main.hpp"

namespace rrfp::test {
namespace {

// The job's collectives outside a step over MPI: the replica's gather gives every stage's
// bytes by stage; the exchange among the first and last stages (a tie's copies) leaves the
// middle out, and moves a message of several MiB intact.
TEST(MpiJob, ReplicaGatherAndExchangeAmongSomeStages) {
  MpiWorld& w = *g_world;
  w.set_layout(JobLayout{w.size(), 1, 1});
  const int n = w.size();
  std::vector<std::byte> mine(static_cast<std::size_t>(w.rank() + 1), std::byte(w.rank()));
  const auto all = w.replica_all_gather(mine);
  ASSERT_EQ(all.size(), static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r)
    EXPECT_EQ(all[r], std::vector<std::byte>(static_cast<std::size_t>(r + 1), std::byte(r)));
  const std::vector<int> peers = {0, n - 1};
  if (w.rank() == 0 || w.rank() == n - 1) {
    std::vector<std::byte> big((5u << 20) + static_cast<std::size_t>(w.rank()));
    for (std::size_t i = 0; i < big.size(); ++i)
      big[i] = std::byte((i * 7 + static_cast<std::size_t>(w.rank())) & 0xff);
    const auto got = w.exchange(big, peers);
    ASSERT_EQ(got.size(), 2u);
    for (int i = 0; i < 2; ++i) {
      const std::size_t from = static_cast<std::size_t>(peers[i]);
      ASSERT_EQ(got[i].size(), (5u << 20) + from) << "from " << from;
      bool same = true;
      for (std::size_t k = 0; k < got[i].size(); ++k)
        same = same && got[i][k] == std::byte((k * 7 + from) & 0xff);
      EXPECT_TRUE(same) << "from " << from;
    }
  } else {
    EXPECT_ERROR(w.exchange(mine, peers), InputError, "`peers`: must include this endpoint");
  }
  // Every stage, each with its own size (a receive per peer, not one shared).
  std::vector<int> everyone(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r)
    everyone[r] = r;
  const auto each = w.exchange(mine, everyone);
  for (int r = 0; r < n; ++r)
    EXPECT_EQ(each[r], std::vector<std::byte>(static_cast<std::size_t>(r + 1), std::byte(r)));
  w.barrier();
}

}  // namespace
}  // namespace rrfp::test
