// The runtime's window (RuntimeOptions::window): a task may return with its work still running
// on a device, and the rank starts its next task meanwhile. Here the device is a thread per
// rank that runs queued work in order, as a GPU stream does, and each task's output is written
// by that work, after the task has returned:
//  - every consumer reads its producer's bytes, so no output was handed on before its work was
//    done, for every window, hint and policy, over seeds; the task set and dependency order
//    are the simulator's, and `fixed` still follows its list;
//  - a rank never has more than `window` tasks launched and not done, and does reach that many;
//  - work that never completes is named by the watchdog; work that fails names its task;
//  - a task that defers under a window of 1, or a window out of range, is refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "core/error.hpp"
#include "runtime/errors.hpp"
#include "runtime_helpers.hpp"
#include "sim/check.hpp"

namespace rrfp::test {
namespace {

// Runs closures in the order queued, on a thread of its own (a stream).
class Device {
 public:
  Device() : thread_([this] { loop(); }) {}
  ~Device() {
    {
      std::lock_guard lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void enqueue(std::function<void()> fn) {
    {
      std::lock_guard lk(mu_);
      queue_.push_back(std::move(fn));
    }
    cv_.notify_all();
  }

 private:
  void loop() {
    std::unique_lock lk(mu_);
    for (;;) {
      cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      auto fn = std::move(queue_.front());
      queue_.pop_front();
      lk.unlock();
      fn();
      lk.lock();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool stop_ = false;
  std::thread thread_;
};

struct Done final : PendingWork {
  std::shared_ptr<std::atomic<bool>> flag = std::make_shared<std::atomic<bool>>(false);
  std::function<void()> fail;  // set: the work failed, wait() throws
  bool ready() override { return flag->load(std::memory_order_acquire); }
  void wait(const TaskContext& ctx) override {
    while (!ready()) {
      if (ctx.aborted()) throw Aborted();
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
};

struct Counters {
  std::atomic<int> checked{0}, bad{0}, deferred{0}, peak{0};
};

// Each task's output {step, chunk, mb} is written by its device work, which first checks the
// input's bytes and sleeps `device_us`; the task itself only queues that work.
class DeviceProgram final : public StageProgram {
 public:
  DeviceProgram(Counters& c, int device_us, bool never = false)
      : c_(c), device_us_(device_us), never_(never) {}
  Payload forward(TaskContext& ctx, int chunk, int mb, Payload in) override {
    return launch(ctx, chunk, mb, std::move(in), chunk > 0 ? chunk - 1 : -1);
  }
  Payload backward(TaskContext& ctx, int chunk, int mb, Payload in) override {
    return launch(ctx, chunk, mb, std::move(in), in.empty() ? -1 : chunk + 1);
  }
  void weight_grad(TaskContext& ctx, int chunk, int mb) override { launch(ctx, chunk, mb, {}, -1); }

 private:
  Payload launch(TaskContext& ctx, int chunk, int mb, Payload in, int from_chunk) {
    auto out = std::make_shared<std::array<int, 3>>();
    out->fill(0);
    auto done = std::make_unique<Done>();
    const int now = ++in_flight_;
    int peak = c_.peak.load();
    while (now > peak && !c_.peak.compare_exchange_weak(peak, now)) {
    }
    const bool stall = never_ && chunk == 1 && mb == 0 && ctx.task().kind == Kind::F;
    device_.enqueue([this, out, flag = done->flag, in = std::move(in), from_chunk, chunk, mb,
                     step = ctx.step(), stall] {
      if (from_chunk >= 0) {
        const int* v = reinterpret_cast<const int*>(in.data());
        if (in.size() != 3 * sizeof(int) || v[0] != step || v[1] != from_chunk || v[2] != mb)
          ++c_.bad;
        ++c_.checked;
      }
      if (stall) return;  // never completes
      std::this_thread::sleep_for(std::chrono::microseconds(device_us_));
      *out = {step, chunk, mb};
      --in_flight_;
      flag->store(true, std::memory_order_release);
    });
    if (ctx.window() > 1) {
      ++c_.deferred;
      ctx.defer(std::move(done));
    } else {
      done->wait(ctx);  // a window of 1: the task is done when it returns
    }
    return Payload(out, reinterpret_cast<const std::byte*>(out->data()), 3 * sizeof(int));
  }
  Counters& c_;
  int device_us_;
  bool never_;
  std::atomic<int> in_flight_{0};
  Device device_;  // last: its thread stops before the rest goes
};

ProgramFactory device_programs(Counters& c, int device_us, bool never = false) {
  return [&c, device_us, never](int, int) {
    return std::make_unique<DeviceProgram>(c, device_us, never);
  };
}

TEST(RuntimeWindow, OutputsLeaveOnlyOnceTheirWorkIsDoneInDependencyOrder) {
  for (const char* name : {"1f1b", "bf", "bfw", "zb-h1"})
    for (int window : {1, 2, 4})
      for (Policy policy : {Policy::Fixed, Policy::Ready})
        for (int seed = 0; seed < 3; ++seed) {
          if (policy == Policy::Fixed && is_rule_hint_name(name)) continue;
          const bool split = std::string(name) == "bfw" || std::string(name) == "zb-h1";
          WorkModel m(shape(3 + seed % 2, 6 + 2 * seed, 1, split));
          const Hint hint = make_hint(name, m);
          const std::string ctx = std::string(name) + " " + to_string(policy) + " window " +
                                  std::to_string(window) + " seed " + std::to_string(seed);
          const RealizedWork w = random_work(m, 1, seed, 60);
          RuntimeOptions ro = runtime_options(m, w, policy);
          ro.window = window;
          Counters c;
          Runtime rt(m, hint, device_programs(c, 20 + 40 * (seed % 2)), ro);
          for (int step = 0; step < 2; ++step) {
            StepResult r;
            try {
              r = rt.run_step(step);
            } catch (const Error& e) {
              FAIL() << ctx << ": " << e.what();
            }
            ASSERT_EQ(r.run.tasks.size(), static_cast<size_t>(m.num_tasks())) << ctx;
            CheckOptions co;
            co.policy = policy;
            co.limit = r.run.arbiter.limit;
            co.max_pending_w = m.split() ? r.run.arbiter.max_pending_w : 0;
            const auto bad = check_run(m, 1, r.run.tasks, co);
            ASSERT_TRUE(bad.empty()) << ctx << ": " << bad.front();
            if (policy == Policy::Fixed) {
              for (const auto& [where, seq] : orders(r.run.tasks))
                ASSERT_EQ(seq, hint.list().stages[where.first]) << ctx;
            }
          }
          EXPECT_EQ(c.bad.load(), 0) << ctx << ": an input read before its producer's work ended";
          EXPECT_GT(c.checked.load(), 0) << ctx;
          EXPECT_LE(c.peak.load(), window) << ctx;
          EXPECT_EQ(c.deferred.load() > 0, window > 1) << ctx;
        }
}

TEST(RuntimeWindow, ARankFillsItsWindowWhenTheDeviceIsTheBottleneck) {
  WorkModel m(shape(2, 8));
  const Hint hint = make_hint("gpipe", m);  // stage 0's forwards are all ready at once
  for (int window : {2, 3}) {
    RuntimeOptions ro;
    ro.window = window;
    Counters c;
    // 20 ms of device work a task against microseconds of launching it, even under a sanitizer.
    Runtime rt(m, hint, device_programs(c, 20000), ro);
    rt.run_step(0);
    EXPECT_EQ(c.peak.load(), window) << "window " << window;
    EXPECT_EQ(c.bad.load(), 0);
  }
}

TEST(RuntimeWindow, WorkThatNeverEndsIsNamedByTheWatchdog) {
  WorkModel m(shape(2, 4));
  const Hint hint = make_hint("1f1b", m);
  RuntimeOptions ro;
  ro.window = 2;
  ro.timeout_ms = 500;
  Counters c;
  Runtime rt(m, hint, device_programs(c, 10, /*never=*/true), ro);
  try {
    rt.run_step(0);
    FAIL() << "the step ended although F c1 m0's work never did";
  } catch (const StallError& e) {
    // This step's watchdog ended it (the work never would), naming the task.
    const std::string what = e.what();
    EXPECT_NE(what.find("(`timeout` 0.5 s)"), std::string::npos) << what;
    EXPECT_NE(what.find("running F c1 m0"), std::string::npos) << what;
  }
}

struct Failing final : PendingWork {
  bool ready() override { throw std::runtime_error("device fault 700"); }
  void wait(const TaskContext&) override {}
};

class FailingProgram final : public StageProgram {
 public:
  Payload forward(TaskContext& ctx, int chunk, int mb, Payload) override {
    if (chunk == 1 && mb == 1) ctx.defer(std::make_unique<Failing>());
    return Payload::allocate(8);
  }
  Payload backward(TaskContext&, int, int, Payload) override { return Payload::allocate(8); }
};

TEST(RuntimeWindow, FailedWorkNamesItsTaskAndDeferringWithoutAWindowIsRefused) {
  WorkModel m(shape(2, 4));
  const Hint hint = make_hint("1f1b", m);
  for (int window : {1, 2}) {
    RuntimeOptions ro;
    ro.window = window;
    Runtime rt(
        m, hint, [](int, int) { return std::make_unique<FailingProgram>(); }, ro);
    try {
      rt.run_step(0);
      FAIL() << "window " << window << ": the step ended";
    } catch (const TaskError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("task F c1 m1 failed"), std::string::npos) << what;
      EXPECT_NE(what.find(window == 1 ? "the runtime's window is 1" : "device fault 700"),
                std::string::npos)
          << what;
    }
  }
}

TEST(RuntimeWindow, OutOfRangeWindowsAreRefused) {
  WorkModel m(shape(2, 4));
  const Hint hint = make_hint("1f1b", m);
  Counters c;
  for (auto [window, tp, says] : {std::tuple{0, 1, "must be between 1 and 64, got 0"},
                                  std::tuple{65, 1, "must be between 1 and 64, got 65"},
                                  std::tuple{2, 2, "more than 1 needs `tp` 1"}}) {
    RuntimeOptions ro;
    ro.window = window;
    ro.tp = tp;
    try {
      Runtime rt(m, hint, device_programs(c, 1), ro);
      FAIL() << "window " << window << " tp " << tp << " accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("`window`: ") + says), std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace rrfp::test
