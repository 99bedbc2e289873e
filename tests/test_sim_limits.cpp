// The simulator's arithmetic at its limits: per-stage means over many TP ranks, steps that
// sharing links make too long for the clock, a split backward's rounding, and the digits a
// refused or a tiny value is shown in.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "core/error.hpp"
#include "expect_error.hpp"
#include "report/report.hpp"
#include "sim/shared_links.hpp"
#include "sim_helpers.hpp"

namespace rrfp::test {
namespace {

// Three TP ranks each busy 4e18 ns sum to 1.2e19, past 2^63: the stage read busy -2.1e18 and a
// bubble above 100% (1024 ranks of 9.2e18 read 195.8%). Means that fit are the same as int64's
// truncating division made them.
TEST(SimLimits, StageMeansOverTpRanksDoNotOverflow) {
  constexpr std::int64_t kBig = 4'000'000'000'000'000'000;
  StepRecord r;
  r.pp = 2;
  r.tp = 3;
  r.makespan = kBig;
  r.ranks.resize(6);
  for (int k = 0; k < 3; ++k) {
    r.ranks[k].busy = kBig;
    r.ranks[k].coordination = kBig;
    r.ranks[k].collective = kBig;
  }
  const std::int64_t small[3] = {1, 2, 4};  // stage 1: 7 / 3 truncates to 2
  for (int k = 0; k < 3; ++k) {
    r.ranks[3 + k].busy = small[k];
    r.ranks[3 + k].blocked = small[k] * 10;
  }
  LowerBound lb;
  lb.value = kBig;
  const RunMetrics m = compute_metrics(r, lb);
  EXPECT_EQ(m.stages[0].busy, kBig);
  EXPECT_EQ(m.stages[0].idle, 0);
  EXPECT_EQ(m.stages[1].busy, 2);
  EXPECT_EQ(m.stages[1].blocked, 23);  // 70 / 3
  EXPECT_EQ(m.stages[1].idle, kBig - 25);
  // The six ranks' means: 3 x 4e18 / 6.
  EXPECT_EQ(m.coordination_per_rank, kBig / 2);
  EXPECT_EQ(m.collective_per_rank, kBig / 2);
  EXPECT_DOUBLE_EQ(m.bubble_ratio, 1 - (4e18 + 2) / 8e18);
}

// The hunt's workload: 1000 s messages (1e12 bytes at 1 GB/s) that may share the links at 64x.
WorkloadParams slow_links() {
  WorkloadParams w;
  w.forward_us = 0;
  w.bytes_per_token = 244140625;  // x 4096 tokens: 1e12 bytes
  w.comm_bandwidth_gbps = 1;
  w.comm_links = 4096;
  w.comm_two_slowdown = 64;
  return w;
}

// 36000 microbatches at P=2 send 72000 such messages: 7.2e16 ns alone, but 4.608e18 at 64x,
// past the 146 years a step may hold. Counted alone, 145000 microbatches passed 2^63 ns and the
// simulation never ended; they are refused up front, naming the field.
TEST(SimLimits, TheStepsBoundCountsTheLinksSlowdown) {
  const WorkModel m(config(2, 36000));
  EXPECT_ERROR(realize(slow_links(), m, 1, 1), InputError,
               "workload: its 144000 tasks add up to 146.119 years (messages at "
               "comm_two_slowdown 64 times their time alone, as sharing the links may make "
               "them); a step may hold at most 146: ");
  WorkloadParams alone = slow_links();
  alone.comm_two_slowdown = 1;
  EXPECT_NO_THROW(realize(alone, m, 1, 1));
}

// Two transfers of 2e17 ns at 1/64 of their rate end at 1.28e19 ns, past 2^63: that end wrapped
// negative, and the simulation scheduled it again and again, forever.
TEST(SimLimits, ALinksEndPastTheClockIsRefused) {
  SharedLinks links(4096, 64);
  links.add(0, 200'000'000'000'000'000, 0);
  EXPECT_EQ(links.next_end(), 200'000'000'000'000'000);  // alone: at its own rate
  links.add(0, 200'000'000'000'000'000, 1);
  EXPECT_ERROR(links.next_end(), InputError,
               "shared links: a transfer would end 1.28e+19 ns after 0 ns, past the "
               "simulation's clock (2^63 ns, 292 years)");
}

// The same through a whole simulation, with work edited after realize() bounded it: the
// simulator checks the work's total itself before it starts (it ended with the links' error
// above, mid-run, before the simulator checked the work it is given).
TEST(SimLimits, AStepPastTheClockIsRefusedBeforeItRuns) {
  const WorkModel m(config(2, 2));
  RealizedWork w = realize(slow_links(), m, 1, 1);
  for (std::int64_t& ns : w.message_ns)
    if (ns > 0) ns = 200'000'000'000'000'000;
  EXPECT_ERROR(run(m, "1f1b", Policy::Fixed, w), InputError,
               "workload: its 8 tasks add up to 1623.54 years (messages at comm_two_slowdown 64 "
               "times their time alone, as sharing the links may make them); a step may hold at "
               "most 146");
}

// A split W is rounded and B is the whole backward less it: B + W is the backward of the run
// without the split, to the nanosecond, whatever the jitter and TP noise. Each rounded on its
// own, tasks of 1 ns made B = W = 1 (0.5 each, rounded up) and BFW took 7 ns where 1F1B took 6.
TEST(SimLimits, ASplitBackwardsBAndWAddUpToTheWholeBackward) {
  for (const char* preset : {"uniform", "language", "paper", "jitter:J3"})
    for (const int tp : {1, 2})
      for (std::uint64_t seed = 1; seed <= 3; ++seed) {
        WorkloadParams w = workload_preset(preset);
        if (w.preset == "uniform") w.forward_us = 0.0017;  // 1.7 ns: parts that round apart
        const WorkModel whole(config(3, 6)), split(config(3, 6, 1, true));
        const RealizedWork a = realize(w, whole, tp, seed), b = realize(w, split, tp, seed);
        for (int rank = 0; rank < tp; ++rank)
          for (int ch = 0; ch < whole.chunks(); ++ch)
            for (int mb = 0; mb < 6; ++mb) {
              const std::int64_t bw = b.compute(rank, split.index({Kind::B, ch, mb})) +
                                      b.compute(rank, split.index({Kind::W, ch, mb}));
              ASSERT_EQ(bw, a.compute(rank, whole.index({Kind::B, ch, mb})))
                  << preset << " tp " << tp << " seed " << seed << " chunk " << ch << " mb " << mb;
            }
      }
  // F = B = 1 ns: 1F1B at P=2 M=2 takes 6 ns (F F on stage 0, then stage 1's F B F B, then
  // stage 0's two B). Split, W = 1 (0.5 rounded up) and B = 0: BFW runs stage 1's F0 at 1, B0
  // and F1 at 2, B1 at 3 and its two W from 3 to 5; stage 0 its W between, by 4. 5 ns.
  WorkloadParams tiny;
  tiny.forward_us = 0.001;
  const WorkModel whole(config(2, 2)), split(config(2, 2, 1, true));
  const RealizedWork parts = realize(tiny, split, 1, 1);
  EXPECT_EQ(parts.compute(0, split.index({Kind::B, 1, 0})), 0);
  EXPECT_EQ(parts.compute(0, split.index({Kind::W, 1, 0})), 1);
  EXPECT_EQ(run(whole, "1f1b", Policy::Fixed, realize(tiny, whole, 1, 1)).result.makespan, 6);
  EXPECT_EQ(run(split, "bfw", Policy::Ready, parts).result.makespan, 5);
}

// A duration past the limit by less than %.10g shows was refused as "1000000000 us".
TEST(SimLimits, ARefusedDurationShowsWhyItExceeds) {
  EXPECT_ERROR(duration_ns(1000000000.0004, "x.csv:2"), InputError,
               "x.csv:2: a task or message of 1000000000.0004 us; the most one may take is "
               "1e+09 us (1000 s)");
}

// Steps of nanoseconds all read 0.00 ms: a step under 1 ms prints to the nanosecond, and one of
// 1 ms or more as it always did, even its values under 1 ms.
TEST(SimLimits, ATableShowsAStepUnderAMillisecondToTheNanosecond) {
  std::vector<ReportRun> runs(2);
  runs[0].label = "short";
  runs[0].metrics.makespan = 6;
  runs[0].metrics.bound.value = 5;
  runs[0].metrics.stages.resize(1);
  runs[0].metrics.stages[0].busy = 4;
  runs[1].label = "long";
  runs[1].metrics.makespan = 1'000'000;
  runs[1].metrics.bound.value = 5;
  runs[1].metrics.stages.resize(1);
  runs[1].metrics.stages[0].busy = 4;
  const std::string text = format_table(ReportHeader{}, runs, true);
  EXPECT_NE(text.find("short     0.000006"), std::string::npos) << text;
  EXPECT_NE(text.find("0.000005"), std::string::npos) << text;
  EXPECT_NE(text.find("0.000004"), std::string::npos) << text;
  EXPECT_NE(text.find("long          1.00"), std::string::npos) << text;
  EXPECT_NE(text.find("   0.00      -"), std::string::npos) << text;  // its bound of 5 ns
}

// A first step of no time has no speedup against it: the table shows "-", and the JSON null
// where it read 0.0 (as if each run were infinitely slower).
TEST(SimLimits, NoSpeedupAgainstAStepOfNoTime) {
  std::vector<ReportRun> runs(2);
  runs[0].metrics.makespan = 0;
  runs[1].metrics.makespan = 1000;
  const nlohmann::json j = to_json(ReportHeader{}, runs);
  EXPECT_TRUE(j["runs"][0]["speedup_vs_first"].is_null());
  EXPECT_TRUE(j["runs"][1]["speedup_vs_first"].is_null());
  runs[0].metrics.makespan = 2000;
  EXPECT_DOUBLE_EQ(to_json(ReportHeader{}, runs)["runs"][1]["speedup_vs_first"].get<double>(), 2.0);
}

// A RealizedWork edited by its caller: the simulator indexes it by task and rank unchecked,
// so tp 0 crashed, tp 2 over one rank's vectors read past their end (a makespan of 2.1e14 ns),
// and negative times ran to makespans of 0. Each is refused, naming the field.
TEST(SimLimits, RealizedWorkThatDoesNotFitTheModelIsRefused) {
  const WorkModel m(config(2, 4));
  const Hint h = make_hint("1f1b", m);
  const auto refused = [&](auto edit, const std::string& text) {
    RealizedWork w = unit_work(m);
    edit(w);
    return throws_error<InputError>([&] { simulate(m, h, w, SimOptions{}); }, text);
  };
  EXPECT_TRUE(refused([](RealizedWork& w) { w.tp = 0; }, "`tp`"));
  EXPECT_TRUE(refused([](RealizedWork& w) { w.tp = 2; },
                      "realized work: `compute_ns` holds 16 entries, not 32"));
  EXPECT_TRUE(refused([](RealizedWork& w) { w.num_tasks = 8; },
                      "realized work: `num_tasks` is 8, the work model has 16"));
  EXPECT_TRUE(refused([](RealizedWork& w) { w.compute_ns[3] = -5; },
                      "realized work: `compute_ns`[3] is -5: must be at least 0"));
  EXPECT_TRUE(refused([](RealizedWork& w) { w.message_ns.assign(w.message_ns.size(), -1); },
                      "realized work: `message_ns`[0] is -1"));
  EXPECT_TRUE(refused([](RealizedWork& w) { w.message_bytes.clear(); },
                      "`message_bytes` holds 0 entries, not 16"));
  EXPECT_TRUE(refused([](RealizedWork& w) { w.coord_ns = -1; }, "`coord_ns` is -1"));
  EXPECT_NO_THROW(simulate(m, h, unit_work(m), SimOptions{}));
}

// A record put together by its caller, read by stage and rank: fewer ranks than pp x tp, or
// peaks for fewer stages, read past the vectors' ends (a crash).
TEST(SimLimits, MetricsOfARecordShortOfItsRanksAreRefused) {
  StepRecord r;
  r.pp = 2;
  r.makespan = 1000;
  EXPECT_ERROR(compute_metrics(r, {}), InputError,
               "step record: `ranks` holds 0 entries, not `pp` 2 x `tp` 1");
  r.ranks.resize(2);
  r.peak_d = {3};
  EXPECT_ERROR(compute_metrics(r, {}), InputError,
               "step record: `peak_d` holds 1 entries, not `pp` 2 (or none)");
  r.peak_d = {3, 1};
  EXPECT_EQ(compute_metrics(r, {}).stages.size(), 2u);
}

}  // namespace
}  // namespace rrfp::test
