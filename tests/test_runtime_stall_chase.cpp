// A stalled process asks the processes it waits on what they wait on, in turn, and its report
// says where the chain ends (Runtime's stall chase). Each endpoint is a Runtime of its own, as
// the processes of an mpirun job have them, on threads sharing in-process transports
// (dist/local_job.hpp). Stage 2's first forward never ends until the stages with a short
// watchdog have failed; stage 0 waits on stage 1, which waits on stage 2. Without the chase
// stage 0's report named stage 1 alone. Runs under the sanitizers.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <regex>
#include <thread>
#include <vector>

#include "runtime/errors.hpp"

#include "dist/local_job.hpp"
#include "rank_threads.hpp"
#include "runtime_helpers.hpp"

namespace rrfp::test {
namespace {

// Holds a task until opened (or 30 s: a test that hangs fails instead).
class Gate {
 public:
  void open() {
    std::lock_guard lk(mu_);
    open_ = true;
    cv_.notify_all();
  }
  void wait() {
    std::unique_lock lk(mu_);
    cv_.wait_for(lk, std::chrono::seconds(30), [&] { return open_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

// Runs `inner`, but its forward of `stuck` waits at the gate first.
class StuckIn final : public StageProgram {
 public:
  StuckIn(std::unique_ptr<StageProgram> inner, std::optional<TaskId> stuck, Gate& gate)
      : in_(std::move(inner)), stuck_(stuck), gate_(gate) {}
  Payload forward(TaskContext& c, int chunk, int mb, Payload p) override {
    if (stuck_ && *stuck_ == TaskId{Kind::F, chunk, mb}) gate_.wait();
    return in_->forward(c, chunk, mb, std::move(p));
  }
  Payload backward(TaskContext& c, int chunk, int mb, Payload p) override {
    return in_->backward(c, chunk, mb, std::move(p));
  }
  std::optional<std::size_t> input_bytes(const TaskId& t) const override {
    return in_->input_bytes(t);
  }

 private:
  std::unique_ptr<StageProgram> in_;
  std::optional<TaskId> stuck_;
  Gate& gate_;
};

// Each endpoint's error (stage * tp + tp rank), and whether it was a peer's told (PeerStall),
// for a job of `pp` stages of `tp` ranks, each endpoint a Runtime of its own: the last stage's
// tp rank `tp - 1` never ends its first forward until every endpoint with a short watchdog has
// failed. `timeouts`: each endpoint's watchdog. `answers`: whether the stuck endpoint's process
// answers, not at all (as a stopped one would not) or 520 ms late (as one continued then would:
// over half its asker's round of a second, with most of the rest to spare under load).
struct Errors {
  std::vector<std::string> what;
  std::vector<bool> told;
};
enum class Answers { Given, None, Late };
Errors stage_errors(int pp, int tp, const std::vector<std::int64_t>& timeouts, Answers answers) {
  PipelineConfig c;
  c.pp = pp;
  c.microbatches = pp;
  const WorkModel m(c);
  const RealizedWork w = random_work(m, tp, 7, 50, 20);
  const Hint h = make_hint("1f1b", m);
  const int world = pp * tp, stuck = world - 1;
  auto jobs = make_local_jobs(world);
  Gate gate;
  Errors out{std::vector<std::string>(world), std::vector<bool>(world)};
  std::mutex mu;
  int waiting = 0;  // endpoints with a short watchdog that have not failed yet
  for (int i = 0; i < world; ++i)
    waiting += timeouts[i] < 60'000;
  on_every_rank(world, [&](int i) {
    jobs[i]->set_layout(JobLayout{pp, tp, 1});
    auto base = emulated_programs(m, w);
    const ProgramFactory programs = [&](int s, int r) {
      return std::make_unique<StuckIn>(
          base(s, r), s * tp + r == stuck ? std::optional(TaskId{Kind::F, s, 0}) : std::nullopt,
          gate);
    };
    RuntimeOptions o = runtime_options(m, w, Policy::Fixed);
    o.timeout_ms = timeouts[i];
    Hosting hosting = jobs[i]->hosting();
    if (i == stuck && answers != Answers::Given)
      hosting.transports[0] = std::make_unique<FaultyTransport>(
          std::move(hosting.transports[0]), [answers](int, int&, MessageTag& t, Payload&) {
            if (t.control != Control::Answer) return true;
            if (answers == Answers::None) return false;
            std::this_thread::sleep_for(std::chrono::milliseconds(520));
            return true;
          });
    Runtime rt(m, h, programs, o, std::move(hosting));
    try {
      rt.run_step(0);
    } catch (const std::exception& e) {
      std::lock_guard lk(mu);
      out.what[i] = e.what();
      out.told[i] = from_peer(e);
      if (timeouts[i] < 60'000 && --waiting == 0) gate.open();
    }
  });
  return out;
}

// Stage 0's error, its watchdog alone short.
std::string stage0_error(Answers answers) {
  return stage_errors(3, 1, {300, 60'000, 60'000}, answers).what[0];
}

// What a report adds where an answer came over half a round late (a loaded machine's may).
const std::string kLate =
    "(, answering only after [0-9]+ ms \\(stopped or not run until then\\),)?";

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

TEST(StallChase, TheReportFollowsTheWaitsToTheProcessInATask) {
  const std::string e = stage0_error(Answers::Given);
  EXPECT_TRUE(has(e, "no progress for")) << e;
  EXPECT_TRUE(has(e, "expects messages: B c1 m0 from stage 1")) << e;
  EXPECT_TRUE(std::regex_search(
      e, std::regex("asked in turn: stage 1" + kLate +
                    " made no progress for [0-9]+ ms and waits for messages from stage 2; stage 2" +
                    kLate +
                    " made no progress for [0-9]+ ms: \\[stage 2: [^\\]]*running F c2 m0 for "
                    "[0-9]+ ms")))
      << e;
}

// A process that answers over half a round late was stopped or not run until then: its answer
// is said to be late, as the idle time it gives was measured on waking (a rank continued by
// mpirun to be ended said it had made no progress for 0 ms, and read as live).
TEST(StallChase, ALateAnswerIsSaidToBeLate) {
  // Stage 0's timeout of a second: its rounds wait a second, the late answer within one.
  const std::string e = stage_errors(3, 1, {1000, 60'000, 60'000}, Answers::Late).what[0];
  EXPECT_TRUE(std::regex_search(
      e, std::regex("; stage 2, answering only after [5-9][0-9][0-9] ms \\(stopped "
                    "or not run until then\\), made no progress for [0-9]+ ms: \\[stage 2: ")))
      << e;
}

TEST(StallChase, AProcessThatDoesNotAnswerEndsTheChain) {
  const std::string e = stage0_error(Answers::None);
  EXPECT_TRUE(
      std::regex_search(e, std::regex("asked in turn: stage 1" + kLate + " made no progress for")))
      << e;
  EXPECT_TRUE(has(e,
                  "waits for messages from stage 2; stage 2 did not answer within 0.3 s "
                  "(stopped, hung, or not scheduled)"))
      << e;
}

// Stages 0 and 1 stall together behind stage 2, which does not answer: both watchdogs fire. Stage
// 1, nearer the end of the chain, reports; stage 0 learns from its answer that it is stalled as
// long, awaits its abort and fails with it, so that a job prints one line, not two.
TEST(StallChase, OfTwoProcessesStalledTogetherTheOneNearerTheEndReports) {
  const Errors e = stage_errors(3, 1, {300, 300, 60'000}, Answers::None);
  EXPECT_FALSE(e.told[1]) << e.what[1];
  EXPECT_TRUE(has(e.what[1], "asked in turn: stage 2 did not answer within 0.3 s")) << e.what[1];
  EXPECT_TRUE(e.told[0]) << e.what[0];
  EXPECT_TRUE(has(e.what[0], "stage 1 failed step 0: no progress for")) << e.what[0];
}

// Stage 1 tp rank 1 stopped in its first forward: its group's rank 0 waits in the collective
// for it, and stage 0 tp rank 0 for stage 1 tp rank 0's messages. Both watchdogs fire; the
// chain ends at a wait it does not follow (the collective), whose rank is about to report it
// itself: stage 0 awaits its abort, as it awaits a rank that waits for messages, so that the job
// prints one line (two, stage 0's naming only its neighbour, in 3 of 4 runs under mpirun).
TEST(StallChase, ARankStalledInItsGroupsCollectiveReportsForTheChainEndingThere) {
  const Errors e = stage_errors(2, 2, {300, 60'000, 300, 60'000}, Answers::None);
  EXPECT_FALSE(e.told[2]) << e.what[2];
  EXPECT_TRUE(has(e.what[2], "in its group's collective")) << e.what[2];
  EXPECT_TRUE(e.told[0]) << e.what[0];
  EXPECT_TRUE(has(e.what[0], "stage 1 tp rank 0 failed step 0: no progress for")) << e.what[0];
}

// Two stages of two tp ranks, each rank a Runtime of its own: stage 1 tp rank 1's first
// forward does not end, and stage 0 tp rank 1, whose watchdog alone is short, reports. Its
// peers are named with their tp ranks: "stage 1" named either rank of stage 1.
TEST(StallChase, ATensorParallelPeerIsNamedWithItsTpRank) {
  const std::string reported =
      stage_errors(2, 2, {60'000, 300, 60'000, 60'000}, Answers::Given).what[1];
  EXPECT_TRUE(has(reported, "B c1 m0 from stage 1 tp rank 1")) << reported;
  EXPECT_TRUE(std::regex_search(reported,
                                std::regex("asked in turn: stage 1 tp rank 1" + kLate +
                                           " made no progress for [0-9]+ ms: "
                                           "\\[stage 1: [^\\]]*\\[tp rank 1\\]; running F c1 m0")))
      << reported;
}

// A process hosting some of the stages sees their progress alone, and its stall report says so
// where one of its ranks waits for another stage ("`timeout` must exceed the longest wait of a
// stage for its input"), not where its rank is stuck in a task expecting no message (it was
// said of both). Stage 0 alone is hosted here; stage 1 never runs.
TEST(StallReport, TheHostingHintOnlyWhereARankWaitsForAnotherStage) {
  const WorkModel m(shape(2, 1));
  const Hint h = make_hint("1f1b", m);
  struct Slow final : StageProgram {
    int forward_ms = 0;
    Payload forward(TaskContext&, int, int, Payload) override {
      std::this_thread::sleep_for(std::chrono::milliseconds(forward_ms));
      return Payload::allocate(8);
    }
    Payload backward(TaskContext&, int, int, Payload) override { return Payload::allocate(8); }
  };
  const auto report = [&](int forward_ms) {
    auto eps = make_inproc_transports(2);
    eps[1]->set_receiver([](Message&&) {});  // stage 1's endpoint takes what comes, and no more
    Hosting host;
    host.local = {0};
    host.transports.push_back(std::move(eps[0]));
    RuntimeOptions o;
    o.arbiter.policy = Policy::Fixed;
    o.timeout_ms = 300;
    Runtime rt(
        m, h,
        [forward_ms](int, int) {
          auto p = std::make_unique<Slow>();
          p->forward_ms = forward_ms;
          return p;
        },
        o, std::move(host));
    try {
      rt.run_step(0);
    } catch (const StallError& e) {
      return std::string(e.what());
    } catch (const std::exception& e) {
      return std::string("not a stall: ") + e.what();
    }
    return std::string("no stall");
  };
  const std::string hint = "this process watches its own stages only";
  const std::string in_task = report(1500);  // F c0 m0 outlasts the timeout
  EXPECT_NE(in_task.find("running F c0 m0"), std::string::npos) << in_task;
  EXPECT_EQ(in_task.find(hint), std::string::npos) << in_task;
  const std::string waiting = report(0);  // B c0 m0 waits for stage 1's gradient
  EXPECT_NE(waiting.find("expects messages: B c1 m0 from stage 1"), std::string::npos) << waiting;
  EXPECT_NE(waiting.find(hint), std::string::npos) << waiting;
}

}  // namespace
}  // namespace rrfp::test
