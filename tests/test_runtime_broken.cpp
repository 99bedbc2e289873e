// An endpoint whose transport breaks (a peer process exited, a connection failed) and can
// receive nothing more: the runtime keeps the transport's reason. A step then running fails at
// once with it where the endpoint's rank still waits for a message from another stage, and
// goes on where it waits for none (a peer that ended its part of the last step and exited
// breaks its connections while this process may still finish its own); a later step fails at
// once with it, and a stall names it. Before, the transport's reason was dropped: the step
// waited for its watchdog, whose report named the messages missing but not why.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <thread>

#include "runtime/errors.hpp"
#include "runtime_helpers.hpp"

namespace rrfp::test {
namespace {

constexpr const char* kWhy = "c10d transport: rank 1: receiving from rank 0 failed (test)";
constexpr const char* kSendWhy = "c10d transport: rank 1: sending to rank 0 failed (test)";

// An inproc endpoint that a test breaks: from then on nothing reaches its receiver, and its
// broken handler hears kWhy once, as a real transport's would.
class BreakableTransport final : public Transport {
 public:
  explicit BreakableTransport(std::unique_ptr<Transport> inner) : inner_(std::move(inner)) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  void set_broken_handler(Broken b) override { broken_handler_ = std::move(b); }
  void set_receiver(Receiver r) override {
    inner_->set_receiver([this, r = std::move(r)](Message&& m) {
      if (!broken_.load()) r(std::move(m));
    });
  }
  void send(int dst, const MessageTag& tag, Payload payload, SendDone done) override {
    if (break_on_send && break_on_send(tag)) break_now();
    if (fail_send && fail_send(tag)) return done(std::make_exception_ptr(Error(kSendWhy)));
    inner_->send(dst, tag, std::move(payload), std::move(done));
  }
  void shutdown() override { inner_->shutdown(); }
  // Breaks it as it sends a message this says yes to (a test's), before the message goes.
  std::function<bool(const MessageTag&)> break_on_send;
  // Fails the send of a message this says yes to, as a transport whose peer exited does.
  std::function<bool(const MessageTag&)> fail_send;
  void break_now() {
    if (!broken_.exchange(true)) broken_handler_(std::make_exception_ptr(Error(kWhy)));
  }

 private:
  std::unique_ptr<Transport> inner_;
  Broken broken_handler_;
  std::atomic<bool> broken_{false};
};

struct BrokenRun {
  WorkModel m = WorkModel(shape(2, 4));
  Hint hint = make_hint("bf", m);  // the runtime keeps a reference
  RealizedWork w = random_work(m, 1, 7, 50, 20);
  BreakableTransport* last = nullptr;  // stage 1's endpoint
  std::unique_ptr<Runtime> rt;

  // Breaks stage 1's endpoint before stage 0's task `task`, which then sleeps `sleep_ms`.
  BrokenRun(TaskId task, std::int64_t timeout_ms, int sleep_ms = 0) {
    std::vector<std::unique_ptr<Transport>> eps;
    for (auto& t : make_inproc_transports(2))
      eps.push_back(std::make_unique<BreakableTransport>(std::move(t)));
    last = static_cast<BreakableTransport*>(eps[1].get());
    RuntimeOptions o = runtime_options(m, w, Policy::Ready);
    o.timeout_ms = timeout_ms;
    auto base = emulated_programs(m, w);
    ProgramFactory programs = [this, base, task, sleep_ms](int s,
                                                           int r) -> std::unique_ptr<StageProgram> {
      if (s != 0) return base(s, r);
      return std::make_unique<HookBefore>(base(s, r), task, [this, sleep_ms] {
        last->break_now();
        std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms));
      });
    };
    rt = std::make_unique<Runtime>(m, hint, programs, o, std::move(eps));
  }
};

std::string step_error(Runtime& rt, int step) {
  try {
    rt.run_step(step);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "no error";
}

// Stage 0's last backward needs nothing more from stage 1: the step ends well; the next one
// fails at once with the reason, where it waited for its watchdog (here a minute) before.
TEST(TransportBroken, AStepThatNeedsNothingMoreEndsAndTheNextFailsAtOnceNamingWhy) {
  BrokenRun b(TaskId{Kind::B, 0, 3}, 60'000);
  EXPECT_EQ(step_error(*b.rt, 0), "no error");
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(step_error(*b.rt, 1), kWhy);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
}

// Broken before stage 1 received its first input, which will not come: the step fails at once
// with the reason, where it waited for its watchdog (a minute here; two by default).
TEST(TransportBroken, AStepThatStillWaitsForAMessageFailsAtOnceNamingWhy) {
  BrokenRun b(TaskId{Kind::F, 0, 0}, 60'000);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(step_error(*b.rt, 0), kWhy);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
}

// Broken once stage 1 waits for nothing more, then stage 0's last backward outlasts the
// timeout: the watchdog's report ends with the reason.
TEST(TransportBroken, AStallAfterABreakNamesIt) {
  BrokenRun b(TaskId{Kind::B, 0, 3}, 300, 1500);
  const std::string err = step_error(*b.rt, 0);
  EXPECT_NE(err.find("no progress for"), std::string::npos) << err;
  EXPECT_NE(err.find(std::string("; earlier, ") + kWhy), std::string::npos) << err;
}

// A rank held on a send in a blocking run waits for its receiver's acknowledgement, which
// cannot come over an endpoint broken as the offer leaves: the step fails at once with the
// reason. It waited for its watchdog (its report: "held on 1 unacknowledged send(s); expects
// messages: none", the reason last), since only a rank's inputs counted as waiting.
TEST(TransportBroken, ARankHeldOnASendFailsAtOnceNamingWhy) {
  const WorkModel m(shape(2, 1));
  const Hint hint = make_hint("1f1b", m);
  const RealizedWork w = random_work(m, 1, 7, 50, 20);
  std::vector<std::unique_ptr<Transport>> eps;
  for (auto& t : make_inproc_transports(2))
    eps.push_back(std::make_unique<BreakableTransport>(std::move(t)));
  static_cast<BreakableTransport*>(eps[1].get())->break_on_send = [](const MessageTag& t) {
    return !t.ack && t.control == Control::None && t.producer == TaskId{Kind::B, 1, 0};
  };
  RuntimeOptions o = runtime_options(m, w, Policy::Fixed);
  o.comm = CommMode::Blocking;
  o.timeout_ms = 60'000;
  Runtime rt(m, hint, emulated_programs(m, w), o, std::move(eps));
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(step_error(rt, 0), kWhy);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
}

// Stage 0 and stage 1 each in a Runtime of its own, as two processes are, on the two ends of
// one inproc pair (stage 1's `breakable`), stage 0's program hooked before its first forward;
// each one's error of step 0.
std::pair<std::exception_ptr, std::exception_ptr> two_processes(
    std::unique_ptr<Transport> zero, std::unique_ptr<BreakableTransport> breakable,
    std::function<void()> hook) {
  const WorkModel m(shape(2, 4));
  const Hint hint = make_hint("bf", m);
  const RealizedWork w = random_work(m, 1, 7, 50, 20);
  RuntimeOptions o = runtime_options(m, w, Policy::Ready);
  o.timeout_ms = 60'000;
  const ProgramFactory base = emulated_programs(m, w);
  const ProgramFactory programs = [&](int s, int r) -> std::unique_ptr<StageProgram> {
    if (s != 0 || !hook) return base(s, r);
    return std::make_unique<HookBefore>(base(s, r), TaskId{Kind::F, 0, 0}, hook);
  };
  Hosting first, second;
  first.local = {0};
  first.transports.push_back(std::move(zero));
  second.local = {1};
  second.transports.push_back(std::move(breakable));
  Runtime rt0(m, hint, programs, o, std::move(first));
  Runtime rt1(m, hint, programs, o, std::move(second));
  std::exception_ptr e0, e1;
  const auto t0 = std::chrono::steady_clock::now();
  std::thread other([&] {
    try {
      rt1.run_step(0);
    } catch (...) {
      e1 = std::current_exception();
    }
  });
  try {
    rt0.run_step(0);
  } catch (...) {
    e0 = std::current_exception();
  }
  other.join();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
  return {e0, e1};
}

// Stage 1's own error is `why`, and stage 0's a PeerBroken naming it.
void expect_told_as_broken(const std::pair<std::exception_ptr, std::exception_ptr>& errors,
                           const std::string& why) {
  const auto& [e0, e1] = errors;
  ASSERT_TRUE(e1 && e0);
  try {
    std::rethrow_exception(e1);
  } catch (const std::exception& e) {
    EXPECT_EQ(e.what(), why);
  }
  try {
    std::rethrow_exception(e0);
  } catch (const PeerBroken& e) {
    EXPECT_EQ(std::string(e.what()), "stage 1 failed step 0: " + why);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not a PeerBroken: " << e.what();
  }
}

// Stage 1, a process of its own, finds its transport broken and tells stage 0's process, whose
// step then fails with a PeerBroken naming the reason: a transport's error, as stage 1's own.
// It was told as a stall (PeerStall): for one killed process, its neighbours raised
// RuntimeError in Python and the processes they told TimeoutError, though nothing timed out.
TEST(TransportBroken, APeerToldOfABreakFailsWithABreakNotAStall) {
  auto inproc = make_inproc_transports(2);
  auto breakable = std::make_unique<BreakableTransport>(std::move(inproc[1]));
  BreakableTransport* last = breakable.get();
  expect_told_as_broken(
      two_processes(std::move(inproc[0]), std::move(breakable), [last] { last->break_now(); }),
      kWhy);
}

// The same for a send the transport fails (a peer exited as stage 1 sent it its gradient): it
// was told as a stall, where a failed receive, the usual first to see an exit, was a break.
TEST(TransportBroken, APeerToldOfAFailedSendFailsWithABreakNotAStall) {
  auto inproc = make_inproc_transports(2);
  auto breakable = std::make_unique<BreakableTransport>(std::move(inproc[1]));
  breakable->fail_send = [](const MessageTag& t) {
    return !t.ack && t.control == Control::None && t.producer == TaskId{Kind::B, 1, 0};
  };
  expect_told_as_broken(two_processes(std::move(inproc[0]), std::move(breakable), nullptr),
                        kSendWhy);
}

}  // namespace
}  // namespace rrfp::test
