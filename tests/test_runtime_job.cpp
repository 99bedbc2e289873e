// The runtime with every endpoint in its own Runtime, as the processes of an mpirun job have
// them, but as threads sharing in-process transports (dist/local_job.hpp): the TP
// coordination protocols then run over control messages, and step records are merged the way
// rank 0 merges them. Runs under the sanitizers.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include "dist/deadline.hpp"
#include "dist/job.hpp"
#include "dist/local_job.hpp"
#include "dist/replica_sum.hpp"
#include "dist/step_merge.hpp"
#include "expect_error.hpp"
#include "job_conformance.hpp"
#include "rank_threads.hpp"
#include "runtime/errors.hpp"
#include "runtime_helpers.hpp"

namespace rrfp::test {
namespace {

// One step on every endpoint, each a Runtime of its own; returns the merged record.
StepResult run_as_job(const WorkModel& m, const Hint& h, const RealizedWork& w,
                      const RuntimeOptions& o) {
  const int world = m.pp() * w.tp;
  auto jobs = make_local_jobs(world);
  std::vector<StepResult> results(world);
  on_every_rank(world, [&](int i) {
    jobs[i]->set_layout(JobLayout{m.pp(), w.tp, 1});
    Runtime rt(m, h, emulated_programs(m, w), o, jobs[i]->hosting());
    results[i] = rt.run_step(0);
    jobs[i]->all_gather({});  // nobody tears down an endpoint a peer may still send to
  });
  StepResult all = std::move(results[0]);
  for (int i = 1; i < world; ++i)
    merge_step(all, pack_step(results[i]));
  return all;
}

TEST(RuntimeJob, ProtocolsOverControlMessagesKeepEveryGroupInOneOrder) {
  const std::pair<const char*, PipelineConfig> cases[] = {
      {"bf", shape(3, 6)}, {"bfw", shape(2, 6, 1, true)}, {"bf", shape(2, 4, 2)}};
  for (TpProtocol p : {TpProtocol::Leader, TpProtocol::Agree})
    for (const auto& [hint, cfg] : cases)
      for (int tp : {2, 3})
        for (int seed = 0; seed < 3; ++seed) {
          WorkModel m(cfg);
          Hint h = make_hint(hint, m);
          const RealizedWork w = random_work(m, tp, seed, 200, 400);
          const StepResult r = run_as_job(m, h, w, runtime_options(m, w, Policy::Ready, p));
          ASSERT_EQ(r.run.tasks.size(), static_cast<size_t>(m.num_tasks() * tp));
          const auto ord = orders(r.run.tasks);
          for (int s = 0; s < m.pp(); ++s)
            for (int k = 1; k < tp; ++k)
              ASSERT_EQ(ord.at({s, k}), ord.at({s, 0}))
                  << to_string(p) << " " << hint << " tp=" << tp << " seed=" << seed;
          if (p == TpProtocol::Agree) {
            EXPECT_GT(r.run.coordination_rounds, 0);
          }
          for (const RankStats& st : r.run.ranks)
            EXPECT_GT(st.busy, 0);  // every endpoint's record made it into the merge
        }
}

TEST(RuntimeJob, MergedRecordRejectsAnotherShape) {
  StepResult a, b;
  a.run.pp = 2;
  a.run.ranks.resize(2);
  a.run.peak_d.resize(2);
  a.run.peak_pending_w.resize(2);
  b.run.pp = 3;
  EXPECT_ERROR(merge_step(a, pack_step(b)), Error,
               "step record: shape P=3 T=1 does not match P=2 T=1");
  const auto packed = pack_step(a);
  EXPECT_ERROR(merge_step(a, std::span(packed).first(packed.size() - 3)), Error,
               "step record: truncated");
}

// The merged step counts every process's freshly mapped buffers.
TEST(RuntimeJob, MergedRecordAddsTheFreshBuffers) {
  StepResult a, b;
  for (StepResult* r : {&a, &b}) {
    r->run.pp = 2;
    r->run.ranks.resize(2);
    r->run.peak_d.resize(2);
    r->run.peak_pending_w.resize(2);
  }
  a.fresh_buffers = 2;
  b.fresh_buffers = 3;
  merge_step(a, pack_step(b));
  EXPECT_EQ(a.fresh_buffers, 5);
}

// The data-parallel sum: replica order on every replica, and replicas whose gradients differ in
// size (one froze a parameter the other trains) refused on each of them, naming both sizes.
TEST(DpSum, AddsInReplicaOrderAndRefusesReplicasOfOtherSizes) {
  for (const bool mismatch : {false, true}) {
    auto jobs = make_local_jobs(2);
    std::vector<std::vector<float>> got(2);
    std::vector<std::string> errors(2);
    on_every_rank(2, [&](int r) {
      jobs[r]->set_layout(JobLayout{1, 1, 2});
      std::vector<float> v = {1.0f + static_cast<float>(r), 1e8f, -1e8f};
      if (mismatch && r == 1) v.pop_back();
      try {
        dp_sum(*jobs[r], v);
        got[r] = v;
      } catch (const InputError& e) {
        errors[r] = e.what();
      }
    });
    for (int r = 0; r < 2; ++r) {
      if (mismatch) {
        EXPECT_NE(errors[r].find("replica 0: 3 float32 values; replica 1: 2 float32 values"),
                  std::string::npos)
            << errors[r];
      } else {
        EXPECT_EQ(errors[r], "");
        EXPECT_EQ(got[r], (std::vector<float>{3.0f, 2e8f, -2e8f}));
      }
    }
  }
}

// The job conformance suite (job_conformance.hpp) on the local job: ranks as threads.
INSTANTIATE_TEST_SUITE_P(Jobs, JobConformance,
                         ::testing::Values(std::make_pair("local", JobFactory([](int pp, int dp) {
                                                            auto jobs = make_local_jobs(pp * dp);
                                                            for (auto& j : jobs)
                                                              j->set_layout(JobLayout{pp, 1, dp});
                                                            return jobs;
                                                          }))),
                         [](const auto& info) { return std::string(info.param.first); });

// Stops this process `after` from now for `stopped` (a child's SIGSTOP and SIGCONT), and
// returns once the child is done: false where it could not fork.
bool stopped_by_a_child(timespec after, timespec stopped) {
  const pid_t parent = ::getpid();
  const pid_t child = ::fork();
  if (child < 0) return false;
  if (child == 0) {  // async-signal-safe calls only
    ::nanosleep(&after, nullptr);
    ::kill(parent, SIGSTOP);
    ::nanosleep(&stopped, nullptr);
    ::kill(parent, SIGCONT);
    ::_exit(0);
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  return true;
}

}  // namespace

// A process stopped while a phase is armed (mpirun continues a stopped rank to end it) is no
// peer's stall: the deadline moves on by the time it was stopped, where the rank reported its
// own gather as late beside the job's true report. A child stops this process for 1.5 s.
TEST(DeadlineGuard, TimeStoppedCountsTowardsNoDeadline) {
  std::atomic<int> expired{0};
  std::atomic<std::int64_t> stopped{-1};
  std::atomic<std::int64_t> last_ago{-2};
  DeadlineGuard g([&](const std::string&, std::int64_t, DeadlineGuard::Stopped s) {
    stopped = s.within_ms;
    last_ago = s.last_ago_ms;
    expired.fetch_add(1);
  });
  auto phase = g.arm("gather", 1000);
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(stopped_by_a_child({0, 200'000'000}, {1, 500'000'000}));
  // Continued 1.7 s in, past the deadline of 1 s counted in the clock's time: not expired, as
  // 0.2 s of it ran. Seen 0.3 s later.
  std::this_thread::sleep_until(start + std::chrono::milliseconds(2000));
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(1900));
  EXPECT_EQ(expired.load(), 0);
  // Unstopped, it still expires: 0.2 s before the stop, 0.3 s after it, 0.5 s more to come.
  // It says how long the process was stopped within it (woken at least 1.25 s late of 1.5).
  std::this_thread::sleep_until(start + std::chrono::milliseconds(3500));
  EXPECT_EQ(expired.load(), 1);
  EXPECT_GE(stopped.load(), 1000);
  EXPECT_LE(stopped.load(), 1600);
  // And when the stop ended: 1.7 s in, the expiry about 0.8 s later (0.2 s of the deadline
  // ran before the stop, the rest after it, its wake up to 0.25 s late).
  EXPECT_GE(last_ago.load(), 400);
  EXPECT_LE(last_ago.load(), 1500);
}

// Stopped between two calls (no phase armed), the others ending for want of it meanwhile: the
// next call's expiry says so (the stopped process named a healthy one, gone, as stopped).
TEST(DeadlineGuard, AStopBeforeAPhaseIsToldAtItsExpiry) {
  std::atomic<int> expired{0};
  DeadlineGuard::Stopped seen;
  std::mutex mu;
  DeadlineGuard g([&](const std::string&, std::int64_t, DeadlineGuard::Stopped s) {
    std::lock_guard lk(mu);
    seen = s;
    expired.fetch_add(1);
  });
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(stopped_by_a_child({0, 100'000'000}, {1, 200'000'000}));
  std::this_thread::sleep_until(start + std::chrono::milliseconds(1600));
  auto phase = g.arm("gather", 300);
  std::this_thread::sleep_until(start + std::chrono::milliseconds(2400));
  ASSERT_EQ(expired.load(), 1);
  std::lock_guard lk(mu);
  EXPECT_EQ(seen.within_ms, 0);
  EXPECT_GE(seen.last_ms, 900);  // 1.2 s stopped, the watcher's wake asked up to 0.25 s before
  EXPECT_LE(seen.last_ms, 1300);
  EXPECT_GE(seen.last_ago_ms, 300);  // woken 1.3 s in, the expiry 1.9 s in
  EXPECT_LE(seen.last_ago_ms, 1100);
}

}  // namespace rrfp::test

namespace rrfp::test {

// A local job's ranks share exchanges built for the first layout: a second, other layout read
// them (a gather over 2 replicas returned 1 value, then wrote past an exchange's slots). And a
// layout's product checked for overflow: 641 x 6700417 is 2^32 + 1, which an int read as 1 rank,
// and 1718039348 x 5 x 2147418113 is 2^64 + 4.
TEST(LocalJob, TakesOneLayoutAndCountsItsRanksWithoutOverflow) {
  auto jobs = make_local_jobs(2);
  jobs[0]->set_layout({2, 1, 1});
  jobs[1]->set_layout({2, 1, 1});  // the same again: as before
  EXPECT_ERROR(jobs[0]->set_layout({1, 1, 2}), InputError,
               "a local job takes one layout: its ranks were laid out as `pp` 2 x `tp` 1 x `dp` 1");
  EXPECT_ERROR(validate(JobLayout{641, 1, 6'700'417}, 1, "a job of 1 rank"), InputError,
               "a job of 1 rank: the layout `pp` 641 x `tp` 1 x `dp` 6700417 needs 4294967297 "
               "ranks");
  EXPECT_ERROR(validate(JobLayout{1'718'039'348, 5, 2'147'418'113}, 4, "a job of 4 ranks"),
               InputError, "`dp` 2147418113 needs more than 2^63 ranks");
}

// The deadline of MPI's blocking calls (start-up, barriers, shutdown): a phase that outlives
// its deadline is reported once, by name; phases disarmed in time and phases without a
// deadline never are, however long the guard lives.
TEST(DeadlineGuard, ReportsOnlyAPhaseThatOutlivesItsDeadline) {
  std::mutex mu;
  std::vector<std::string> expired;
  {
    DeadlineGuard g([&](const std::string& phase, std::int64_t ms, DeadlineGuard::Stopped s) {
      std::lock_guard lk(mu);
      expired.push_back(phase + " " + std::to_string(ms) + " " + std::to_string(s.within_ms));
    });
    const auto start = std::chrono::steady_clock::now();
    { auto quick = g.arm("quick", 200); }  // disarmed at once
    auto never = g.arm("no deadline", 0);
    auto slow = g.arm("slow", 20);
    auto later = g.arm("later", 10'000);  // still armed when the guard goes
    // Past 31 years none: 1e13 ms overflowed the clock's nanoseconds and expired at once.
    auto huge = g.arm("past the clock", 10'000'000'000'000);
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < until) {
      {
        std::lock_guard lk(mu);
        if (!expired.empty()) break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    // Past the disarmed phase's deadline, and time for a second report of "slow" to show.
    std::this_thread::sleep_until(start + std::chrono::milliseconds(400));
  }
  EXPECT_EQ(expired, std::vector<std::string>{"slow 20 0"});
}

}  // namespace rrfp::test
