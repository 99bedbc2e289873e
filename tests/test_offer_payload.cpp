// WorkloadParams::comm_offer_payload: a blocking run whose offers carry their payload, as rrfp's
// runtime sends them over a transport that moves bytes. Exact times where they can be worked by
// hand (against the rendezvous whose bytes wait for the acceptance), and a property over many
// seeds that inputs and releases wait for the bytes.
#include <gtest/gtest.h>

#include <array>
#include <map>

#include "core/error.hpp"
#include "shapes.hpp"
#include "sim/check.hpp"
#include "sim_helpers.hpp"

namespace rrfp::test {
namespace {

constexpr std::int64_t kMs = 1'000'000;

// GPipe at P=2, M=2, blocking: stage 0's forwards take 1 ms and send 10 ms messages, stage 1's
// forwards take 20 ms; acknowledgements take 0.5 ms. With the bytes after the acceptance, stage
// 1 accepts F0 at 1 ms and starts it at 11; it accepts F1 only once F0 ends (31 ms), whose bytes
// then take until 41. With the payload on the offer, F1's bytes move while stage 1 computes F0
// (12.5-22.5 ms): it starts F1 at 31. The sender is released by the acknowledgement, 0.5 ms
// after the acceptance, instead of at the transfer's end.
TEST(OfferPayload, BytesMoveWhileTheReceiverComputes) {
  WorkModel m(config(2, 2));
  for (const bool offer : {false, true}) {
    RealizedWork w = unit_work(m);
    set_message_model(m, w, {.latency_us = 500, .offer_payload = offer});
    for (int i = 0; i < w.num_tasks; ++i)
      w.message_ns[i] = 0;
    for (int mb = 0; mb < 2; ++mb) {
      w.message_ns[m.index({Kind::F, 0, mb})] = 10 * kMs;
      w.compute_ns[m.index({Kind::F, 1, mb})] = 20 * kMs;
    }
    SimOptions o;
    o.comm = CommMode::Blocking;
    o.record = true;
    const SimRun r = run(m, "gpipe", Policy::Fixed, w, o);
    std::map<int, std::int64_t> starts;  // stage 1's forwards by microbatch
    for (const TaskRecord& t : r.result.tasks)
      if (t.stage == 1 && t.task.kind == Kind::F) starts[t.task.mb] = t.start;
    EXPECT_EQ(starts[0], 11 * kMs) << "offer " << offer;
    EXPECT_EQ(starts[1], (offer ? 31 : 41) * kMs) << "offer " << offer;
    std::vector<std::pair<std::int64_t, std::int64_t>> held;  // stage 0's sends of F0, F1
    for (const BlockedSpan& b : r.result.blocked)
      if (b.stage == 0 && b.reason == BlockReason::Send && held.size() < 2)
        held.emplace_back(b.start, b.end);
    ASSERT_EQ(held.size(), 2u) << "offer " << offer;
    if (offer) {
      EXPECT_EQ(held[0], std::make_pair(1 * kMs, 11 * kMs + kMs / 2));
      EXPECT_EQ(held[1], std::make_pair(12 * kMs + kMs / 2, 31 * kMs + kMs / 2));
    } else {
      EXPECT_EQ(held[0], std::make_pair(1 * kMs, 11 * kMs));
      EXPECT_EQ(held[1], std::make_pair(12 * kMs, 41 * kMs));
    }
  }
}

// 1F1B at P=3, M=3, blocking, messages and acknowledgements of no time, stage 2's tasks 10 ms
// (the others 1 ms). Stage 1 (F0 F1 B0 F2 B1 B2) is offered F2 at 3 ms while its posted receive
// is B0's, which stage 2 offers only at 22 ms. Accepting B0 then delivers it (the payload came
// with the offer) and posts F2's receive: F2's offer is accepted in the same instant, before
// stage 1 starts B0, and stage 0 is released at 22 ms, not when B0 ends (23 ms). With the bytes
// after the acceptance it is the same step.
// 1F1B at P=2, M=1, blocking, every task 1 ms, every message 2 ms with the payload on the
// offer: stage 1's B ends at 5 ms and holds it until its acknowledgement lands at 9, after the
// step ended (stage 0's B: 7-8 ms). Its wait is cut at the end: blocked 3 ms (5-8), idle 3 ms
// (0-3), where the wait past the end was counted and taken from its idle time (4 and 2). With
// records off the stages count the same.
TEST(OfferPayload, AWaitPastTheStepsEndIsCutThere) {
  WorkModel m(config(2, 1));
  RealizedWork w = unit_work(m);
  set_message_model(m, w, {.latency_us = 2000, .offer_payload = true});
  for (const bool record : {true, false}) {
    SimOptions o;
    o.comm = CommMode::Blocking;
    o.record = record;
    const StepRecord r = run(m, "1f1b", Policy::Fixed, w, o).result;
    ASSERT_EQ(r.makespan, 8 * kMs);
    EXPECT_EQ(r.ranks[1].blocked, 3 * kMs) << "record " << record;
    EXPECT_EQ(r.ranks[0].blocked, 4 * kMs) << "record " << record;  // 1-5: within the step
    if (!record) continue;
    for (const BlockedSpan& b : r.blocked)
      EXPECT_LE(b.end, r.makespan) << "stage " << b.stage;
  }
}

// The runtime's record, whole or merged over processes, is cut the same way: a span past the
// end is cut at it or, wholly past it, dropped; its rank's blocked time with it.
TEST(OfferPayload, ARecordsWaitsPastItsEndAreCutThere) {
  StepRecord r;
  r.pp = 2;
  r.makespan = 8;
  r.ranks.resize(2);
  r.blocked = {{0, 0, 1, 5, BlockReason::Send},
               {1, 0, 5, 9, BlockReason::Send},
               {1, 0, 9, 10, BlockReason::Collective}};
  for (const BlockedSpan& b : r.blocked)
    r.ranks[b.stage].add_blocked(b.reason, b.end - b.start);
  cut_waits_at_end(r);
  ASSERT_EQ(r.blocked.size(), 2u);
  EXPECT_EQ(r.blocked[1].end, 8);
  EXPECT_EQ(r.ranks[0].blocked, 4);
  EXPECT_EQ(r.ranks[1].blocked, 3);
  EXPECT_EQ(r.ranks[1].collective, 0);
}

TEST(OfferPayload, AcceptingAnInputPostsTheNextReceiveBeforeTheRankComputes) {
  WorkModel m(config(3, 3));
  for (const bool offer : {false, true}) {
    RealizedWork w = unit_work(m);
    set_message_model(m, w, {.offer_payload = offer});
    for (int i = 0; i < w.num_tasks; ++i)
      w.message_ns[i] = 0;
    for (int mb = 0; mb < 3; ++mb)
      for (Kind k : {Kind::F, Kind::B})
        w.compute_ns[m.index({k, 2, mb})] = 10 * kMs;
    SimOptions o;
    o.comm = CommMode::Blocking;
    o.record = true;
    const SimRun r = run(m, "1f1b", Policy::Fixed, w, o);
    std::map<int, std::pair<std::int64_t, std::int64_t>> held;  // stage: its first recorded hold
    for (const BlockedSpan& b : r.result.blocked)
      if (b.reason == BlockReason::Send && !held.count(b.stage)) held[b.stage] = {b.start, b.end};
    EXPECT_EQ(held[0], std::make_pair(3 * kMs, 22 * kMs)) << "offer " << offer;
    EXPECT_EQ(held[1], std::make_pair(3 * kMs, 12 * kMs)) << "offer " << offer;
    for (const TaskRecord& t : r.result.tasks)
      if (t.task == TaskId{Kind::B, 1, 0}) {
        EXPECT_EQ(t.start, 22 * kMs) << "offer " << offer;
      }
  }
}

// Over many shapes, hints and presets, with the payload on the offer: the step is a valid run,
// every input is used only after its bytes have landed, and every sender is held until its
// message has landed and the acknowledgement come back. (Neither rendezvous is always the
// faster: with the payload on the offer the bytes overlap the receiver's compute, but a receiver
// accepts only between tasks, and an offer that lands while it computes holds its sender until
// the task ends, where a bare offer accepted at an idle instant before it would not.)
TEST(OfferPayload, PropertyInputsAndReleasesWaitForTheBytes) {
  constexpr std::int64_t kAck = 200'000;
  int runs = 0;
  for (const char* hint_name : {"gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "bf", "bfw"}) {
    for (int seed = 0; seed < 50; ++seed) {
      Shape sh = random_shape(hint_name, seed);
      WorkModel m(sh.cfg);
      Hint hint = make_hint(hint_name, m);
      const auto& presets = workload_names();
      RealizedWork w = realize(workload_preset(presets[seed % presets.size()]), m, 1, seed);
      w.offer_payload = true;
      w.link_latency_ns = kAck;
      SimOptions o;
      o.comm = CommMode::Blocking;
      o.arbiter.policy = is_rule_hint_name(hint_name) ? Policy::Ready : Policy::Fixed;
      o.arbiter.limit = sh.limit;
      o.record = true;
      const std::string ctx = std::string(hint_name) + " seed " + std::to_string(seed);
      const StepRecord r = simulate(m, hint, w, o);
      CheckOptions co;
      co.policy = o.arbiter.policy;
      co.limit = r.arbiter.limit;
      co.max_pending_w = m.split() ? r.arbiter.max_pending_w : 0;
      const auto bad = check_run(m, 1, r.tasks, co);
      ASSERT_TRUE(bad.empty()) << ctx << ": " << bad.front();
      std::vector<const TaskRecord*> by_index(m.num_tasks());
      for (const TaskRecord& t : r.tasks)
        by_index[m.index(t.task)] = &t;
      std::map<std::pair<int, std::int64_t>, std::int64_t> hold_end;  // (stage, start): end
      for (const BlockedSpan& b : r.blocked)
        if (b.reason == BlockReason::Send) hold_end[{b.stage, b.start}] = b.end;
      Deps c{};
      for (const TaskRecord& t : r.tasks)
        for (int i = 0, n = m.consumers(t.task, c); i < n; ++i) {
          if (!c[i].cross_stage) continue;
          const std::int64_t lands = t.end + t.send_ns;
          ASSERT_EQ(t.send_ns, w.message(0, m.index(t.task))) << ctx << " " << to_string(t.task);
          ASSERT_GE(by_index[m.index(c[i].task)]->start, lands)
              << ctx << " " << to_string(c[i].task);
          const auto held = hold_end.find({t.stage, t.end});
          ASSERT_NE(held, hold_end.end()) << ctx << ": " << to_string(t.task) << " held no one";
          ASSERT_GE(held->second, lands + kAck) << ctx << " " << to_string(t.task);
        }
      ++runs;
    }
  }
  EXPECT_EQ(runs, 300);
}

// Blocking with T = 2, GPipe at P=2, M=2, every task 1 ms, messages of no time, bare offers:
// stage 1's rank 1 computes F m0 for 10 ms (1-11 ms), its rank 0 for 1 ms. Stage 0 offers F m1
// at 2 ms: rank 0, its share of F m0 done and waiting in the collective for rank 1, accepts it
// then, and releases its sender; rank 1 accepts at 11 ms, once it ends.
TEST(OfferPayload, TensorParallelARankWaitingInTheCollectiveAccepts) {
  WorkModel m(config(2, 2));
  RealizedWork w;
  w.tp = 2;
  w.num_tasks = m.num_tasks();
  w.compute_ns.assign(2 * static_cast<std::size_t>(w.num_tasks), kMs);
  w.message_ns.assign(2 * static_cast<std::size_t>(w.num_tasks), 0);
  w.message_bytes.assign(static_cast<std::size_t>(w.num_tasks), 8);
  w.compute_ns[w.num_tasks + m.index({Kind::F, 1, 0})] = 10 * kMs;
  SimOptions o;
  o.comm = CommMode::Blocking;
  o.record = true;
  const SimRun r = run(m, "gpipe", Policy::Fixed, w, o);
  std::map<int, std::vector<std::pair<std::int64_t, std::int64_t>>> held;  // stage 0, by rank
  for (const BlockedSpan& b : r.result.blocked)
    if (b.stage == 0 && b.reason == BlockReason::Send) held[b.rank].emplace_back(b.start, b.end);
  EXPECT_TRUE(held[0].empty());
  EXPECT_EQ(held[1], (std::vector<std::pair<std::int64_t, std::int64_t>>{{2 * kMs, 11 * kMs}}));
}

// The deadlock semantics.md §4 described before ranks waiting in their collective accepted
// offers (tensor parallelism, blocking, payload on the offer, `ready`): these shapes stopped
// with each stage holding a rank in a task waiting for a peer held by a send the other stage's
// waiting rank would take. And a property over random shapes, policies and protocols.
TEST(OfferPayload, TensorParallelBlockingRunsEnd) {
  struct Found {
    int p, v, m, t;
    std::uint64_t seed;
  };
  auto one = [](const PipelineConfig& cfg, const char* hint_name, int t, std::uint64_t seed,
                Policy policy, TpProtocol protocol, bool offer, const std::string& preset) {
    WorkModel m(cfg);
    RealizedWork w = realize(workload_preset(preset), m, t, seed);
    w.offer_payload = offer;
    SimOptions o;
    o.comm = CommMode::Blocking;
    o.arbiter.policy = policy;
    o.tp_protocol = protocol;
    o.record = true;
    const StepRecord r = simulate(m, make_hint(hint_name, m), w, o);
    CheckOptions co;
    co.policy = policy;
    co.limit = r.arbiter.limit;
    co.max_pending_w = m.split() ? r.arbiter.max_pending_w : 0;
    return check_run(m, t, r.tasks, co);
  };
  for (const Found& f : {Found{2, 2, 5, 3, 127}, Found{4, 2, 7, 4, 680}}) {
    const auto bad = one(config(f.p, f.m, f.v, true), "bfw", f.t, f.seed, Policy::Ready,
                         TpProtocol::Leader, true, "multimodal");
    EXPECT_TRUE(bad.empty()) << "seed " << f.seed << ": " << bad.front();
  }
  int runs = 0;
  for (int seed = 0; seed < 240; ++seed) {
    const char* hint_name = seed % 3 == 0 ? "bfw" : seed % 3 == 1 ? "bf" : "1f1b";
    const Policy policy = seed % 3 == 2 ? Policy::Fixed : Policy::Ready;
    Shape sh = random_shape(hint_name, seed);
    const auto bad = one(sh.cfg, hint_name, 2 + seed % 3, static_cast<std::uint64_t>(seed), policy,
                         seed % 4 == 0 ? TpProtocol::Agree : TpProtocol::Leader, seed % 5 != 0,
                         workload_names()[seed % workload_names().size()]);
    ASSERT_TRUE(bad.empty()) << hint_name << " seed " << seed << ": " << bad.front();
    ++runs;
  }
  EXPECT_EQ(runs, 240);
}

TEST(OfferPayload, ReadFromTheWorkloadFile) {
  EXPECT_TRUE(apply_workload_json(WorkloadParams{}, R"({"comm_offer_payload": true})", "w.json")
                  .comm_offer_payload);
  WorkModel m(config(2, 2));
  WorkloadParams p;
  p.comm_offer_payload = true;
  EXPECT_TRUE(realize(p, m, 1, 1).offer_payload);
  try {
    apply_workload_json(WorkloadParams{}, R"({"comm_offer_payload": 1})", "w.json");
    ADD_FAILURE() << "a number accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("\"comm_offer_payload\": must be true or false"),
              std::string::npos)
        << e.what();
  }
}

// Each process copying its arrivals one at a time (comm_serial_receive), an acknowledgement
// that lands while its process is inside a copy waits for that copy's end and no longer. A
// step found by a search over seeds: zb-h1 at P=3, M=4, fixed, blocking, seed 4471. Stage 1 is
// held on its send of F c1 m0 when its process starts copying F c0 m1 in; the acknowledgement
// lands during that copy, and B c2 m0's copy joins behind it after. Released at the end of F
// c0 m1's copy, stage 1 starts F c1 m1 as its input lands. The release waited for B c2 m0's
// copy too, and F c1 m1 started 1.228 ms late.
TEST(OfferPayload, AnAcknowledgementWaitsForTheCopyUnderWayOnly) {
  PipelineConfig c = config(3, 4);
  c.split_backward = true;
  WorkModel m(c);
  const WorkloadParams p =
      apply_workload_json(workload_preset("uniform"),
                          R"({"forward_us": 1000, "backward_ratio_min": 1, "backward_ratio_max": 2,
          "compute_sigma": 0.4, "tokens_sigma": 0.6, "tokens_mean": 1000, "comm_latency_us": 0,
          "comm_bandwidth_gbps": 0.5, "bytes_per_token": 1000, "tp_sigma": 0,
          "comm_serial_receive": true, "comm_offer_payload": true})",
                          "w.json");
  SimOptions o;
  o.comm = CommMode::Blocking;
  o.record = true;
  const SimRun r = run(m, "zb-h1", Policy::Fixed, realize(p, m, 1, 4471), o);
  std::map<std::pair<int, int>, TaskRecord> f;  // forwards by (chunk, microbatch)
  for (const TaskRecord& t : r.result.tasks)
    if (t.task.kind == Kind::F) f[{t.task.chunk, t.task.mb}] = t;
  const TaskRecord& in = f.at({0, 1});
  ASSERT_GT(in.send_ns, 0);
  EXPECT_EQ(f.at({1, 1}).start, in.end + in.send_ns) << "F c1 m1 starts as its input lands";
}

}  // namespace
}  // namespace rrfp::test
