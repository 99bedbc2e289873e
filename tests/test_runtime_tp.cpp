// Tensor-parallel coordination in the runtime (semantics.md §4): `leader` and `agree` keep every
// group's collective order identical under random per-rank delays; with no coordination the
// divergence is reported as a CollectiveMismatchError, not a hang.
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace rrfp::test
