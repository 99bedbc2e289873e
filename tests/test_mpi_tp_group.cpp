// The cross-process TP collective, one rank per process (in test_mpi_transport's program, run
// by ctest through tests/mpirun.sh with 3 processes).
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "dist/mpi_world.hpp"
#include "mpi_main.hpp"
#include "mpi_messages.hpp"
#include "runtime/errors.hpp"

namespace rrfp::test {
namespace {

TEST(MpiTpGroup, SumsInRankOrderAndDetectsMismatch) {
  MpiWorld& w = *g_world;
  w.set_layout(JobLayout{1, w.size(), 1});
  auto g = w.make_tp_group(0);
  ASSERT_EQ(g->size(), w.size());
  std::vector<float> data{1.0f + w.rank(), 1e-8f * w.rank(), -2.5f};
  g->all_reduce(w.tp_rank(), TaskId{Kind::F, 0, 1}, data, nullptr);
  float a = 0, b = 0;
  for (int r = 0; r < w.size(); ++r) {
    a += 1.0f + r;
    b += 1e-8f * r;
  }
  EXPECT_EQ(data[0], a);
  EXPECT_EQ(data[1], b);
  EXPECT_EQ(data[2], -2.5f * w.size());
  // Rank 1 runs another task's collective: every rank reports it, nobody hangs.
  std::vector<float> x(5, 1.0f);
  const TaskId t{Kind::B, 0, w.tp_rank() == 1 ? 3 : 2};
  try {
    g->all_reduce(w.tp_rank(), t, x, nullptr);
    ADD_FAILURE() << "rank " << w.rank() << ": no mismatch reported";
  } catch (const CollectiveMismatchError& e) {
    EXPECT_NE(std::string(e.what()).find("B c0 m3"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("B c0 m2"), std::string::npos) << e.what();
  }
  w.set_layout(JobLayout{w.size(), 1, 1});
  w.barrier();
}

// A rank waiting for its peers to enter runs its idle work when poked (a blocking rendezvous's
// acceptances, semantics.md §4): rank 0's tells the others to enter, who wait for that (30 s
// at most) before they do, so the collective ends only if rank 0 served while it waited.
TEST(MpiTpGroup, ARankWaitingForItsPeersServesWhenPoked) {
  struct Tell final : CollectiveIdle {
    Transport* tr;
    int world, served = 0;
    void serve() override {
      ++served;
      for (int r = 1; r < world; ++r)
        tr->send(r, MessageTag{}, make_payload(0, 0, 4));
    }
  };
  MpiWorld& w = *g_world;
  w.set_layout(JobLayout{1, w.size(), 1});
  auto g = w.make_tp_group(0);
  auto tr = w.make_transport();
  Inbox inbox;
  tr->set_receiver(std::ref(inbox));
  std::vector<float> x{1.0f};
  if (w.rank() == 0) {
    Tell tell;
    tell.tr = tr.get();
    tell.world = w.size();
    g->poke(0);
    g->all_reduce(w.tp_rank(), TaskId{Kind::F, 0, 0}, x, &tell);
    EXPECT_EQ(tell.served, 1);
  } else {
    EXPECT_TRUE(inbox.wait_for(1)) << "rank " << w.rank() << ": rank 0 did not serve";
    g->all_reduce(w.tp_rank(), TaskId{Kind::F, 0, 0}, x, nullptr);
  }
  EXPECT_EQ(x[0], static_cast<float>(w.size()));
  w.barrier();
  tr->shutdown();
  w.set_layout(JobLayout{w.size(), 1, 1});
  w.barrier();
}

}  // namespace
}  // namespace rrfp::test
