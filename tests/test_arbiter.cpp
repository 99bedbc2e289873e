// The arbiter's rules, decision by decision.
#include <algorithm>

#include <gtest/gtest.h>

#include "core/arbiter.hpp"
#include "core/error.hpp"
#include "sim/rng.hpp"
#include "sim_helpers.hpp"

namespace rrfp::test {
namespace {

struct Stage {
  WorkModel m;
  Hint h;
  StageArbiter a;
  Stage(PipelineConfig c, const std::string& hint, int stage, ArbiterOptions o)
      : m(c), h(make_hint(hint, m)), a(m, stage, h, resolve_options(o, h, m)) {}
};

ArbiterOptions ready(int limit = 0, int w = 0) {
  return {Policy::Ready, limit, w};
}

TEST(Arbiter, BfAlternatesAndSkipsAnEmptyDirection) {
  Stage s(config(2, 4), "bf", 1, ready(8));  // last stage: chunk 1
  for (int mb = 0; mb < 3; ++mb)
    s.a.mark_ready({Kind::F, 1, mb});
  EXPECT_EQ(*s.a.peek(), (TaskId{Kind::F, 1, 0}));  // no B ready: skip, never wait
  s.a.commit({Kind::F, 1, 0});
  s.a.mark_ready({Kind::B, 1, 0});
  EXPECT_EQ(*s.a.peek(), (TaskId{Kind::B, 1, 0}));  // after an F comes a B
  EXPECT_EQ(*s.a.peek(), (TaskId{Kind::B, 1, 0}));  // peek has no side effects
  s.a.commit({Kind::B, 1, 0});
  EXPECT_EQ(*s.a.peek(), (TaskId{Kind::F, 1, 1}));
}

TEST(Arbiter, BackwardTakesLargestChunkForwardSmallest) {
  Stage s(config(2, 4, 2), "b-priority", 0, ready(8));  // chunks 0 and 2
  s.a.mark_ready({Kind::F, 0, 3});
  s.a.mark_ready({Kind::F, 2, 1});
  EXPECT_EQ(*s.a.peek(), (TaskId{Kind::F, 0, 3}));
  s.a.mark_ready({Kind::F, 0, 1});
  EXPECT_EQ(*s.a.peek(), (TaskId{Kind::F, 0, 1}));
}

TEST(Arbiter, BackPressureStopsForwardAtTheLimit) {
  Stage s(config(4, 8), "bf", 0, ready(2));
  for (int mb = 0; mb < 8; ++mb)
    s.a.mark_ready({Kind::F, 0, mb});
  s.a.commit(*s.a.peek());
  s.a.commit(*s.a.peek());
  EXPECT_TRUE(s.a.back_pressured());
  EXPECT_FALSE(s.a.peek().has_value()) << "D = limit: wait for a backward";
  s.a.mark_ready({Kind::B, 0, 1});
  EXPECT_EQ(*s.a.peek(), (TaskId{Kind::B, 0, 1}));
}

TEST(Arbiter, InterleavedBackPressureDrainsInLocalOrder) {
  Stage s(config(2, 4, 2), "bf", 0, ready(1));  // chunks 0 and 2
  s.a.mark_ready({Kind::F, 0, 0});
  s.a.mark_ready({Kind::F, 0, 1});
  s.a.commit({Kind::F, 0, 0});
  EXPECT_FALSE(s.a.peek().has_value()) << "drain waits for F c2 m0, not the ready F c0 m1";
  s.a.mark_ready({Kind::F, 2, 0});
  EXPECT_EQ(*s.a.peek(), (TaskId{Kind::F, 2, 0}));
  s.a.commit({Kind::F, 2, 0});
  s.a.mark_ready({Kind::B, 0, 0});  // arrives early; the drain order wants B c2 m0 first
  EXPECT_FALSE(s.a.peek().has_value());
}

TEST(Arbiter, PendingWeightGradientsAreCapped) {
  Stage s(config(2, 4, 1, true), "bfw", 1, ready(8, 2));
  for (int mb = 0; mb < 4; ++mb)
    s.a.mark_ready({Kind::F, 1, mb});
  for (int mb = 0; mb < 2; ++mb) {
    s.a.commit({Kind::F, 1, mb});
    s.a.mark_ready({Kind::B, 1, mb});
    s.a.commit({Kind::B, 1, mb});
    s.a.mark_ready({Kind::W, 1, mb});
  }
  EXPECT_EQ(s.a.pending_w(), 2);
  EXPECT_EQ(s.a.peek()->kind, Kind::W) << "at the cap, W goes before ready F";
}

TEST(Arbiter, AdaptiveRunsTheForwardWhoseProducerTookLongestFirst) {
  Stage s(config(2, 4, 1, true), "adaptive", 1, ready(8));
  const std::int64_t cost[] = {5, 9, 9, 2};
  for (int mb = 0; mb < 4; ++mb) {
    s.a.note_cost({Kind::F, 1, mb}, cost[mb]);
    s.a.mark_ready({Kind::F, 1, mb});
  }
  s.a.note_cost({Kind::F, 1, 3}, 100);  // already ready: too late, ignored
  EXPECT_EQ(*s.a.peek(), (TaskId{Kind::F, 1, 1})) << "longest producer, then smallest mb";
  s.a.commit({Kind::F, 1, 1});
  s.a.mark_ready({Kind::B, 1, 1});
  EXPECT_EQ(s.a.peek()->kind, Kind::B) << "after an F, a ready B goes first (as BF)";
  s.a.commit({Kind::B, 1, 1});
  s.a.mark_ready({Kind::W, 1, 1});
  EXPECT_EQ(*s.a.peek(), (TaskId{Kind::F, 1, 2}));
  s.a.commit({Kind::F, 1, 2});
  EXPECT_EQ(*s.a.peek(), (TaskId{Kind::F, 1, 0})) << "no B ready: the next forward, cost 5";
  s.a.commit({Kind::F, 1, 0});
  EXPECT_EQ(*s.a.peek(), (TaskId{Kind::F, 1, 3})) << "cost 2, as noted before it was ready";
  s.a.commit({Kind::F, 1, 3});
  EXPECT_EQ(*s.a.peek(), (TaskId{Kind::W, 1, 1})) << "W only when no B or F is ready";
}

TEST(Arbiter, EntryRanksMakeAPyramid) {
  // Sizes ascending by group: {3: m1 m3} front, {5: m0} back, {7: m4} front, {9: m2} back.
  EXPECT_EQ(entry_ranks({5, 3, 9, 3, 7}), (std::vector<int>{4, 0, 3, 1, 2}));
  EXPECT_EQ(entry_ranks({4, 4, 4, 4}), (std::vector<int>{0, 1, 2, 3})) << "equal: in order";
  EXPECT_EQ(entry_ranks({}), std::vector<int>{});
  for (std::uint64_t seed = 0; seed < 200; ++seed) {
    const int n = 1 + static_cast<int>(hash_keys(seed, 1) % 40);
    std::vector<std::int64_t> size(n);
    for (int i = 0; i < n; ++i)
      size[i] = static_cast<std::int64_t>(hash_keys(seed, 2, i) % 8);  // many ties
    const std::vector<int> rank = entry_ranks(size);
    std::vector<int> order(n, -1);
    for (int mb = 0; mb < n; ++mb) {
      ASSERT_TRUE(rank[mb] >= 0 && rank[mb] < n && order[rank[mb]] < 0) << "not a permutation";
      order[rank[mb]] = mb;
    }
    // Sizes in entry order rise, then fall; equal sizes side by side keep microbatch order.
    int i = 1;
    while (i < n && size[order[i]] >= size[order[i - 1]])
      ++i;
    for (; i < n; ++i)
      ASSERT_LE(size[order[i]], size[order[i - 1]]) << "seed " << seed << " at " << i;
    for (int k = 1; k < n; ++k)
      if (size[order[k]] == size[order[k - 1]]) {
        ASSERT_LT(order[k - 1], order[k]) << "seed " << seed;
      }
    EXPECT_EQ(size[order[0]], *std::min_element(size.begin(), size.end()));
  }
}

TEST(Arbiter, AdaptiveLetsMicrobatchesEnterInEntryRankOrder) {
  Stage s(config(2, 5, 1, true), "adaptive", 0, ready(8));
  for (int mb = 0; mb < 3; ++mb)
    s.a.mark_ready({Kind::F, 0, mb});
  s.a.commit({Kind::F, 0, 0});            // ran already: keeps its place, nothing to re-rank
  s.a.note_entry_sizes({5, 3, 9, 3, 7});  // ready ones are re-ranked
  s.a.mark_ready({Kind::F, 0, 3});
  s.a.mark_ready({Kind::F, 0, 4});
  for (int mb : {1, 3, 4, 2}) {  // ranks 0, 1, 2, 3 (m0, rank 4, ran first)
    EXPECT_EQ(*s.a.peek(), (TaskId{Kind::F, 0, mb}));
    s.a.commit({Kind::F, 0, mb});
  }
  EXPECT_THROW(s.a.note_entry_sizes({1, 2}), Error) << "one size per microbatch";
  // A stage without chunk 0 ignores sizes, as every other hint does.
  Stage later(config(2, 4, 1, true), "adaptive", 1, ready(8));
  later.a.note_entry_sizes({1, 2});
  Stage bfw(config(2, 4, 1, true), "bfw", 0, ready(8));
  for (int mb = 0; mb < 2; ++mb)
    bfw.a.mark_ready({Kind::F, 0, mb});
  bfw.a.note_entry_sizes({4, 3, 2, 1});
  EXPECT_EQ(*bfw.a.peek(), (TaskId{Kind::F, 0, 0}));
}

// Where neither producer costs nor sizes can tell forwards apart, adaptive is BFW: on uniform
// work, and under `agree` with TP > 1 when microbatches are of one size (the simulator tells no
// costs there: the ranks of a group, ranking by their own measurements, could propose
// differently; sizes are the same on every rank and still count).
TEST(Arbiter, AdaptiveWithoutCostsIsBfw) {
  WorkModel m(config(3, 8, 1, true));
  EXPECT_EQ(simulate(m, make_hint("adaptive", m), unit_work(m), {}).makespan,
            simulate(m, make_hint("bfw", m), unit_work(m), {}).makespan);
  int differ = 0, sized = 0;
  for (int seed = 0; seed < 20; ++seed) {
    RealizedWork w = realize(workload_preset("language"), m, 2, seed);
    SimOptions opt;
    opt.tp_protocol = TpProtocol::Agree;
    sized += simulate(m, make_hint("adaptive", m), w, opt).makespan !=
             simulate(m, make_hint("bfw", m), w, opt).makespan;
    RealizedWork same = w;
    std::fill(same.message_bytes.begin(), same.message_bytes.end(), 1000);
    EXPECT_EQ(simulate(m, make_hint("adaptive", m), same, opt).makespan,
              simulate(m, make_hint("bfw", m), same, opt).makespan)
        << "seed " << seed;
    opt.tp_protocol = TpProtocol::Leader;  // the leader ranks by its costs
    differ += simulate(m, make_hint("adaptive", m), same, opt).makespan !=
              simulate(m, make_hint("bfw", m), same, opt).makespan;
  }
  EXPECT_GT(differ, 0) << "costs never changed a decision: the rule is not wired";
  EXPECT_GT(sized, 0) << "sizes never changed a decision under agree";
}

TEST(Arbiter, FixedWaitsForItsHead) {
  Stage s(config(2, 4), "1f1b", 1, {Policy::Fixed, 0, 0});
  s.a.mark_ready({Kind::F, 1, 1});
  EXPECT_FALSE(s.a.peek().has_value()) << "F c1 m0 is next in the list";
  s.a.mark_ready({Kind::F, 1, 0});
  EXPECT_EQ(*s.a.peek(), (TaskId{Kind::F, 1, 0}));
  EXPECT_THROW(s.a.commit({Kind::F, 1, 1}), Error);
}

TEST(Arbiter, RejectsMisuse) {
  Stage s(config(2, 4), "bf", 0, ready());
  s.a.mark_ready({Kind::F, 0, 0});
  EXPECT_THROW(s.a.mark_ready({Kind::F, 0, 0}), Error);
  EXPECT_THROW(s.a.mark_ready({Kind::F, 1, 0}), Error);  // another stage's task
  EXPECT_THROW(s.a.commit({Kind::F, 0, 1}), Error);      // not ready
  EXPECT_THROW(resolve_options({Policy::Fixed, 0, 0}, make_hint("bf", s.m), s.m), InputError);
  EXPECT_THROW(resolve_options({Policy::Ready, -1, 0}, make_hint("bf", s.m), s.m), InputError);
}

TEST(Simulator, DeadlockIsReportedWithEachStagesState) {
  // A fixed order that waits on itself across stages cannot finish: the error names the waits.
  WorkModel m(config(2, 2));
  Hint h;
  h.name = "cyclic";
  h.body = ListHint{{{{Kind::F, 0, 0}, {Kind::B, 0, 0}, {Kind::F, 0, 1}, {Kind::B, 0, 1}},
                     {{Kind::F, 1, 1}, {Kind::B, 1, 1}, {Kind::F, 1, 0}, {Kind::B, 1, 0}}}};
  SimOptions opt;
  opt.arbiter.policy = Policy::Fixed;
  try {
    simulate(m, h, unit_work(m), opt);
    FAIL() << "no deadlock reported";
  } catch (const DeadlockError& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "stage 1: ran 0/4, next in fixed order F c1 m1 (inputs missing)"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace rrfp::test
