// Failure paths (semantics.md §7): a throwing task, a stage that never sends, a corrupted tag, a
// wrong size, a wrong step and a duplicate each end the step with the expected error (the
// failure itself, not the watchdog, unless the watchdog is what is tested), with every thread
// joined (run_step returns). No timing assertions: the error's type and message, and whether a
// long wait was interrupted, say what ended the step.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <new>
#include <string>
#include <thread>

#include "core/clock.hpp"
#include "core/error.hpp"
#include "expect_error.hpp"
#include "runtime/delay_line.hpp"
#include "runtime/errors.hpp"
#include "runtime_helpers.hpp"

namespace rrfp::test {
namespace {

class Failures : public ::testing::Test {
 protected:
  Failures() : m_(cfg()), hint_(make_hint("bf", m_)), work_(random_work(m_, 1, 7)) {}
  static PipelineConfig cfg() {
    PipelineConfig c;
    c.pp = 4;
    c.microbatches = 8;
    return c;
  }

  // Runs one step and returns the error's message; fails the test on another error type (the
  // watchdog's StallError, where the failure under test should have ended the step first).
  template <class E>
  std::string fails_with(const ProgramFactory& programs,
                         std::vector<std::unique_ptr<Transport>> endpoints = {},
                         std::int64_t timeout_ms = 2000) {
    RuntimeOptions ro = runtime_options(m_, work_, Policy::Ready);
    ro.timeout_ms = timeout_ms;
    Runtime rt(m_, hint_, programs, ro, std::move(endpoints));
    try {
      rt.run_step(0);
    } catch (const E& e) {
      return e.what();
    }
    ADD_FAILURE() << "the step did not fail";
    return {};
  }

  WorkModel m_;
  Hint hint_;
  RealizedWork work_;
};

// What Thrower throws in stage 1's backward of microbatch 2; Aborted, in stage 0's last
// backward (below).
enum class Throws { Error, BadAlloc, Aborted };

class Thrower final : public StageProgram {
 public:
  Thrower(std::unique_ptr<StageProgram> inner, int stage, Throws what = Throws::Error)
      : in_(std::move(inner)), stage_(stage), what_(what) {}
  Payload forward(TaskContext& c, int chunk, int mb, Payload p) override {
    return in_->forward(c, chunk, mb, std::move(p));
  }
  Payload backward(TaskContext& c, int chunk, int mb, Payload p) override {
    if (what_ == Throws::Aborted && stage_ == 0 && mb == 7) throw Aborted();
    if (what_ == Throws::BadAlloc && stage_ == 1 && mb == 2) throw std::bad_alloc();
    if (what_ == Throws::Error && stage_ == 1 && mb == 2)
      throw std::runtime_error("boom: out of memory");
    return in_->backward(c, chunk, mb, std::move(p));
  }
  std::optional<std::size_t> input_bytes(const TaskId& t) const override {
    return in_->input_bytes(t);
  }

 private:
  std::unique_ptr<StageProgram> in_;
  int stage_;
  Throws what_;
};

TEST_F(Failures, AThrowingTaskEndsTheStepNamingStageTaskAndMessage) {
  auto base = emulated_programs(m_, work_);
  const std::string msg =
      fails_with<TaskError>([&](int s, int r) { return std::make_unique<Thrower>(base(s, r), s); });
  // A TaskError, not the watchdog's StallError: the task's error ended the step.
  EXPECT_NE(msg.find("stage 1: task B c1 m2 failed: boom: out of memory"), std::string::npos)
      << msg;
}

// A step tells its transports that it runs, and that it ended, failed or not: between steps a
// polling transport naps longer (the MPI transport's progress thread).
TEST_F(Failures, EveryStepTellsItsTransportsWhileItRunsFailedOrNot) {
  for (const bool fail : {false, true}) {
    std::vector<FaultyTransport*> eps;
    std::atomic<int> sent_outside{0};
    auto owned = faulty_transports(4, [&](int src, int&, MessageTag&, Payload&) {
      if (eps[src]->in_step_calls.empty() || !eps[src]->in_step_calls.back()) ++sent_outside;
      return true;
    });
    for (auto& t : owned)
      eps.push_back(static_cast<FaultyTransport*>(t.get()));
    auto base = emulated_programs(m_, work_);
    Runtime rt(
        m_, hint_,
        [&](int s, int r) { return fail ? std::make_unique<Thrower>(base(s, r), s) : base(s, r); },
        runtime_options(m_, work_, Policy::Ready), std::move(owned));
    const int steps = fail ? 1 : 2;
    for (int step = 0; step < steps; ++step)
      if (fail)
        EXPECT_THROW(rt.run_step(step), TaskError);
      else
        rt.run_step(step);
    std::vector<bool> want;
    for (int step = 0; step < steps; ++step)
      want.insert(want.end(), {true, false});
    for (const FaultyTransport* t : eps)
      EXPECT_EQ(t->in_step_calls, want) << "endpoint " << t->rank() << (fail ? ", failed" : "");
    EXPECT_EQ(sent_outside.load(), 0);
  }
}

// A refused allocation is said in words ("failed: std::bad_alloc" before).
TEST_F(Failures, AnAllocationRefusedInATaskIsSaidToBeOutOfMemory) {
  auto base = emulated_programs(m_, work_);
  const std::string msg = fails_with<TaskError>(
      [&](int s, int r) { return std::make_unique<Thrower>(base(s, r), s, Throws::BadAlloc); });
  EXPECT_NE(msg.find("stage 1: task B c1 m2 failed: out of memory (an allocation failed"),
            std::string::npos)
      << msg;
}

// Aborted out of a task whose step had not failed: a tensor-parallel group shared with another
// runtime (the ranks of one process standing for a job's processes) that the other's failure
// tore down. Thrown in the step's last task (stage 0's last backward), it ended that rank
// quietly and the step was reported complete.
TEST_F(Failures, ATaskAbortedByAnotherRuntimesFailureFailsTheStep) {
  auto base = emulated_programs(m_, work_);
  const std::string msg = fails_with<TaskError>(
      [&](int s, int r) { return std::make_unique<Thrower>(base(s, r), s, Throws::Aborted); });
  EXPECT_EQ(msg,
            "stage 0: task B c0 m7 was aborted: its tensor-parallel group ended with another "
            "rank's failure");
}

// An action of the latency emulation that throws fails the step through its handler, and the
// line serves the next one: it ended the process (std::terminate).
TEST(DelayLines, AThrowingActionIsHandedOnAndTheLineGoesOn) {
  std::mutex mu;
  std::condition_variable cv;
  std::string error;
  bool after = false;
  DelayLine line([&](std::exception_ptr e) {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      std::lock_guard lk(mu);
      error = ex.what();
    }
  });
  line.post(now_ns(), [] { throw ProtocolError("an input arriving twice"); });
  line.post(now_ns(), [&] {
    std::lock_guard lk(mu);
    after = true;
    cv.notify_all();
  });
  std::unique_lock lk(mu);
  ASSERT_TRUE(cv.wait_for(lk, std::chrono::seconds(10), [&] { return after; }));
  EXPECT_EQ(error, "an input arriving twice");
}

TEST_F(Failures, AThrowingTaskReleasesItsGroupWaitingInTheCollective) {
  RealizedWork w = random_work(m_, 2, 3);
  auto base = emulated_programs(m_, w);
  RuntimeOptions ro = runtime_options(m_, w, Policy::Ready);
  ro.timeout_ms = 2000;
  // Only tensor-parallel rank 1 of stage 1 throws; rank 0 waits in the all-reduce.
  Runtime rt(
      m_, hint_,
      [&](int s, int r) { return std::make_unique<Thrower>(base(s, r), r == 1 ? s : -1); }, ro);
  try {
    rt.run_step(0);
    FAIL() << "expected a TaskError";
  } catch (const TaskError& e) {
    EXPECT_NE(std::string(e.what()).find("stage 1 tp rank 1: task B c1 m2"), std::string::npos)
        << e.what();
  }
}

TEST_F(Failures, AStageThatNeverSendsIsReportedByTheWatchdog) {
  auto eps = faulty_transports(4, [](int src, int&, MessageTag&, Payload&) { return src != 1; });
  const std::string msg = fails_with<StallError>(emulated_programs(m_, work_), std::move(eps), 300);
  EXPECT_NE(msg.find("no progress for"), std::string::npos) << msg;
  // Stage 2 waits for stage 1's activations; stage 0 for stage 1's gradients.
  EXPECT_NE(msg.find("expects messages: F c1 m0 from stage 1"), std::string::npos) << msg;
  EXPECT_NE(msg.find("B c1 m0 from stage 1"), std::string::npos) << msg;
  EXPECT_NE(msg.find("stage 3: ran 0/16"), std::string::npos) << msg;
  EXPECT_NE(msg.find("(`timeout` 0.3 s)"), std::string::npos) << msg;  // this step's watchdog
}

// One task runs (emulated) for 25 s: the watchdog fires after 300 ms without progress, names the
// task, and the step ends at once instead of when the task would have finished.
// Sleeper counts the waits it began and those that ended in Aborted: a wait that was not
// interrupted would have run its 25 s, so waits == interrupted shows the step ended at once.
struct Waits {
  std::atomic<int> begun{0}, interrupted{0};
};

class Sleeper final : public StageProgram {
 public:
  Sleeper(std::unique_ptr<StageProgram> inner, int stage, Waits& w)
      : in_(std::move(inner)), stage_(stage), waits_(w) {}
  Payload forward(TaskContext& c, int chunk, int mb, Payload p) override {
    if (stage_ == 1 && mb == 1) {
      ++waits_.begun;
      try {
        c.wait_until(now_ns() + 25'000'000'000);
      } catch (const Aborted&) {
        ++waits_.interrupted;
        throw;
      }
    }
    return in_->forward(c, chunk, mb, std::move(p));
  }
  Payload backward(TaskContext& c, int chunk, int mb, Payload p) override {
    return in_->backward(c, chunk, mb, std::move(p));
  }

 private:
  std::unique_ptr<StageProgram> in_;
  int stage_;
  Waits& waits_;
};

TEST_F(Failures, TheWatchdogInterruptsALongEmulatedTask) {
  auto inner = emulated_programs(m_, work_);
  Waits waits;
  ProgramFactory f = [&](int s, int r) -> std::unique_ptr<StageProgram> {
    return std::make_unique<Sleeper>(inner(s, r), s, waits);
  };
  const std::string msg = fails_with<StallError>(f, {}, 300);
  // How many tasks stage 1 ran first depends on the order arrivals came in (2 or 3 seen).
  EXPECT_NE(msg.find("running F c1 m1 for"), std::string::npos) << msg;
  EXPECT_EQ(waits.begun.load(), 1);
  EXPECT_EQ(waits.interrupted.load(), 1);  // not the task's 25 s
}

// A front end's Ctrl-C: cancel() from another thread ends a step stuck in a 25 s task at once
// with the given error; a cancel before the step makes the step fail at once.
TEST_F(Failures, CancelFromAnotherThreadEndsTheStep) {
  struct Cancelled : Error {
    Cancelled() : Error("cancelled") {}
  };
  auto inner = emulated_programs(m_, work_);
  Waits waits;
  ProgramFactory f = [&](int s, int r) -> std::unique_ptr<StageProgram> {
    return std::make_unique<Sleeper>(inner(s, r), s, waits);
  };
  RuntimeOptions ro = runtime_options(m_, work_, Policy::Ready);
  for (bool before : {false, true}) {
    waits.begun = waits.interrupted = 0;
    Runtime rt(m_, hint_, f, ro);
    if (before) rt.cancel(std::make_exception_ptr(Cancelled()));
    std::thread canceller([&] {
      if (before) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      rt.cancel(std::make_exception_ptr(Cancelled()));
    });
    EXPECT_ERROR(rt.run_step(0), Cancelled, "cancelled") << "before: " << before;
    canceller.join();
    // The cancel may come before stage 1 reaches the long task; if it began, it was cut short,
    // not run for its 25 s.
    EXPECT_EQ(waits.begun.load(), waits.interrupted.load()) << "before: " << before;
  }
  // A cancel without a reason still cancels (a null one was dropped: the step ran to its end).
  Runtime rt(m_, hint_, f, ro);
  rt.cancel(nullptr);
  EXPECT_ERROR(rt.run_step(0), Error, "runtime: the step was cancelled");
}

TEST_F(Failures, ALostRendezvousAcknowledgementIsReportedByTheWatchdog) {
  auto eps = faulty_transports(4, [](int, int&, MessageTag& t, Payload&) { return !t.ack; });
  RuntimeOptions ro = runtime_options(m_, work_, Policy::Fixed);
  ro.comm = CommMode::Blocking;
  ro.timeout_ms = 300;
  Hint h = make_hint("1f1b", m_);
  Runtime rt(m_, h, emulated_programs(m_, work_), ro, std::move(eps));
  try {
    rt.run_step(0);
    FAIL() << "expected a stall";
  } catch (const StallError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("stage 0: ran 1/16"), std::string::npos) << msg;
    EXPECT_NE(msg.find("held on 1 unacknowledged send(s)"), std::string::npos) << msg;
  }
}

TEST_F(Failures, ACorruptedTagIsAProtocolError) {
  auto eps = faulty_transports(4, [](int src, int&, MessageTag& t, Payload&) {
    if (src == 0) t.producer.mb += 100;
    return true;
  });
  const std::string msg = fails_with<ProtocolError>(emulated_programs(m_, work_), std::move(eps));
  EXPECT_NE(msg.find("stage 1: message step 0 F c0 m100 from rank 0 matches no task"),
            std::string::npos)
      << msg;
}

TEST_F(Failures, AMessageFromTheWrongPeerIsAProtocolError) {
  auto eps = faulty_transports(4, [](int src, int& dst, MessageTag& t, Payload&) {
    if (src == 0 && t.producer.kind == Kind::F) dst = 2;  // skips a stage
    return true;
  });
  const std::string msg = fails_with<ProtocolError>(emulated_programs(m_, work_), std::move(eps));
  EXPECT_NE(msg.find("stage 2: message step 0 F c0"), std::string::npos) << msg;
  EXPECT_NE(msg.find("matches no task this stage expects"), std::string::npos) << msg;
}

TEST_F(Failures, AWrongSizeIsAProtocolError) {
  auto eps = faulty_transports(4, [](int src, int&, MessageTag&, Payload& p) {
    if (src == 2) p = Payload(p.owner(), p.data(), p.size() - 1);
    return true;
  });
  const std::string msg = fails_with<ProtocolError>(emulated_programs(m_, work_), std::move(eps));
  EXPECT_NE(msg.find("from rank 2 has"), std::string::npos) << msg;
  EXPECT_NE(msg.find("expects"), std::string::npos) << msg;
}

TEST_F(Failures, AMessageOfAnotherStepIsAProtocolError) {
  auto eps = faulty_transports(4, [](int, int&, MessageTag& t, Payload&) {
    t.step = 5;
    return true;
  });
  const std::string msg = fails_with<ProtocolError>(emulated_programs(m_, work_), std::move(eps));
  EXPECT_NE(msg.find("belongs to no step in progress (this stage is in step 0)"), std::string::npos)
      << msg;
}

TEST_F(Failures, ADuplicateIsAProtocolError) {
  std::vector<std::unique_ptr<Transport>> eps;
  for (auto& t : make_inproc_transports(4)) {
    Transport* raw = t.get();
    eps.push_back(std::make_unique<FaultyTransport>(
        std::move(t), [raw](int src, int& dst, MessageTag& tag, Payload& p) {
          if (src == 3) raw->send(dst, tag, p);  // an extra copy first
          return true;
        }));
  }
  const std::string msg = fails_with<ProtocolError>(emulated_programs(m_, work_), std::move(eps));
  EXPECT_NE(msg.find("arrived twice"), std::string::npos) << msg;
}

TEST_F(Failures, AHookThatThrowsEndsTheStep) {
  struct BadHook final : StageProgram {
    void begin_step(int) override { throw std::runtime_error("no data"); }
    Payload forward(TaskContext&, int, int, Payload) override { return {}; }
    Payload backward(TaskContext&, int, int, Payload) override { return {}; }
  };
  const std::string msg =
      fails_with<TaskError>([](int, int) { return std::make_unique<BadHook>(); });
  EXPECT_NE(msg.find("begin_step failed: no data"), std::string::npos) << msg;
  struct OddHook final : StageProgram {  // what is no std::exception ended the process
    void end_step(int) override { throw 42; }
    Payload forward(TaskContext&, int, int, Payload) override { return {}; }
    Payload backward(TaskContext&, int, int, Payload) override { return {}; }
  };
  const std::string odd =
      fails_with<TaskError>([](int, int) { return std::make_unique<OddHook>(); });
  EXPECT_NE(odd.find("end_step failed with a non-standard exception"), std::string::npos) << odd;
  // input_bytes runs as a message arrives: what it threw reached run_step bare.
  struct NoSizes final : StageProgram {
    Payload forward(TaskContext&, int, int, Payload) override { return {}; }
    Payload backward(TaskContext&, int, int, Payload) override { return {}; }
    std::optional<std::size_t> input_bytes(const TaskId&) const override {
      throw std::runtime_error("size table missing");
    }
  };
  const std::string sizes =
      fails_with<TaskError>([](int, int) { return std::make_unique<NoSizes>(); });
  EXPECT_NE(sizes.find(": input_bytes(F c1 m0) failed: size table missing"), std::string::npos)
      << sizes;
}

// microbatch_size runs as the step begins, before the compute threads: what it threw left
// run_step bare (no TaskError), the runtime's failure() null, and the next step ran on the
// runtime that had failed one. It fails the step, named, and the runtime refuses the next.
TEST_F(Failures, ASizeHookThatThrowsAsTheStepBeginsFailsItAndTheRuntime) {
  struct BadSize final : StageProgram {
    Payload forward(TaskContext&, int, int, Payload) override { return {}; }
    Payload backward(TaskContext&, int, int, Payload) override { return {}; }
    std::optional<std::int64_t> microbatch_size(int mb) const override {
      if (mb == 1) throw std::runtime_error("the data loader failed");
      return mb + 1;
    }
  };
  Runtime rt(
      m_, hint_, [](int, int) { return std::make_unique<BadSize>(); },
      runtime_options(m_, work_, Policy::Ready));
  std::string first = "no error";
  try {
    rt.run_step(0);
  } catch (const TaskError& e) {
    first = e.what();
  } catch (const std::exception& e) {
    first = std::string("not a TaskError: ") + e.what();
  }
  EXPECT_EQ(first, "stage 0: microbatch_size(1) failed: the data loader failed");
  EXPECT_NE(rt.failure(), nullptr);
  EXPECT_ERROR(rt.run_step(1), Error, "runtime: an earlier step failed; start a new runtime");
}

// A program that knows some microbatches' sizes and not the others: the adaptive rule cannot
// order the entries by a part, and the list was dropped without a word. The step fails, named.
TEST_F(Failures, SomeMicrobatchSizesWithoutTheOthersFailTheStep) {
  struct SomeSizes final : StageProgram {
    Payload forward(TaskContext&, int, int, Payload) override { return {}; }
    Payload backward(TaskContext&, int, int, Payload) override { return {}; }
    std::optional<std::int64_t> microbatch_size(int mb) const override {
      if (mb == 2) return std::nullopt;
      return mb + 1;
    }
  };
  Runtime rt(
      m_, hint_, [](int, int) { return std::make_unique<SomeSizes>(); },
      runtime_options(m_, work_, Policy::Ready));
  EXPECT_ERROR(rt.run_step(0), TaskError,
               "stage 0: microbatch_size gave " + std::to_string(m_.microbatches() - 1) + " of " +
                   std::to_string(m_.microbatches()) +
                   " microbatches' sizes (none for microbatch 2): give every microbatch's size "
                   "or none");
}

}  // namespace
}  // namespace rrfp::test
