// Tensor-parallel coordination in the runtime (semantics.md §4): `leader` and `agree` keep every
// group's collective order identical under random per-rank delays; with no coordination the
// divergence is reported as a CollectiveMismatchError, not a hang. Under blocking transfers a
// rank waiting in its group's collective accepts offers.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "expect_error.hpp"
#include "runtime/errors.hpp"
#include "runtime_helpers.hpp"

namespace rrfp::test {
namespace {

struct Case {
  const char* hint;
  PipelineConfig cfg;
};

TEST(RuntimeTp, LeaderAndAgreeKeepEveryGroupInOneOrder) {
  const Case cases[] = {{"bf", shape(4, 8)},
                        {"bfw", shape(3, 6, 1, true)},
                        {"bf", shape(2, 4, 2)},
                        {"adaptive", shape(3, 6, 1, true)}};
  for (TpProtocol p : {TpProtocol::Leader, TpProtocol::Agree})
    for (const Case& c : cases)
      for (int tp : {2, 3})
        for (int seed = 0; seed < 4; ++seed) {
          WorkModel m(c.cfg);
          Hint h = make_hint(c.hint, m);
          // Large per-rank spread: ranks of a group see inputs at very different times.
          const RealizedWork w = random_work(m, tp, seed, 200, 400);
          Runtime rt(m, h, emulated_programs(m, w), runtime_options(m, w, Policy::Ready, p));
          const StepResult r = rt.run_step(0);
          const auto ord = orders(r.run.tasks);
          for (int s = 0; s < m.pp(); ++s)
            for (int k = 1; k < tp; ++k)
              ASSERT_EQ(ord.at({s, k}), ord.at({s, 0}))
                  << to_string(p) << " " << c.hint << " tp=" << tp << " seed=" << seed;
          if (p == TpProtocol::Agree) {
            EXPECT_GT(r.run.coordination_rounds, 0);
          }
        }
}

// Stage 0's rank 1 gets its gradients from stage 1 100 ms after rank 0 does, so with BF and room
// to run ahead (limit 16) rank 0 picks B c0 m0 (ready after ~15 ms) while rank 1 keeps running
// the forwards that occupy the stage for 80 ms. The margins hold on a loaded machine under TSan.
RealizedWork skewed_work(const WorkModel& m) {
  RealizedWork w;
  w.tp = 2;
  w.num_tasks = m.num_tasks();
  w.compute_ns.assign(2 * w.num_tasks, 5'000'000);
  w.message_ns.assign(2 * w.num_tasks, 0);
  w.message_bytes.assign(w.num_tasks, 64);
  for (int i = 0; i < w.num_tasks; ++i)
    if (m.task(i).kind == Kind::B) w.message_ns[w.num_tasks + i] = 100'000'000;
  return w;
}

TEST(RuntimeTp, NoCoordinationIsDetectedAndReported) {
  WorkModel m(shape(2, 16));
  Hint h = make_hint("bf", m);
  const RealizedWork w = skewed_work(m);
  RuntimeOptions ro = runtime_options(m, w, Policy::Ready, TpProtocol::None);
  ro.arbiter.limit = 16;
  Runtime rt(m, h, emulated_programs(m, w), ro);
  try {
    rt.run_step(0);
    FAIL() << "expected a collective mismatch";
  } catch (const CollectiveMismatchError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("stage 0"), std::string::npos) << msg;
    EXPECT_NE(msg.find("collective order diverged"), std::string::npos) << msg;
    EXPECT_NE(msg.find("B c0 m0"), std::string::npos) << msg;
  }
  // A failed runtime refuses further steps (and says so, rather than failing in another way).
  EXPECT_ERROR(rt.run_step(1), Error, "an earlier step failed; start a new runtime");

  // The same skew under either protocol runs to completion.
  for (TpProtocol p : {TpProtocol::Leader, TpProtocol::Agree}) {
    ro.tp_protocol = p;
    Runtime ok(m, h, emulated_programs(m, w), ro);
    EXPECT_NO_THROW(ok.run_step(0)) << to_string(p);
  }
}

// Every task meets its group in one all-reduce; stage 1's rank 1 enters F m0's only once stage
// 1's rank 0 has acknowledged F c0 m1's offer, which that rank, waiting in F m0's collective
// for rank 1, can only do from inside the collective (semantics.md §4). Waiting for the
// acknowledgement has a 10 s deadline: a runtime that took no offer there fails the step.
class AcceptInCollective final : public StageProgram {
 public:
  AcceptInCollective(int stage, int rank, const std::atomic<bool>& acked)
      : stage_(stage), rank_(rank), acked_(acked) {}
  Payload forward(TaskContext& ctx, int, int mb, Payload) override {
    if (stage_ == 1 && rank_ == 1 && mb == 0) {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (!acked_.load()) {
        if (std::chrono::steady_clock::now() > deadline)
          throw std::runtime_error("F c0 m1's offer was not accepted by the waiting rank");
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
    return meet(ctx);
  }
  Payload backward(TaskContext& ctx, int, int, Payload) override { return meet(ctx); }

 private:
  static Payload meet(TaskContext& ctx) {
    std::array<float, 1> x{1};
    ctx.all_reduce(x);
    return Payload::allocate(8);
  }
  int stage_, rank_;
  const std::atomic<bool>& acked_;
};

TEST(RuntimeTp, BlockingARankWaitingForItsGroupAcceptsOffers) {
  for (const bool pull : {false, true}) {
    const WorkModel m(shape(2, 2));
    const Hint h = make_hint("1f1b", m);
    RealizedWork w = random_work(m, 2, 1);
    RuntimeOptions ro = runtime_options(m, w, Policy::Fixed);
    ro.comm = CommMode::Blocking;
    ro.latency = {};
    ro.rendezvous_pull = pull;
    std::atomic<bool> acked{false};
    // Endpoint stage * T + rank: stage 1's rank 0 (2) acknowledges to stage 0's rank 0 (0).
    auto eps = faulty_transports(4, [&](int src, int& dst, MessageTag& t, Payload&) {
      if (src == 2 && dst == 0 && t.ack && t.producer == TaskId{Kind::F, 0, 1}) acked = true;
      return true;
    });
    Runtime rt(
        m, h,
        [&](int stage, int rank) {
          return std::make_unique<AcceptInCollective>(stage, rank, acked);
        },
        ro, std::move(eps));
    const StepResult r = rt.run_step(0);
    EXPECT_EQ(r.run.tasks.size(), static_cast<std::size_t>(2 * m.num_tasks())) << pull;
    EXPECT_TRUE(acked.load()) << pull;
  }
}

// Under `agree` the ranks of a group must rank their ready tasks alike. Sizes differ here by rank
// (a program's mistake: they are the microbatch's, the same on every rank), so the adaptive
// rule's first forwards differ and every round fails; the watchdog's report shows the
// proposals of the group's last failed round, which name the disagreement.
class SizedByRank final : public StageProgram {
 public:
  SizedByRank(std::unique_ptr<StageProgram> inner, int rank, int mbs)
      : in_(std::move(inner)), rank_(rank), mbs_(mbs) {}
  Payload forward(TaskContext& c, int chunk, int mb, Payload p) override {
    return in_->forward(c, chunk, mb, std::move(p));
  }
  Payload backward(TaskContext& c, int chunk, int mb, Payload p) override {
    return in_->backward(c, chunk, mb, std::move(p));
  }
  std::optional<std::int64_t> microbatch_size(int mb) const override {
    return rank_ == 0 ? mb : mbs_ - mb;  // rank 0's largest is rank 1's smallest
  }

 private:
  std::unique_ptr<StageProgram> in_;
  int rank_, mbs_;
};

TEST(RuntimeTp, AgreeRanksThatRankApartAreNamedByTheWatchdog) {
  WorkModel m(shape(2, 4, 1, true));
  Hint h = make_hint("adaptive", m);
  const RealizedWork w = random_work(m, 2, 1);
  RuntimeOptions ro = runtime_options(m, w, Policy::Ready, TpProtocol::Agree);
  ro.timeout_ms = 2000;  // the stall is certain: only the report's round must be decided by then
  auto inner = emulated_programs(m, w);
  Runtime rt(
      m, h,
      [&](int s, int r) { return std::make_unique<SizedByRank>(inner(s, r), r, m.microbatches()); },
      ro);
  EXPECT_ERROR(rt.run_step(0), StallError,
               "waits for a change of its ready set since agree round 0 failed (tp rank 0 "
               "proposed F c0 m0, tp rank 1 proposed F c0 m3)");
}

// A rank waiting for its peers in its group's collective read as busy in its task ("running F
// c0 m0 for 3011 ms"): between processes the chase ended there, and the stopped peer of its
// group went unnamed. Its report says it waits there, and with whom.
TEST(RuntimeTp, ARankInItsGroupsCollectiveSaysSoAndNamesItsGroup) {
  WorkModel m(shape(1, 1));
  const Hint h = make_hint("1f1b", m);
  const RealizedWork w = random_work(m, 2, 1);
  RuntimeOptions ro = runtime_options(m, w, Policy::Fixed);
  ro.timeout_ms = 1000;
  auto inner = emulated_programs(m, w);
  Runtime rt(
      m, h,
      [&](int s, int r) -> std::unique_ptr<StageProgram> {
        if (r == 0) return inner(s, r);
        // Rank 1 comes to the collective past the watchdog's timeout.
        return std::make_unique<HookBefore>(inner(s, r), TaskId{Kind::F, 0, 0}, [] {
          std::this_thread::sleep_for(std::chrono::milliseconds(2500));
        });
      },
      ro);
  EXPECT_ERROR(rt.run_step(0), StallError,
               "ms of it in its group's collective, with stage 0 tp rank 1");
}

}  // namespace
}  // namespace rrfp::test
