// WorkloadParams::comm_wake_us and comm_wake_per_copy_us: a rank idle when an input arrives
// starts its task only once its thread has woken, later the more copies are under way. Exact
// times worked by hand, and a property over many seeds.
#include <gtest/gtest.h>

#include <map>

#include "shapes.hpp"
#include "sim/check.hpp"
#include "sim_helpers.hpp"

namespace rrfp::test {
namespace {

constexpr std::int64_t kMs = 1'000'000;

// GPipe at P=2: 1 ms tasks, stage 0's forwards send 10 ms messages, no other message takes
// time; messages as `mm` says (its latency none).
RealizedWork forwards_of_10ms(const WorkModel& m, const MessageModel& mm) {
  RealizedWork w = unit_work(m);
  set_message_model(m, w, mm);
  for (int i = 0; i < w.num_tasks; ++i)
    w.message_ns[i] = 0;
  for (int mb = 0; mb < m.microbatches(); ++mb)
    w.message_ns[m.index({Kind::F, 0, mb})] = 10 * kMs;
  return w;
}

// Stage 1's forwards by microbatch: their starts. The step is checked valid on the way.
std::map<int, std::int64_t> stage1_forwards(const WorkModel& m, const RealizedWork& w,
                                            CommMode mode = CommMode::Async) {
  SimOptions o;
  o.comm = mode;
  o.record = true;
  const SimRun r = run(m, "gpipe", Policy::Fixed, w, o);
  EXPECT_TRUE(check_run(m, 1, r.result.tasks, {.policy = Policy::Fixed}).empty());
  std::map<int, std::int64_t> starts;
  for (const TaskRecord& t : r.result.tasks)
    if (t.stage == 1 && t.task.kind == Kind::F) starts[t.task.mb] = t.start;
  return starts;
}

// GPipe at P=2, M=2, async, 1 ms tasks, forwards' messages of 10 ms each on its own. F0's input
// lands at 11 ms on an idle stage 1, which starts it 0.5 ms later; F1's lands at 12 ms while F0
// runs (11.5-12.5): no wake-up, F1 follows F0 at 12.5. Without the wake-up: 11 and 12.
TEST(Wake, AnIdleRankStartsOnceAwakeABusyOneWhenFree) {
  WorkModel m(config(2, 2));
  for (const double wake : {0.0, 500.0}) {
    // No links: no copy is ever under way.
    const auto starts =
        stage1_forwards(m, forwards_of_10ms(m, {.wake_us = wake, .wake_per_copy_us = 3000}));
    EXPECT_EQ(starts.at(0), wake > 0 ? 11 * kMs + kMs / 2 : 11 * kMs) << "wake " << wake;
    EXPECT_EQ(starts.at(1), wake > 0 ? 12 * kMs + kMs / 2 : 12 * kMs) << "wake " << wake;
  }
}

// A rank whose task ends in the instant an input lands is awake: GPipe at P=2, M=2, stage 0's
// F1 takes 11 ms and its message 0.5 ms, landing at 12.5 ms as stage 1's F0 (11.5-12.5) ends.
// F1 starts at 12.5, not 13.
TEST(Wake, ARankWhoseTaskEndsAsTheInputLandsIsAwake) {
  WorkModel m(config(2, 2));
  RealizedWork w = forwards_of_10ms(m, {.wake_us = 500});
  w.compute_ns[m.index({Kind::F, 0, 1})] = 11 * kMs;
  w.message_ns[m.index({Kind::F, 0, 1})] = kMs / 2;
  const auto starts = stage1_forwards(m, w);
  EXPECT_EQ(starts.at(0), 11 * kMs + kMs / 2);
  EXPECT_EQ(starts.at(1), 12 * kMs + kMs / 2);
}

// The same with each process copying its arrivals one at a time on shared links: F0's bytes move
// 1-11 ms, F1's wait for them and move 11-21. When F0 lands, F1's copy is under way: stage 1
// starts F0 at 11 + 0.5 + 2 (one copy) = 13.5 ms. F1 lands at 21 with nothing moving: 21.5.
TEST(Wake, EachCopyUnderWayAddsItsShare) {
  WorkModel m(config(2, 2));
  const auto starts = stage1_forwards(
      m, forwards_of_10ms(m, {.serial_receive = true, .wake_us = 500, .wake_per_copy_us = 2000}));
  EXPECT_EQ(starts.at(0), 13 * kMs + kMs / 2);
  EXPECT_EQ(starts.at(1), 21 * kMs + kMs / 2);
}

// Blocking, the payload on its offer (as over MPI): the offer wakes the idle receiver, which
// accepts it and starts the task once awake. GPipe at P=2, M=1: F0's offer lands at 11 ms, F0
// starts at 11.5.
TEST(Wake, AnOfferWakesTheIdleReceiverItDelivers) {
  WorkModel m(config(2, 1));
  for (const bool offer : {true, false}) {
    const RealizedWork w = forwards_of_10ms(m, {.offer_payload = offer, .wake_us = 500});
    // With the bytes after the acceptance, the offer (no time) is accepted at 1 ms, the bytes
    // land at 11, and their landing wakes the rank.
    EXPECT_EQ(stage1_forwards(m, w, CommMode::Blocking).at(0), 11 * kMs + kMs / 2)
        << "offer " << offer;
  }
}

// Tensor parallelism at P=2, M=1, T=2, coordination 10 us: stage 0's F0 group ends at E (its
// follower started 10 us after its leader), and both ranks' inputs land on stage 1's idle ranks
// at E + 10 ms. The leader starts at E + 10.5 ms, once awake, and its choice, made then, reaches
// the follower (awake too) at E + 10.51 ms: the choice left as the leader was woken, and the
// follower started with it (runtime.md: at least the hop after its leader). An agree round's
// ranks, done 10 us after the landing, start once awake, at E + 10.5 ms (in the simulator the
// round overlaps the wake-up).
TEST(Wake, FollowersAndAgreeRoundsStartOnceAwake) {
  WorkModel m(config(2, 1));
  WorkloadParams p;
  p.tp_sigma = 0;
  p.coord_latency_us = 10;
  for (const TpProtocol protocol : {TpProtocol::Leader, TpProtocol::Agree}) {
    RealizedWork w = realize(p, m, 2, 1);
    set_message_model(m, w, {.wake_us = 500});
    for (int r = 0; r < 2; ++r)
      w.message_ns[static_cast<size_t>(r) * w.num_tasks + m.index({Kind::F, 0, 0})] = 10 * kMs;
    SimOptions o;
    o.tp_protocol = protocol;
    o.record = true;
    const StepRecord rec = simulate(m, make_hint("gpipe", m), w, o);
    EXPECT_TRUE(check_run(m, 2, rec.tasks, {.policy = Policy::Fixed}).empty());
    std::map<int, std::int64_t> end0, start1;  // by rank
    for (const TaskRecord& t : rec.tasks)
      if (t.task.kind == Kind::F)
        (t.stage == 0 ? end0 : start1)[t.rank] = t.stage == 0 ? t.end : t.start;
    ASSERT_EQ(end0.size(), 2u);
    ASSERT_EQ(start1.size(), 2u);
    const std::int64_t hop = protocol == TpProtocol::Leader ? 10'000 : 0;
    EXPECT_EQ(start1[0], end0[0] + 10 * kMs + kMs / 2) << static_cast<int>(protocol);
    EXPECT_EQ(start1[1], start1[0] + hop) << static_cast<int>(protocol);
  }
}

// Over many seeds, fixed 1F1B and ready BF and BFW, both modes, T = 1 and 2 (leader and agree,
// a 50 us collective), on shared links: the step stays valid, and the wake-ups cost it something
// but never more than every cross-stage input waking its rank at the largest wake-up would (at
// most one copy under way per receiving process).
TEST(Wake, StepsStayValidAndPayAtMostEveryWakeUp) {
  WorkModel m(config(4, 8, 1, true));  // split backward: BFW needs it
  WorkloadParams p = workload_preset("jitter");
  p.comm_latency_us = 20;
  p.comm_bandwidth_gbps = 5;
  p.bytes_per_token = 1 << 16;
  p.comm_links = 2;
  p.comm_serial_receive = true;
  p.tp_collective_us = 50;
  constexpr std::int64_t kWake = 30'000, kPerCopy = 200'000;
  struct Tp {
    int tp;
    TpProtocol protocol;
  };
  int slower = 0, runs = 0;
  for (std::uint64_t seed = 1; seed <= 20; ++seed)
    for (const Tp tp :
         {Tp{1, TpProtocol::Leader}, Tp{2, TpProtocol::Leader}, Tp{2, TpProtocol::Agree}})
      for (const char* hint : {"1f1b", "bf", "bfw"})
        for (const CommMode mode : {CommMode::Async, CommMode::Blocking}) {
          const std::string ctx = std::string(hint) + " seed " + std::to_string(seed) + " tp " +
                                  std::to_string(tp.tp) + " protocol " +
                                  std::to_string(static_cast<int>(tp.protocol)) +
                                  (mode == CommMode::Async ? " async" : " blocking");
          const Policy policy = is_rule_hint_name(hint) ? Policy::Ready : Policy::Fixed;
          RealizedWork w = realize(p, m, tp.tp, seed);
          SimOptions o;
          o.comm = mode;
          o.tp_protocol = tp.protocol;
          o.record = true;
          const SimRun off = run(m, hint, policy, w, o);
          w.wake_ns = kWake;
          w.wake_per_copy_ns = kPerCopy;
          const SimRun on = run(m, hint, policy, w, o);
          CheckOptions co;
          co.policy = policy;
          co.limit = on.result.arbiter.limit;
          co.max_pending_w = on.result.arbiter.max_pending_w;
          const auto bad = check_run(m, tp.tp, on.result.tasks, co);
          ASSERT_TRUE(bad.empty()) << ctx << ": " << bad.front();
          int inputs = 0;  // cross-stage inputs per rank: forwards past stage 0, backwards before
                           // the last
          for (const TaskRecord& t : on.result.tasks)
            inputs += t.rank == 0 && ((t.task.kind == Kind::F && t.stage > 0) ||
                                      (t.task.kind == Kind::B && t.stage < m.pp() - 1));
          EXPECT_LE(on.result.makespan,
                    off.result.makespan + inputs * (kWake + m.pp() * tp.tp * kPerCopy))
              << ctx;
          slower += on.result.makespan > off.result.makespan;
          ++runs;
        }
  EXPECT_GT(slower, runs / 2) << "the wake-ups changed too few steps to count";
}

}  // namespace
}  // namespace rrfp::test
