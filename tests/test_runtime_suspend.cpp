// A process stopped (Ctrl-Z, SIGSTOP) while a step runs and continued is no stall, whatever the
// stop's length against `timeout`: the watchdog moves its deadline on by the time it was not
// run. A stop of 0.8 s under a `timeout` of 0.3 s failed the step as a stall once continued,
// where a stop of 1.5 s went on (a stop was counted from one second on).
#include <gtest/gtest.h>

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <array>

#include "runtime_helpers.hpp"

namespace rrfp::test {
namespace {

timespec ms_span(long ms) {
  return timespec{ms / 1000, (ms % 1000) * 1'000'000};
}

// Stage 1's first forward forks a child that stops this process after 50 ms for `stop_ms`,
// continues it, and 100 ms later writes the byte the task reads: nothing progresses from the
// task's start to that byte, 150 ms of it while the process runs. The read is bounded (10 s).
class StoppedInATask final : public StageProgram {
 public:
  StoppedInATask(std::unique_ptr<StageProgram> inner, int stage, long stop_ms)
      : in_(std::move(inner)), stage_(stage), stop_ms_(stop_ms) {}
  Payload forward(TaskContext& c, int chunk, int mb, Payload p) override {
    if (stage_ == 1 && mb == 0 && !stop_and_wait()) throw std::runtime_error("fork or pipe failed");
    return in_->forward(c, chunk, mb, std::move(p));
  }
  Payload backward(TaskContext& c, int chunk, int mb, Payload p) override {
    return in_->backward(c, chunk, mb, std::move(p));
  }

 private:
  bool stop_and_wait() const {
    std::array<int, 2> fds{};
    if (::pipe(fds.data()) != 0) return false;
    const pid_t parent = ::getpid();
    const pid_t child = ::fork();
    if (child == 0) {  // async-signal-safe calls only
      const timespec before = ms_span(50), stopped = ms_span(stop_ms_), after = ms_span(100);
      ::nanosleep(&before, nullptr);
      ::kill(parent, SIGSTOP);
      ::nanosleep(&stopped, nullptr);
      ::kill(parent, SIGCONT);
      ::nanosleep(&after, nullptr);
      const char byte = 1;
      ::_exit(::write(fds[1], &byte, 1) == 1 ? 0 : 1);
    }
    bool ok = child > 0;
    if (ok) {
      pollfd in{fds[0], POLLIN, 0};
      char byte = 0;
      ok = ::poll(&in, 1, 10'000) == 1 && ::read(fds[0], &byte, 1) == 1;
      int status = 0;
      ::waitpid(child, &status, 0);
    }
    ::close(fds[0]);
    ::close(fds[1]);
    return ok;
  }

  std::unique_ptr<StageProgram> in_;
  int stage_;
  long stop_ms_;
};

TEST(RuntimeSuspend, AStopLongerThanTheTimeoutButUnderASecondIsNoStall) {
  const WorkModel m(shape(4, 4));
  const RealizedWork work = random_work(m, 1, 3);
  RuntimeOptions ro = runtime_options(m, work, Policy::Ready);
  ro.timeout_ms = 500;
  const Hint hint = make_hint("bf", m);
  auto inner = emulated_programs(m, work);
  Runtime rt(
      m, hint,
      [&](int s, int r) -> std::unique_ptr<StageProgram> {
        return std::make_unique<StoppedInATask>(inner(s, r), s, 800);
      },
      ro);
  const StepResult r = rt.run_step(0);
  EXPECT_GE(r.run.makespan, 800'000'000);  // the stop happened within the step
}

}  // namespace
}  // namespace rrfp::test
