// Ordered forwards (PipelineConfig::ordered_forwards): each chunk's forwards run in microbatch
// order, as a plain loop runs them, so a chunk whose forward updates state (batch norm's
// running statistics) ends a step with a plain loop's bits. The edge is in the work model, so
// every executor, list check and bound sees it; it carries no data and no cost.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "core/error.hpp"
#include "core/hint_io.hpp"
#include "seeds.hpp"
#include "sim/check.hpp"
#include "sim_helpers.hpp"

namespace rrfp::test {
namespace {

PipelineConfig ordered(int p, int m, int v = 1, bool split = false) {
  PipelineConfig c = config(p, m, v, split);
  c.ordered_forwards = true;
  return c;
}

TEST(OrderedForwards, AForwardWaitsForItsChunksForwardBeforeIt) {
  const WorkModel m(ordered(2, 3, 2));  // chunks 0 1 2 3 on stages 0 1 0 1
  Deps d{};
  EXPECT_EQ(m.deps({Kind::F, 0, 0}, d), 0);
  ASSERT_EQ(m.deps({Kind::F, 0, 1}, d), 1);
  EXPECT_EQ(d[0].task, (TaskId{Kind::F, 0, 0}));
  EXPECT_TRUE(d[0].order);
  EXPECT_FALSE(d[0].cross_stage);
  ASSERT_EQ(m.deps({Kind::F, 2, 2}, d), 2);
  EXPECT_EQ(d[0].task, (TaskId{Kind::F, 1, 2}));
  EXPECT_FALSE(d[0].order);
  EXPECT_EQ(d[1].task, (TaskId{Kind::F, 2, 1}));
  EXPECT_TRUE(d[1].order);
  ASSERT_EQ(m.consumers({Kind::F, 1, 0}, d), 3);  // the next chunk, its B, its next forward
  EXPECT_EQ(d[2].task, (TaskId{Kind::F, 1, 1}));
  EXPECT_TRUE(d[2].order);
  EXPECT_EQ(m.consumers({Kind::F, 3, 2}, d), 1);  // the last microbatch: its B only
  EXPECT_EQ(m.deps({Kind::B, 1, 1}, d), 2);       // backwards are not ordered
  const WorkModel plain(config(2, 3, 2));
  EXPECT_EQ(plain.deps({Kind::F, 0, 1}, d), 0);
}

TEST(OrderedForwards, AListThatRunsForwardsOutOfOrderIsRefused) {
  const WorkModel m(ordered(2, 3));
  ListHint h;
  h.stages = {{{Kind::F, 0, 1},
               {Kind::F, 0, 0},
               {Kind::F, 0, 2},
               {Kind::B, 0, 1},
               {Kind::B, 0, 0},
               {Kind::B, 0, 2}},
              {{Kind::F, 1, 1},
               {Kind::B, 1, 1},
               {Kind::F, 1, 0},
               {Kind::B, 1, 0},
               {Kind::F, 1, 2},
               {Kind::B, 1, 2}}};
  try {
    validate_hint(h, m, "test");
    ADD_FAILURE() << "accepted";
  } catch (const HintError& e) {
    EXPECT_NE(std::string(e.what()).find("stage 0: task F c0 m1 comes before F c0 m0, which it "
                                         "waits for under `ordered_forwards` (each chunk's "
                                         "forwards in microbatch order)"),
              std::string::npos)
        << e.what();
  }
  EXPECT_NO_THROW(validate_hint(h, WorkModel(config(2, 3)), "test"));
}

// The forwards each stage ran, by chunk, in the order they started.
std::map<int, std::vector<int>> forward_orders(const StepRecord& r) {
  std::vector<TaskRecord> fs;
  for (const TaskRecord& t : r.tasks)
    if (t.task.kind == Kind::F && t.rank == 0) fs.push_back(t);
  std::stable_sort(fs.begin(), fs.end(),
                   [](const TaskRecord& a, const TaskRecord& b) { return a.start < b.start; });
  std::map<int, std::vector<int>> out;
  for (const TaskRecord& t : fs)
    out[t.task.chunk].push_back(t.task.mb);
  return out;
}

bool in_order(const std::map<int, std::vector<int>>& by_chunk) {
  return std::all_of(by_chunk.begin(), by_chunk.end(), [](const auto& c) {
    return std::is_sorted(c.second.begin(), c.second.end());
  });
}

// The adaptive rule reorders forwards (small microbatches enter first and last, the longest
// producer goes first): with ordered forwards it may not, and every run keeps the invariants.
TEST(OrderedForwards, TheAdaptiveRuleKeepsMicrobatchOrderOnlyWhenAsked) {
  int reordered = 0;
  for (int seed = 0; seed < suite_seeds(); ++seed) {
    for (const int v : {1, 2}) {
      for (const bool keep : {false, true}) {
        PipelineConfig c = config(4, 12, v, true);
        c.ordered_forwards = keep;
        const WorkModel m(c);
        const RealizedWork w = realize(workload_preset("language"), m, 1, seed);
        SimOptions opt;
        opt.arbiter.policy = Policy::Ready;
        const StepRecord r = simulate(m, make_hint("adaptive", m), w, opt);
        CheckOptions co;
        co.policy = Policy::Ready;
        co.limit = r.arbiter.limit;
        const auto bad = check_run(m, 1, r.tasks, co);
        ASSERT_TRUE(bad.empty()) << "seed " << seed << ": " << bad.front();
        const bool ok = in_order(forward_orders(r));
        if (keep)
          EXPECT_TRUE(ok) << "seed " << seed << " V=" << v;
        else
          reordered += ok ? 0 : 1;
      }
    }
  }
  EXPECT_GT(reordered, 0) << "the adaptive rule never reordered forwards: the test shows nothing";
}

// With one chunk a stage and ordered forwards, a stage has at most one forward ready, so the
// adaptive rule, which only ranks forwards differently from BFW, makes BFW's every choice.
TEST(OrderedForwards, AtOneChunkAStageTheAdaptiveRuleIsBfw) {
  for (int seed = 0; seed < suite_seeds(); ++seed)
    for (const char* preset : {"language", "multimodal", "straggler", "jitter:J2"}) {
      PipelineConfig c = ordered(4 + seed % 5, 8 + seed % 17, 1, true);
      const WorkModel m(c);
      const RealizedWork w = realize(workload_preset(preset), m, 1, seed);
      SimOptions opt;
      opt.arbiter.policy = Policy::Ready;
      const std::int64_t adaptive = simulate(m, make_hint("adaptive", m), w, opt).makespan;
      EXPECT_EQ(adaptive, simulate(m, make_hint("bfw", m), w, opt).makespan)
          << preset << " seed " << seed;
    }
}

}  // namespace
}  // namespace rrfp::test
