// The message model of a realized work (WorkloadParams' comm_* fields, sim/shared_links.hpp):
// links shared as a fluid, one copy at a time per receiver, the slowdown of several moving at
// once, wake-ups, and bytes over bandwidth; exact times worked by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "core/error.hpp"
#include "expect_error.hpp"
#include "sim_helpers.hpp"

namespace rrfp::test {
namespace {

// Stage 0 of GPipe at P=2 runs its four forwards in no time: four messages of 2 ms latency and
// 10 ms of bytes start at once. On their own they land at 12 ms; sharing one message's rate,
// their bytes move at a quarter of it from 2 ms on (the latency is not shared), landing at
// 42 ms; on two messages' worth, at 22 ms; on 1.25, at 2 + 40 / 1.25 = 34 ms.
TEST(MessageModel, LinksShareTheirCapacityAmongMessagesInFlight) {
  WorkModel m(config(2, 4));
  for (const double links : {0.0, 1.0, 2.0, 1.25, 4.0}) {
    RealizedWork w = unit_work(m);
    set_message_model(m, w, {.latency_us = 2'000, .links = links});
    for (int mb = 0; mb < 4; ++mb) {
      const int f = m.index({Kind::F, 0, mb});
      w.compute_ns[f] = 0;
      w.message_ns[f] = 12'000'000;
    }
    const SimRun r = run(m, "gpipe", Policy::Fixed, w);
    const std::int64_t lands = links == 0 || links >= 4 ? 12'000'000
                               : links == 1             ? 42'000'000
                               : links == 2             ? 22'000'000
                                                        : 34'000'000;
    for (const TaskRecord& t : r.result.tasks) {
      // Stage 1's forwards (1 ms each) run back to back from the moment the four land.
      if (t.stage == 1 && t.task.kind == Kind::F) {
        EXPECT_EQ(t.start, lands + t.task.mb * 1'000'000) << "links " << links << " " << t.task.mb;
      }
      // A trace keeps the time shared: replaying it gives the very same step.
      if (t.stage == 0 && t.task.kind == Kind::F) {
        EXPECT_EQ(t.send_ns, lands) << "links " << links << " mb " << t.task.mb;
      }
    }
  }
}

// The same four forwards into stage 1 where each process copies its arrivals one at a time:
// whatever the links, their bytes move in turn after the 2 ms latency, landing at 12, 22, 32 and
// 42 ms, and stage 1 runs each forward as it lands.
TEST(MessageModel, SerialReceiveCopiesEachReceiversMessagesInTurn) {
  WorkModel m(config(2, 4));
  for (const double links : {0.0, 1.0, 2.0, 4.0}) {
    RealizedWork w = unit_work(m);
    set_message_model(m, w, {.latency_us = 2'000, .links = links, .serial_receive = true});
    for (int mb = 0; mb < 4; ++mb) {
      const int f = m.index({Kind::F, 0, mb});
      w.compute_ns[f] = 0;
      w.message_ns[f] = 12'000'000;
    }
    const SimRun r = run(m, "gpipe", Policy::Fixed, w);
    for (const TaskRecord& t : r.result.tasks) {
      const std::int64_t lands = 12'000'000 + t.task.mb * 10'000'000;
      if (t.stage == 1 && t.task.kind == Kind::F) {
        EXPECT_EQ(t.start, lands) << "links " << links << " mb " << t.task.mb;
      }
      if (t.stage == 0 && t.task.kind == Kind::F) {
        EXPECT_EQ(t.send_ns, lands) << "links " << links << " mb " << t.task.mb;
      }
    }
  }
}

// The same four messages with two or more at once each taking at least twice as long: on
// capacity for all four (4 or none), their bytes take 20 ms, landing at 22 ms; on one message's
// rate the links' share (a quarter) is the larger slowdown: 42 ms, as without it. Copied one at
// a time per receiver, only one moves at once and the slowdown never applies: 12, 22, 32, 42 ms.
TEST(MessageModel, TwoSlowdownIsTheLeastEachOfSeveralMovingTakes) {
  WorkModel m(config(2, 4));
  struct Case {
    double links;
    bool serial;
    std::int64_t first_lands, apart;
  };
  for (const Case k : {Case{4, false, 22'000'000, 0}, Case{0, false, 22'000'000, 0},
                       Case{1, false, 42'000'000, 0}, Case{4, true, 12'000'000, 10'000'000}}) {
    RealizedWork w = unit_work(m);
    set_message_model(
        m, w,
        {.latency_us = 2'000, .links = k.links, .two_slowdown = 2, .serial_receive = k.serial});
    for (int mb = 0; mb < 4; ++mb) {
      const int f = m.index({Kind::F, 0, mb});
      w.compute_ns[f] = 0;
      w.message_ns[f] = 12'000'000;
    }
    const SimRun r = run(m, "gpipe", Policy::Fixed, w);
    int seen = 0;
    for (const TaskRecord& t : r.result.tasks)
      if (t.stage == 0 && t.task.kind == Kind::F) {
        ++seen;
        EXPECT_EQ(t.send_ns, k.first_lands + t.task.mb * k.apart)
            << "links " << k.links << " serial " << k.serial << " mb " << t.task.mb;
      }
    EXPECT_EQ(seen, 4);
  }
}

// Blocking mode at P=3, ready dispatch, F and B 1 ms each, messages with no latency. Stage 1
// offers its F0 (2 ms of bytes) to stage 2 at 2 ms and, while held, accepts stage 0's F1 (10 ms
// of bytes, 2-12 ms). Its F0 reaches stage 2 at 4 ms, and stage 2 offers B0 (no bytes) at 6 ms.
// One copy at a time per receiver: stage 1 is inside the F1 copy until 12 ms, so the
// acknowledgement of its F0 releases it then, and B0 lands behind the copy at 12 ms too
// (releasing stage 2); stage 1 runs F1, ranked first, then B0 from 13 ms. Without: stage 1 is
// released at 4 ms and runs B0 from 6 ms. With the payloads on the offers (comm_offer_payload)
// every time is the same: each receiver is idle when the bytes land, and the acknowledgements
// take no time.
TEST(MessageModel, SerialReceiveHoldsAnAcknowledgementBehindTheCopy) {
  WorkModel m(config(3, 2));
  for (const bool serial : {false, true})
    for (const bool offer : {false, true}) {
      RealizedWork w = unit_work(m);
      set_message_model(m, w, {.serial_receive = serial, .offer_payload = offer});
      for (int i = 0; i < w.num_tasks; ++i)
        w.message_ns[i] = 0;
      w.message_ns[m.index({Kind::F, 0, 1})] = 10'000'000;  // stage 0's F1
      w.message_ns[m.index({Kind::F, 1, 0})] = 2'000'000;   // stage 1's F0
      SimOptions o;
      o.comm = CommMode::Blocking;
      const SimRun r = run(m, "1f1b", Policy::Ready, w, o);
      std::map<int, std::pair<std::int64_t, std::int64_t>> held;  // stage: its first send's hold
      for (const BlockedSpan& b : r.result.blocked)
        if (b.reason == BlockReason::Send && !held.count(b.stage)) held[b.stage] = {b.start, b.end};
      const std::int64_t ms = 1'000'000;
      const std::string ctx =
          "serial " + std::to_string(serial) + " offer " + std::to_string(offer);
      EXPECT_EQ(held[1], std::make_pair(2 * ms, (serial ? 12 : 4) * ms)) << ctx;
      if (serial) {
        EXPECT_EQ(held[2], std::make_pair(6 * ms, 12 * ms)) << ctx;
      } else {
        EXPECT_FALSE(held.count(2)) << ctx << ": B0 carries no bytes, stage 2 is never held";
      }
      int seen = 0;
      for (const TaskRecord& t : r.result.tasks)
        if (t.task == TaskId{Kind::B, 1, 0}) {  // stage 1's B0 (chunk = stage at V=1)
          ++seen;
          EXPECT_EQ(t.start, (serial ? 13 : 6) * ms) << ctx;
        }
      EXPECT_EQ(seen, 1) << ctx;
    }
}

TEST(MessageModel, RefusesLinksBelowOneMessage) {
  WorkModel m(config(2, 2));
  RealizedWork w = unit_work(m);
  EXPECT_ERROR(set_message_model(m, w, {.latency_us = 5, .bandwidth_gbps = 2, .links = 0.5}),
               InputError,
               "message model: links: must be 0 (each message on its own) or in [1, 4096]");
  EXPECT_ERROR(set_message_model(m, w, {.latency_us = 5, .bandwidth_gbps = 2, .links = -1}),
               InputError,
               "message model: links: must be 0 (each message on its own) or in [1, 4096]");
  WorkloadParams p;
  p.comm_links = 0.9;
  EXPECT_ERROR(validate(p), InputError,
               "workload comm_links: must be 0 (each message on its own) or in [1, 4096]");
}

TEST(MessageModel, RefusesATwoSlowdownOutsideOneToSixtyFour) {
  WorkModel m(config(2, 2));
  RealizedWork w = unit_work(m);
  for (const double bad : {0.9, 0.0, 65.0, std::nan("")}) {
    try {
      set_message_model(m, w, {.links = 2, .two_slowdown = bad});
      ADD_FAILURE() << bad << " accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(
                    "message model: two_slowdown: must be a finite number in [1, 64]"),
                std::string::npos)
          << e.what();
    }
    WorkloadParams p;
    p.comm_two_slowdown = bad;
    EXPECT_ERROR(validate(p), InputError,
                 "workload comm_two_slowdown: must be a finite number in [1, 64]")
        << bad;
  }
  EXPECT_ERROR(set_message_model(m, w, {.bandwidth_gbps = -1}), InputError,
               "message model: bandwidth_gbps: must be a finite number in [0, 1e+09], got -1");
  EXPECT_NO_THROW(set_message_model(m, w, {.links = 2, .two_slowdown = 64}));
}

// The wake-up (WorkloadParams::comm_wake_us, comm_wake_per_copy_us): 0 to 1 s each, named when
// refused, carried to the realized work in nanoseconds by both routes.
TEST(MessageModel, WakeUpsAreZeroToOneSecondAndReachTheRealizedWork) {
  WorkModel m(config(2, 2));
  RealizedWork w = unit_work(m);
  for (const double bad : {-1.0, 1e6 + 1, std::nan("")}) {
    try {
      set_message_model(m, w, {.wake_us = bad});
      ADD_FAILURE() << bad << " accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("message model: wake_us: must be a finite number"),
                std::string::npos)
          << e.what();
    }
    EXPECT_ERROR(set_message_model(m, w, {.wake_per_copy_us = bad}), InputError,
                 "message model: wake_per_copy_us: must be a finite number in [0, 1e+06]")
        << bad;
    WorkloadParams p;
    p.comm_wake_us = bad;
    try {
      validate(p);
      ADD_FAILURE() << bad << " accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("comm_wake_us"), std::string::npos) << e.what();
    }
    p = WorkloadParams{};
    p.comm_wake_per_copy_us = bad;
    EXPECT_ERROR(validate(p), InputError,
                 "workload comm_wake_per_copy_us: must be a finite number in [0, 1e+06]")
        << bad;
  }
  set_message_model(m, w, {.wake_us = 30, .wake_per_copy_us = 250.5});
  EXPECT_EQ(w.wake_ns, 30'000);
  EXPECT_EQ(w.wake_per_copy_ns, 250'500);
  const WorkloadParams p = apply_workload_json(
      WorkloadParams{}, R"({"comm_wake_us": 12, "comm_wake_per_copy_us": 7.5})", "test");
  const RealizedWork r = realize(p, m, 1, 1);
  EXPECT_EQ(r.wake_ns, 12'000);
  EXPECT_EQ(r.wake_per_copy_ns, 7'500);
  EXPECT_EQ(realize(WorkloadParams{}, m, 1, 1).wake_ns, 0);
}

TEST(MessageModel, SizeCostsBytesOverBandwidthAndOnlyCrossStageOutputsSend) {
  WorkModel m(config(2, 2));
  RealizedWork w = unit_work(m);
  set_message_model(m, w, {.latency_us = 5, .bandwidth_gbps = 2});  // 5 us + bytes / 2 GB/s
  for (int i = 0; i < w.num_tasks; ++i) {
    const TaskId t = m.task(i);
    const bool sends =
        (t.kind == Kind::F && m.stage_of(t) == 0) || (t.kind == Kind::B && m.stage_of(t) == 1);
    const double us = 5 + static_cast<double>(w.message_bytes[i]) / 2e3;
    EXPECT_EQ(w.message(0, i), sends ? duration_ns(us, "") : 0) << to_string(t);
  }
  EXPECT_GT(w.message_bytes[0], 0);
}

}  // namespace
}  // namespace rrfp::test
