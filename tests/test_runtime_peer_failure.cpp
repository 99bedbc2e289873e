// A step that fails in one process fails in every other one at once (Control::Abort): each
// endpoint is a Runtime of its own, as the processes of an mpirun job have them, on threads
// sharing in-process transports (dist/local_job.hpp). Had the failure not been told, the others
// would end with the watchdog's StallError after a minute, which the tests refuse. Runs under
// the sanitizers.
#include <gtest/gtest.h>
#include <algorithm>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>

#include "dist/job.hpp"
#include "dist/local_job.hpp"
#include "dist/step_merge.hpp"
#include "rank_threads.hpp"
#include "runtime/errors.hpp"
#include "runtime_helpers.hpp"

namespace rrfp::test {
namespace {

// Opened once every other endpoint has ended step 0 (`others` of them), so that a failure
// waiting on it comes after they completed theirs: what the test is about, made certain.
class Latch {
 public:
  explicit Latch(int others) : left_(others) {}
  void arrive() {
    std::lock_guard lk(mu_);
    --left_;
    cv_.notify_all();
  }
  void wait() {
    std::unique_lock lk(mu_);
    if (!cv_.wait_for(lk, std::chrono::seconds(30), [&] { return left_ <= 0; }))
      throw std::runtime_error("the other endpoints did not end step 0 within 30 s");
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int left_;
};

struct Outcome {
  std::string kind;  // "ok", "task" (its own task failed), "peer" (a PeerFailure) or "other"
  std::string what;
  std::size_t tasks = 0;  // ok: the tasks in this endpoint's record of the step
  // With `agree`: every job rank's bytes out of the closing exchange (rank r carries r + 1
  // bytes of value r).
  std::vector<std::vector<std::byte>> carried;
};

std::vector<std::byte> carried_by(int rank) {
  return std::vector<std::byte>(static_cast<std::size_t>(rank) + 1, std::byte(rank));
}

Outcome outcome(const std::exception_ptr& error) {
  if (!error) return {"ok", "", 0, {}};
  try {
    std::rethrow_exception(error);
  } catch (const PeerFailure& e) {
    return {"peer", e.what(), 0, {}};
  } catch (const PeerStall& e) {
    return {"peer-stall", e.what(), 0, {}};
  } catch (const StallError& e) {
    return {"stall", e.what(), 0, {}};
  } catch (const TaskError& e) {
    return {"task", e.what(), 0, {}};
  } catch (const std::exception& e) {
    return {"other", e.what(), 0, {}};
  }
}

struct JobRun {
  int bad = -1;  // the stage whose `task` throws, in the last replica (-1: none)
  TaskId task{};
  CommMode comm = CommMode::Async;
  int steps = 1;
  bool after_others = false;  // the throw waits until the replica's other endpoints ended step 0
  bool agree = false;         // each step ends in the closing exchange (finish_step_over_job)
  int dp = 1;
  std::int64_t endpoint0_timeout_ms = 0;        // endpoint 0's watchdog, if not the others' minute
  std::string message = "boom: out of memory";  // what the task throws
};

// Runs the steps on every endpoint, each its own Runtime. After each step every endpoint meets
// the others (in the closing exchange, with `agree`). Returns each endpoint's outcome of the
// last step it ran (it runs none after a failure).
std::vector<Outcome> run_job(const WorkModel& m, const JobRun& j) {
  const int bad = j.bad, steps = j.steps, dp = j.dp;
  const TaskId task = j.task;
  const bool after_others = j.after_others, agree = j.agree;
  const RealizedWork w = random_work(m, 1, 5, 200, 400);
  RuntimeOptions o = runtime_options(m, w, Policy::Ready);
  o.comm = j.comm;
  o.timeout_ms = 60'000;  // an untold failure: a StallError after a minute, which fails the test
  const int world = m.pp() * dp;
  auto jobs = make_local_jobs(world);
  const Hint h = make_hint("bf", m);
  std::vector<Outcome> out(world);
  Latch others(m.pp() - 1);  // the failing replica's other endpoints
  std::function<void()> before;
  if (after_others) before = [&] { others.wait(); };
  on_every_rank(world, [&](int i) {
    jobs[i]->set_layout(JobLayout{m.pp(), 1, dp});
    const bool failing = jobs[i]->replica() == dp - 1;  // the last replica's stage `bad` fails
    auto base = emulated_programs(m, w);
    // The failing stage throws from `task` (after `before`); every other task runs as emulated.
    const ProgramFactory programs = [&](int s, int r) -> std::unique_ptr<StageProgram> {
      if (!failing || s != bad) return base(s, r);
      return std::make_unique<HookBefore>(base(s, r), task, [&before, &j] {
        if (before) before();
        throw std::runtime_error(j.message);
      });
    };
    RuntimeOptions mine = o;
    if (i == 0 && j.endpoint0_timeout_ms > 0) mine.timeout_ms = j.endpoint0_timeout_ms;
    Runtime rt(m, h, programs, mine, jobs[i]->hosting());
    bool failed = false;
    for (int step = 0; step < steps; ++step) {
      if (failed) {
        jobs[i]->all_gather({});  // the others' round: no endpoint goes while one may send
        continue;
      }
      std::exception_ptr error;
      StepResult result;
      try {
        result = rt.run_step(step);
      } catch (...) {
        error = std::current_exception();
      }
      if (step == 0 && i / m.pp() == dp - 1 && i % m.pp() != bad) others.arrive();
      std::vector<std::vector<std::byte>> carried;
      if (agree)
        carried = finish_step_over_job(*jobs[i], step, result, error, carried_by(i));
      else
        jobs[i]->all_gather({});
      out[i] = outcome(error);
      out[i].carried = std::move(carried);
      if (!error) out[i].tasks = result.run.tasks.size();
      failed = error != nullptr;
    }
  });
  return out;
}

WorkModel model(int pp, int microbatches) {
  PipelineConfig c;
  c.pp = pp;
  c.microbatches = microbatches;
  return WorkModel(c);
}

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

TEST(PeerFailure, AFailedTaskFailsEveryOtherProcessStepAtOnceNamingIt) {
  const WorkModel m = model(4, 8);
  for (CommMode comm : {CommMode::Async, CommMode::Blocking}) {
    const std::vector<Outcome> got = run_job(m, {.bad = 1, .task = {Kind::B, 1, 2}, .comm = comm});
    SCOPED_TRACE(to_string(comm));
    EXPECT_EQ(got[1].kind, "task") << got[1].what;
    EXPECT_TRUE(has(got[1].what, "stage 1: task B c1 m2 failed: boom: out of memory"))
        << got[1].what;
    for (int e : {0, 2, 3}) {
      EXPECT_EQ(got[e].kind, "peer") << "endpoint " << e << ": " << got[e].what;
      EXPECT_TRUE(has(got[e].what, "stage 1 failed step 0: stage 1: task B c1 m2 failed: boom"))
          << got[e].what;
    }
  }
}

// Stage 0's last backward fails after the other stage has finished its part of the step. That
// stage learns of it in its next step, which fails at once saying that the processes no longer
// agree on step 0, instead of training on.
TEST(PeerFailure, AFailureAfterAPeerCompletedTheStepFailsThatPeersNextStep) {
  const WorkModel m = model(2, 4);
  const std::vector<Outcome> got =
      run_job(m, {.bad = 0, .task = {Kind::B, 0, 3}, .steps = 2, .after_others = true});
  EXPECT_EQ(got[0].kind, "task") << got[0].what;
  EXPECT_EQ(got[1].kind, "peer") << got[1].what;
  EXPECT_TRUE(has(got[1].what, "stage 0 failed step 0, which this process had completed"))
      << got[1].what;
  EXPECT_TRUE(has(got[1].what, "task B c0 m3 failed: boom")) << got[1].what;
}

}  // namespace
}  // namespace rrfp::test

namespace rrfp::test {
namespace {

// With the closing exchange after each step, the stage that completed step 0 learns in it that
// stage 0 failed it, and drops it too: both report step 0 failed.
TEST(PeerFailure, TheClosingExchangeDropsAStepEveryProcessCompletedButOne) {
  const WorkModel m = model(2, 4);
  const std::vector<Outcome> got =
      run_job(m, {.bad = 0, .task = {Kind::B, 0, 3}, .after_others = true, .agree = true});
  EXPECT_EQ(got[0].kind, "task") << got[0].what;
  EXPECT_EQ(got[1].kind, "peer") << got[1].what;
  EXPECT_TRUE(has(got[1].what, "step 0 failed on job rank 0 after this process had done its part"))
      << got[1].what;
  // And why, which it did not say (a Python loss that could not be joined read as a bare
  // failure on the other process).
  EXPECT_TRUE(has(got[1].what, "(job rank 0: ")) << got[1].what;
  EXPECT_TRUE(has(got[1].what, "task B c0 m3 failed: boom")) << got[1].what;
  EXPECT_TRUE(got[1].carried.empty());  // nothing carried out of a dropped step
}

// A reason longer than the closing part takes is cut at a character's start: cut inside a
// two-byte character, the message could not be decoded where Python raised it.
TEST(PeerFailure, TheClosingExchangeCutsALongReasonBetweenCharacters) {
  const WorkModel m = model(2, 4);
  std::string e_acute_500 = "x";
  for (int i = 0; i < 500; ++i)
    e_acute_500 += "\xC3\xA9";
  const std::vector<Outcome> got = run_job(m, {.bad = 0,
                                               .task = {Kind::B, 0, 3},
                                               .after_others = true,
                                               .agree = true,
                                               .message = e_acute_500});
  ASSERT_EQ(got[1].kind, "peer") << got[1].what;
  const std::string& what = got[1].what;
  const auto from = what.find("(job rank 0: "), to = what.find("): every process");
  ASSERT_NE(from, std::string::npos) << what;
  ASSERT_NE(to, std::string::npos) << what;
  const std::string why = what.substr(from, to - from);
  EXPECT_LE(why.size(), 400u + 13u);
  EXPECT_GT(why.size(), 300u);
  EXPECT_EQ(std::count(why.begin(), why.end(), '\xC3'), std::count(why.begin(), why.end(), '\xA9'));
}

// With two replicas, the second fails step 0 (its stage 1's task); the first completes it, and
// drops it too in the closing exchange, which names the job rank that failed and the one it
// told (it read "job ranks 2, 3", as if both had failed).
TEST(PeerFailure, TheClosingExchangeDropsAStepAnotherReplicaFailed) {
  const WorkModel m = model(2, 4);
  const std::vector<Outcome> got =
      run_job(m, {.bad = 1, .task = {Kind::B, 1, 1}, .agree = true, .dp = 2});
  EXPECT_EQ(got[3].kind, "task") << got[3].what;
  EXPECT_EQ(got[2].kind, "peer") << got[2].what;
  for (int e : {0, 1}) {
    EXPECT_EQ(got[e].kind, "peer") << got[e].what;
    EXPECT_TRUE(has(got[e].what,
                    "step 0 failed on job rank 3 (told to job rank 2) after this "
                    "process"))
        << got[e].what;
  }
}

// Whether `s` is whole UTF-8: no character cut short.
bool whole_utf8(const std::string& s) {
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const std::size_t len = c < 0x80         ? 1
                            : (c >> 5) == 6  ? 2
                            : (c >> 4) == 14 ? 3
                            : (c >> 3) == 30 ? 4
                                             : 0;
    if (len == 0 || i + len > s.size()) return false;
    for (std::size_t k = 1; k < len; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    i += len;
  }
  return true;
}

// A long error is cut for the message that tells it, before a character, not inside one: Python
// takes the peers' message only as UTF-8 (it raised UnicodeDecodeError instead of StageError).
TEST(PeerFailure, ALongErrorIsCutBetweenCharacters) {
  const WorkModel m = model(2, 2);
  // "stage 1: task B c1 m0 failed: " (30 bytes), then the two bytes of "é" at 999 and 1000.
  const std::string message = std::string(969, 'a') + "\xc3\xa9 and more";
  const auto got = run_job(m, {.bad = 1, .task = {Kind::B, 1, 0}, .message = message});
  EXPECT_EQ(got[1].kind, "task");
  ASSERT_EQ(got[0].kind, "peer") << got[0].what;
  EXPECT_TRUE(whole_utf8(got[0].what));
  EXPECT_TRUE(has(got[0].what, std::string(969, 'a'))) << got[0].what;
}

// Stage 1's forward of m1 waits until the others have ended their step, so that none can
// complete it; endpoint 0's watchdog (300 ms) fires first and tells the others,
// who report a stall too (PeerStall), not a failed task: a stall may mean a process is gone, so
// none of them waits for the others in the closing exchange (a PeerFailure would have, and
// waited for ever here, where the stalled endpoints take no part).
TEST(PeerFailure, AStallIsToldAsAStallAndNobodyWaitsInTheClosingExchange) {
  const WorkModel m = model(3, 3);
  const auto got = run_job(m, {.bad = 1,
                               .task = {Kind::F, 1, 1},
                               .after_others = true,
                               .agree = true,
                               .endpoint0_timeout_ms = 300});
  EXPECT_EQ(got[0].kind, "stall") << got[0].what;
  for (int e : {1, 2}) {
    EXPECT_EQ(got[e].kind, "peer-stall") << got[e].what;
    EXPECT_TRUE(has(got[e].what, "stage 0 failed step 0: no progress for")) << got[e].what;
  }
}

// Every process completed: the step stands, every process holds the whole step's record of
// replica 0 (each task once: the other replica's are not merged in), and every job rank's
// carried bytes.
TEST(PeerFailure, TheClosingExchangeKeepsAStepThatCompletedEverywhere) {
  const WorkModel m = model(3, 3);
  const std::vector<Outcome> got = run_job(m, {.steps = 2, .agree = true, .dp = 2});
  std::vector<std::vector<std::byte>> every;
  for (int r = 0; r < 6; ++r)
    every.push_back(carried_by(r));
  for (const Outcome& o : got) {
    EXPECT_EQ(o.kind, "ok") << o.what;
    EXPECT_EQ(o.tasks, static_cast<std::size_t>(m.num_tasks()));
    EXPECT_EQ(o.carried, every);
  }
}

// A message that came before its step began (its producer's process ahead) is routed as the
// step begins. What the program's input_bytes throws for it fails the step and tells the peer,
// as for a message that arrives during the step; it left run_step bare. Stage 1 begins its step
// only once stage 0's first message has reached it (inproc delivers within the send).
TEST(PeerFailure, AFailingInputBytesOfAMessageFromBeforeTheStepFailsIt) {
  struct Delivered final : Transport {  // `sent` once a message was delivered
    Delivered(std::unique_ptr<Transport> in, Latch& sent) : in_(std::move(in)), sent_(sent) {}
    int rank() const override { return in_->rank(); }
    int size() const override { return in_->size(); }
    void set_receiver(Receiver r) override { in_->set_receiver(std::move(r)); }
    void send(int dst, const MessageTag& tag, Payload p, SendDone done) override {
      in_->send(dst, tag, std::move(p), std::move(done));
      if (!sent_once_.exchange(true)) sent_.arrive();
    }
    void shutdown() override { in_->shutdown(); }
    std::unique_ptr<Transport> in_;
    Latch& sent_;
    std::atomic<bool> sent_once_{false};
  };
  struct NoSizes final : StageProgram {
    explicit NoSizes(std::unique_ptr<StageProgram> in) : in_(std::move(in)) {}
    Payload forward(TaskContext& c, int k, int mb, Payload p) override {
      return in_->forward(c, k, mb, std::move(p));
    }
    Payload backward(TaskContext& c, int k, int mb, Payload p) override {
      return in_->backward(c, k, mb, std::move(p));
    }
    std::optional<std::size_t> input_bytes(const TaskId&) const override {
      throw std::runtime_error("size table missing");
    }
    std::unique_ptr<StageProgram> in_;
  };
  const WorkModel m = model(2, 2);
  const RealizedWork w = random_work(m, 1, 5);
  const Hint h = make_hint("bf", m);
  auto jobs = make_local_jobs(2);
  Latch sent(1);
  std::vector<Outcome> out(2);
  on_every_rank(2, [&](int i) {
    jobs[i]->set_layout(JobLayout{2, 1, 1});
    Hosting hs = jobs[i]->hosting();
    if (i == 0)
      hs.transports[0] = std::make_unique<Delivered>(std::move(hs.transports[0]), sent);
    else
      hs.before_step = [everyone = hs.before_step, &sent] {
        everyone();
        sent.wait();
      };
    auto base = emulated_programs(m, w);
    const ProgramFactory programs = [&](int s, int r) -> std::unique_ptr<StageProgram> {
      if (s == 0) return base(s, r);
      return std::make_unique<NoSizes>(base(s, r));
    };
    Runtime rt(m, h, programs, runtime_options(m, w, Policy::Ready), std::move(hs));
    try {
      rt.run_step(0);
    } catch (...) {
      out[i] = outcome(std::current_exception());
    }
    jobs[i]->all_gather({});  // nobody tears down its endpoint while the other may still send
  });
  EXPECT_EQ(out[1].kind, "task") << out[1].what;
  EXPECT_TRUE(has(out[1].what, ": input_bytes(F c1 m0) failed: size table missing")) << out[1].what;
  EXPECT_EQ(out[0].kind, "peer") << out[0].what;
  EXPECT_TRUE(has(out[0].what, "stage 1 failed step 0")) << out[0].what;
}

}  // namespace
}  // namespace rrfp::test
