// The simulator's `agree` rounds as the runtime runs them (runtime/coordinator.cpp): a rank
// proposes as soon as it is free with a candidate and waits in the round, booked as blocked
// (coordination), until every peer's proposal has reached it, each coord_ns after it was made.
// Exact times worked by hand.
#include <gtest/gtest.h>

#include "sim_helpers.hpp"

namespace rrfp::test {
namespace {

constexpr std::int64_t kMs = 1'000'000;

// P=2 M=1 TP=2, 1 ms tasks, rounds of 0.2 ms, no collective time. Stage 0's F reaches stage 1's
// rank 0 after 1 ms and its rank 1 after 5 ms; every other message takes none.
//   stage 0: both ranks propose F at 0, decide at 0.2, run it to 1.2;
//   stage 1: rank 0 proposes F at 2.2; its proposal reaches rank 1 at 2.4. Rank 1 proposes at
//   6.2 holding rank 0's: it decides at once and starts F at 6.2; rank 0 gets rank 1's at 6.4
//   and starts F then (4.2 ms in the round). Both propose B at 7.4 (F's group end) and start
//   it at 7.6.
// The simulator used to open stage 1's round only at 6.2, with rank 0 idle until then.
TEST(AgreeSim, ARankWaitsInItsRoundForAPeerWithoutACandidate) {
  const WorkModel m(config(2, 1));
  RealizedWork w = realize(WorkloadParams{}, m, 2, 1);
  std::fill(w.compute_ns.begin(), w.compute_ns.end(), kMs);
  std::fill(w.message_ns.begin(), w.message_ns.end(), 0);
  const int f0 = m.index({Kind::F, 0, 0});
  w.message_ns[f0] = kMs;                    // rank 0
  w.message_ns[w.num_tasks + f0] = 5 * kMs;  // rank 1
  w.collective_ns = 0;
  w.coord_ns = kMs / 5;
  SimOptions o;
  o.tp_protocol = TpProtocol::Agree;
  o.record = true;
  const SimRun r = run(m, "bf", Policy::Ready, w, o);
  std::int64_t f_start[2] = {-1, -1}, b_start[2] = {-1, -1};
  for (const TaskRecord& t : r.result.tasks) {
    if (t.stage != 1) continue;
    (t.task.kind == Kind::F ? f_start : b_start)[t.rank] = t.start;
  }
  EXPECT_EQ(f_start[0], 6 * kMs + 2 * kMs / 5);
  EXPECT_EQ(f_start[1], 6 * kMs + kMs / 5);
  EXPECT_EQ(b_start[0], 7 * kMs + 3 * kMs / 5);
  EXPECT_EQ(b_start[1], 7 * kMs + 3 * kMs / 5);
  // Stage 1: rank 0 in rounds 4.2 + 0.2 ms, rank 1 0 + 0.2 ms (and 0.2 ms in F's collective,
  // which rank 0 ended last).
  const RankStats &s10 = r.result.ranks[2], &s11 = r.result.ranks[3];
  EXPECT_EQ(s10.coordination, 4 * kMs + 2 * kMs / 5);
  EXPECT_EQ(s11.coordination, kMs / 5);
  EXPECT_EQ(s11.collective, kMs / 5);
  EXPECT_EQ(s10.collective, 0);
  // Two rounds a stage (F, B), none failed: each group's counted once.
  EXPECT_EQ(r.result.coordination_rounds, 2 * 2);
  EXPECT_EQ(r.result.failed_rounds, 0);
}

}  // namespace
}  // namespace rrfp::test
