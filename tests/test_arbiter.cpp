// The arbiter's rules, decision by decision.
#include <algorithm>
#include <random>

#include <gtest/gtest.h>

#include "core/arbiter.hpp"
#include "core/error.hpp"
#include "expect_error.hpp"
#include "seeds.hpp"
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

// Depth first, every kind: a forward of the later chunk (a microbatch already in the stage)
// before a new microbatch's first chunk, a backward of the later chunk first.
TEST(Arbiter, EveryKindTakesItsLargestChunkFirst) {
  Stage s(config(2, 4, 2), "b-priority", 0, ready(8));  // chunks 0 and 2
  s.a.mark_ready({Kind::F, 0, 1});
  EXPECT_EQ(*s.a.peek(), (TaskId{Kind::F, 0, 1}));
  s.a.mark_ready({Kind::F, 2, 3});
  EXPECT_EQ(*s.a.peek(), (TaskId{Kind::F, 2, 3})) << "chunk 2 before chunk 0";
  s.a.mark_ready({Kind::F, 2, 1});
  EXPECT_EQ(*s.a.peek(), (TaskId{Kind::F, 2, 1})) << "within a chunk, the smaller microbatch";
  s.a.mark_ready({Kind::B, 0, 0});
  s.a.mark_ready({Kind::B, 2, 2});
  EXPECT_EQ(*s.a.peek(), (TaskId{Kind::B, 2, 2}));
}

// The adaptive rule ranks forwards by their producers' costs within a chunk, and its chunks as
// every rule does: a later chunk's forward goes first whatever the costs.
TEST(Arbiter, AdaptiveTakesTheLargestChunkFirstThenTheLongestProducer) {
  Stage s(config(2, 4, 2, true), "adaptive", 0, ready(8));  // chunks 0 and 2
  const std::int64_t cost[] = {5, 9, 9, 2};
  for (int mb = 0; mb < 4; ++mb) {
    s.a.note_cost({Kind::F, 2, mb}, cost[mb]);
    s.a.mark_ready({Kind::F, 2, mb});
  }
  s.a.mark_ready({Kind::F, 0, 0});
  std::vector<TaskId> order;
  while (auto t = s.a.peek()) {
    s.a.commit(*t);
    order.push_back(*t);
  }
  const std::vector<TaskId> expect = {
      {Kind::F, 2, 1}, {Kind::F, 2, 2}, {Kind::F, 2, 0}, {Kind::F, 2, 3}, {Kind::F, 0, 0}};
  EXPECT_EQ(order, expect);
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

// Back-pressure with V >= 2: the microbatch being drained goes first, in local order; while it
// waits, only a backward may run (it lowers D), never another forward.
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
  EXPECT_EQ(*s.a.peek(), (TaskId{Kind::B, 0, 0})) << "the drained microbatch waits: a backward";
  s.a.mark_ready({Kind::B, 2, 0});
  EXPECT_EQ(*s.a.peek(), (TaskId{Kind::B, 2, 0})) << "the drained microbatch's next task first";
  s.a.commit({Kind::B, 2, 0});
  s.a.commit({Kind::B, 0, 0});
  EXPECT_FALSE(s.a.back_pressured());
  EXPECT_EQ(*s.a.peek(), (TaskId{Kind::F, 0, 1}));
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
  EXPECT_ERROR(s.a.note_entry_sizes({1, 2}), Error,
               "stage 0: 2 microbatch sizes for 5 microbatches")
      << "one size per microbatch";
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

// One microbatch's tasks on one stage in the order their inputs can come in: its forwards by
// local chunk, its backwards back down, each W after its B. A task is told ready only once the
// one before it ran, as the pipeline's data flow would have it.
struct LocalFlow {
  std::vector<TaskId> chain;  // F by local chunk, then B back down
  explicit LocalFlow(const WorkModel& m, int stage) {
    const auto& chunks = m.chunks_of(stage);
    for (int c : chunks)
      chain.push_back({Kind::F, c, 0});
    for (auto c = chunks.rbegin(); c != chunks.rend(); ++c)
      chain.push_back({Kind::B, *c, 0});
  }
  // What may become ready once `t` ran (nothing after a W).
  std::vector<TaskId> after(const WorkModel& m, const TaskId& t) const {
    std::vector<TaskId> next;
    if (t.kind == Kind::W) return next;
    if (t.kind == Kind::B && m.split()) next.push_back({Kind::W, t.chunk, t.mb});
    const auto at = std::find(chain.begin(), chain.end(), TaskId{t.kind, t.chunk, 0});
    if (at + 1 != chain.end()) next.push_back({(at + 1)->kind, (at + 1)->chunk, t.mb});
    return next;
  }
};

// take() is peek() and then commit(): two arbiters told the same readiness and costs, one asked
// each way, run the same tasks in the same order, for every hint, both policies and shapes with
// several chunks and a split backward. take() names the task from its own queue without the
// checks and key lookups of commit(), so a divergence shows here first.
TEST(Arbiter, TakeIsPeekThenCommit) {
  int runs = 0;
  for (int seed = 0; seed < std::max(5, suite_seeds() / 20); ++seed)
    for (const std::string& name : hint_names())
      for (const Policy policy : {Policy::Ready, Policy::Fixed}) {
        std::mt19937 rng(seed);
        const PipelineConfig c = config(2 + seed % 3, 4 + seed % 5, 1 + seed % 2, seed % 4 >= 2);
        const WorkModel m(c);
        Hint h;
        try {
          h = make_hint(name, m);
        } catch (const InputError&) {
          continue;  // a hint that does not fit this shape
        }
        if (policy == Policy::Fixed && !h.is_list()) continue;
        const int stage = static_cast<int>(rng() % c.pp);
        const ArbiterOptions o = resolve_options({policy, 1 + seed % 3, 0}, h, m);
        StageArbiter by_take(m, stage, h, o), by_peek(m, stage, h, o);
        const LocalFlow flow(m, stage);
        std::vector<TaskId> coming;  // tasks whose inputs may come in now
        for (int mb = 0; mb < c.microbatches; ++mb)
          coming.push_back({Kind::F, flow.chain.front().chunk, mb});
        ++runs;
        while (!by_take.finished()) {
          if (!coming.empty() && rng() % 3 != 0) {  // one more task's inputs are all in
            std::swap(coming[rng() % coming.size()], coming.back());
            const TaskId t = coming.back();
            coming.pop_back();
            const auto cost = static_cast<std::int64_t>(rng() % 1000);
            by_take.note_cost(t, cost);
            by_peek.note_cost(t, cost);
            by_take.mark_ready(t);
            by_peek.mark_ready(t);
            continue;
          }
          const auto taken = by_take.take();
          const auto peeked = by_peek.peek();
          ASSERT_EQ(taken, peeked) << name << " seed " << seed;
          if (!peeked) {
            ASSERT_FALSE(coming.empty()) << name << " seed " << seed << ": nothing to run";
            continue;
          }
          by_peek.commit(*peeked);
          for (const TaskId& t : flow.after(m, *peeked))
            coming.push_back(t);
        }
        EXPECT_TRUE(by_peek.finished());
        EXPECT_EQ(by_take.peak_outstanding(), by_peek.peak_outstanding());
        EXPECT_EQ(by_take.peak_pending_w(), by_peek.peak_pending_w());
      }
  EXPECT_GT(runs, 2 * static_cast<int>(hint_names().size())) << "too few hints fit the shapes";
}

TEST(Arbiter, FixedWaitsForItsHead) {
  Stage s(config(2, 4), "1f1b", 1, {Policy::Fixed, 0, 0});
  s.a.mark_ready({Kind::F, 1, 1});
  EXPECT_FALSE(s.a.peek().has_value()) << "F c1 m0 is next in the list";
  s.a.mark_ready({Kind::F, 1, 0});
  EXPECT_EQ(*s.a.peek(), (TaskId{Kind::F, 1, 0}));
  EXPECT_ERROR(s.a.commit({Kind::F, 1, 1}), Error,
               "stage 1: fixed order expects F c1 m0 next, not F c1 m1");
}

TEST(Arbiter, RejectsMisuse) {
  Stage s(config(2, 4), "bf", 0, ready());
  s.a.mark_ready({Kind::F, 0, 0});
  EXPECT_ERROR(s.a.mark_ready({Kind::F, 0, 0}), Error, "stage 0: task F c0 m0 became ready twice");
  EXPECT_ERROR(s.a.mark_ready({Kind::F, 1, 0}), Error,
               "stage 0: task F c1 m0 does not belong to this stage");  // another stage's task
  EXPECT_ERROR(s.a.commit({Kind::F, 0, 1}), Error,
               "stage 0: cannot run F c0 m1, its inputs are not all present");  // not ready
  EXPECT_ERROR(resolve_options({Policy::Fixed, 0, 0}, make_hint("bf", s.m), s.m), InputError,
               "`policy` fixed: needs a list hint");
  EXPECT_ERROR(resolve_options({Policy::Ready, -1, 0}, make_hint("bf", s.m), s.m), InputError,
               "`limit`: must be 0 (default) or at least 1, got -1");
}

TEST(Arbiter, RefusesAListThatDoesNotHoldItsStagesTasksOnce) {
  // A list edited by whoever builds it (an embedder's): each wrote out of bounds, ran a task
  // twice, or read past the list's end, where the stage's arbiter now refuses it by name.
  WorkModel m(config(2, 4));
  const ArbiterOptions fixed = {Policy::Fixed, 4, 2};
  const auto refused = [&](auto edit, const std::string& text) {
    Hint h = make_hint("1f1b", m);
    auto& stages = std::get<ListHint>(h.body).stages;
    edit(stages);
    return throws_error<HintError>([&] { StageArbiter(m, 0, h, fixed); }, text);
  };
  using Stages = std::vector<std::vector<TaskId>>;
  EXPECT_TRUE(refused([](Stages& s) { s[0][1] = s[0][0]; },
                      "hint '1f1b': stage 0: task F c0 m0 listed twice"));
  EXPECT_TRUE(refused(
      [](Stages& s) {
        s[0].push_back({Kind::F, 0, 100});
      },
      "hint '1f1b': stage 0: task F c0 m100 does not exist in this run (microbatches 0-3)"));
  EXPECT_TRUE(refused(
      [](Stages& s) {
        s[0].push_back({Kind::W, 0, 0});
      },
      "task W c0 m0 does not exist in this run (W needs `split_backward`)"));
  EXPECT_TRUE(refused(
      [](Stages& s) {
        s[0].push_back({Kind::F, 1, 0});
      },
      "stage 0: task F c1 m0 belongs to stage 1"));
  EXPECT_TRUE(refused([](Stages& s) { s[0].pop_back(); }, "stage 0: task B c0 m3 is missing"));
  EXPECT_TRUE(
      refused([](Stages& s) { s.clear(); }, "hint '1f1b': hint has 0 stages, the run has 2"));
  Hint whole = make_hint("1f1b", m);
  EXPECT_NO_THROW(StageArbiter(m, 1, whole, fixed));
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
