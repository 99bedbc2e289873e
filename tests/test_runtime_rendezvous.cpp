// Rendezvous (--comm blocking) with RuntimeOptions::rendezvous_pull: the offer leaves the
// payload with the sender, the receiver pulls it once it accepts, and acknowledges it on
// arrival (runtime/delivery.cpp, semantics.md §3). Every
// message of a step is recorded on its way out and checked against that order; then the
// protocol's refusals.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <map>
#include <mutex>
#include <thread>
#include <tuple>

#include "expect_error.hpp"
#include "runtime/errors.hpp"
#include "runtime_helpers.hpp"

namespace rrfp::test {
namespace {

struct Sent {
  int src, dst;
  MessageTag tag;
  std::size_t bytes;
};

// The options of a run over a real transport: blocking, no emulated latency.
RuntimeOptions pulling(const WorkModel& m, const RealizedWork& w, Policy policy) {
  RuntimeOptions ro = runtime_options(m, w, policy);
  ro.comm = CommMode::Blocking;
  ro.latency = {};
  ro.rendezvous_pull = true;
  return ro;
}

TEST(Rendezvous, WithoutEmulatedLatencyEachPayloadLeavesOnlyWhenItsReceiverPullsIt) {
  for (int seed = 0; seed < 6; ++seed) {
    for (Policy policy : {Policy::Fixed, Policy::Ready}) {
      PipelineConfig cfg;
      cfg.pp = 2 + seed % 3;
      cfg.microbatches = 4 + 2 * seed;
      const WorkModel m(cfg);
      const RealizedWork w = random_work(m, 1, 100 + seed);
      const Hint h = make_hint(policy == Policy::Fixed ? "1f1b" : "bf", m);
      const std::string ctx = "seed " + std::to_string(seed) + " " + to_string(policy);
      std::mutex mu;
      std::vector<Sent> sent;
      auto eps = faulty_transports(cfg.pp, [&](int src, int& dst, MessageTag& t, Payload& p) {
        std::lock_guard lk(mu);
        sent.push_back(Sent{src, dst, t, p.size()});
        return true;
      });
      Runtime rt(m, h, emulated_programs(m, w), pulling(m, w, policy), std::move(eps));
      const StepResult r = rt.run_step(0);

      ASSERT_EQ(r.run.tasks.size(), static_cast<std::size_t>(m.num_tasks())) << ctx;
      if (policy == Policy::Fixed) {
        for (const auto& [where, seq] : orders(r.run.tasks))
          ASSERT_EQ(seq, h.list().stages[where.first]) << ctx << " stage " << where.first;
      }

      // Per (sender, producer): offer, pull, payload, acknowledgement, each once, in that order,
      // the offer and the pull without bytes.
      std::map<std::tuple<int, int, int, int>, std::vector<const Sent*>> per;
      for (const Sent& s : sent) {
        const int sender = s.tag.pull || s.tag.ack ? s.dst : s.src;
        per[{sender, static_cast<int>(s.tag.producer.kind), s.tag.producer.chunk,
             s.tag.producer.mb}]
            .push_back(&s);
      }
      const std::size_t cross = static_cast<std::size_t>(2 * (cfg.pp - 1) * cfg.microbatches);
      ASSERT_EQ(per.size(), cross) << ctx << ": one exchange per cross-stage output";
      for (const auto& [key, seq] : per) {
        const std::string what = ctx + " " + to_string(seq.front()->tag.producer);
        ASSERT_EQ(seq.size(), 4u) << what;
        EXPECT_TRUE(seq[0]->tag.offer && seq[0]->bytes == 0) << what;
        EXPECT_TRUE(seq[1]->tag.pull && seq[1]->bytes == 0 && seq[1]->dst == seq[0]->src) << what;
        EXPECT_TRUE(!seq[2]->tag.offer && !seq[2]->tag.pull && !seq[2]->tag.ack &&
                    seq[2]->bytes ==
                        static_cast<std::size_t>(w.message_bytes[m.index(seq[0]->tag.producer)]))
            << what;
        EXPECT_TRUE(seq[3]->tag.ack && seq[3]->dst == seq[0]->src) << what;
      }
    }
  }
}

TEST(Rendezvous, PullingRefusesEmulatedLatency) {
  PipelineConfig cfg;
  cfg.pp = 2;
  cfg.microbatches = 2;
  const WorkModel m(cfg);
  const RealizedWork w = random_work(m, 1, 1);
  RuntimeOptions ro = pulling(m, w, Policy::Fixed);
  ro.latency = emulated_latency(m, w);
  try {
    validate(ro);
    FAIL() << "expected an InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("`rendezvous_pull`: only without emulated latency"),
              std::string::npos)
        << e.what();
  }
}

// Instant tasks but stage 2's F m0, which runs until the step fails. Stage 1 (GPipe) is held on
// F m1's send to stage 2 when F m2's offer comes (sent 300 ms late); it accepts it, and while
// its acknowledgement leaves (the stage's lock let go) the step is cancelled and the watchdog
// wakes every stage. Held, the rank found nothing to do and slept, with no wake-up left to
// come: the step never ended. It must end with the cancel's error.
class UntilAborted final : public StageProgram {
 public:
  explicit UntilAborted(int stage) : stage_(stage) {}
  Payload forward(TaskContext& ctx, int, int mb, Payload) override {
    if (stage_ == 2 && mb == 0) ctx.wait_until(now_ns() + 60'000'000'000);
    return Payload::allocate(8);
  }
  Payload backward(TaskContext&, int, int, Payload) override { return Payload::allocate(8); }

 private:
  int stage_;
};

TEST(Rendezvous, AHeldRankThatAcceptedAsTheStepFailedEndsWithIt) {
  const WorkModel m(shape(3, 3));
  const RealizedWork w = random_work(m, 1, 1);
  RuntimeOptions ro = runtime_options(m, w, Policy::Fixed);
  ro.comm = CommMode::Blocking;
  ro.latency = {};
  const Hint h = make_hint("gpipe", m);
  Runtime* rt = nullptr;
  const TaskId f2{Kind::F, 0, 2};
  auto eps = faulty_transports(3, [&](int src, int& dst, MessageTag& t, Payload&) {
    if (src == 0 && dst == 1 && !t.ack && t.producer == f2)
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
    if (src == 1 && dst == 0 && t.ack && t.producer == f2) {
      rt->cancel(std::make_exception_ptr(Error("cancelled by the test")));
      std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the wake-ups pass
    }
    return true;
  });
  Runtime runtime(
      m, h, [](int stage, int) { return std::make_unique<UntilAborted>(stage); }, ro,
      std::move(eps));
  rt = &runtime;
  auto step = std::async(std::launch::async, [&] { runtime.run_step(0); });
  if (step.wait_for(std::chrono::seconds(30)) != std::future_status::ready) {
    std::fprintf(stderr, "the step did not end 30 s after it was cancelled\n");
    std::_Exit(1);  // a thread sleeps for ever: the process cannot end otherwise
  }
  EXPECT_ERROR(step.get(), Error, "cancelled by the test");
}

class RendezvousRefusals : public ::testing::Test {
 protected:
  RendezvousRefusals() : m_(cfg()), hint_(make_hint("1f1b", m_)), work_(random_work(m_, 1, 3)) {}
  static PipelineConfig cfg() {
    PipelineConfig c;
    c.pp = 3;
    c.microbatches = 6;
    return c;
  }
  std::string protocol_error(FaultyTransport::Fault fault) {
    RuntimeOptions ro = pulling(m_, work_, Policy::Fixed);
    ro.timeout_ms = 2000;
    Runtime rt(m_, hint_, emulated_programs(m_, work_), ro, faulty_transports(3, fault));
    try {
      rt.run_step(0);
    } catch (const ProtocolError& e) {
      return e.what();
    }
    ADD_FAILURE() << "the step did not fail with a protocol error";
    return {};
  }
  WorkModel m_;
  Hint hint_;
  RealizedWork work_;
};

TEST_F(RendezvousRefusals, APullForAnOutputNotOfferedNamesIt) {
  const std::string msg = protocol_error([](int src, int&, MessageTag& t, Payload&) {
    if (src == 1 && t.pull && t.producer.kind == Kind::F) t.producer.mb = 5;  // not yet offered
    return true;
  });
  EXPECT_NE(msg.find("stage 0: message step 0 pull of F c0 m5 from rank 1"), std::string::npos)
      << msg;
  EXPECT_NE(msg.find("asks for an output this rank has not offered to it"), std::string::npos)
      << msg;
}

TEST_F(RendezvousRefusals, APayloadNobodyPulledIsRefused) {
  // Stage 0 sends its first output's bytes with the offer, as if it were not waiting for a pull.
  const std::string msg = protocol_error([&](int src, int&, MessageTag& t, Payload& p) {
    if (src == 0 && t.offer && t.producer.mb == 0) {
      t.offer = false;
      p = Payload::allocate(static_cast<std::size_t>(work_.message_bytes[m_.index(t.producer)]));
    }
    return true;
  });
  EXPECT_NE(msg.find("stage 1: message step 0 F c0 m0 from rank 0"), std::string::npos) << msg;
  EXPECT_NE(msg.find("brings a payload that F c1 m0 did not ask for"), std::string::npos) << msg;
}

TEST_F(RendezvousRefusals, AnOfferWithBytesIsRefused) {
  const std::string msg = protocol_error([](int src, int&, MessageTag& t, Payload& p) {
    if (src == 0 && t.offer) p = Payload::allocate(8);
    return true;
  });
  EXPECT_NE(msg.find("an offer carries no payload"), std::string::npos) << msg;
}

}  // namespace
}  // namespace rrfp::test
