// Property tests over many seeds (semantics.md §2, §5): for every hint, policy and workload
// preset, on random pipeline shapes, TP sizes and communication modes, every run finishes,
// runs each task once after its inputs, one task at a time per rank, keeps D and pending W
// within their bounds, and never beats the lower bound.
#include <gtest/gtest.h>

#include <cstdlib>

#include "core/error.hpp"
#include "seeds.hpp"
#include "shapes.hpp"
#include "sim/check.hpp"
#include "sim/rng.hpp"
#include "sim_helpers.hpp"

namespace rrfp::test {
namespace {

class Invariants : public ::testing::TestWithParam<std::string> {};

TEST_P(Invariants, HoldForEveryPolicyAndPresetOverManySeeds) {
  const std::string hint_name = GetParam();
  const bool list = !is_rule_hint_name(hint_name);
  const auto& presets = workload_names();
  int runs = 0;
  for (int seed = 0; seed < suite_seeds(); ++seed) {
    const Shape sh = random_shape(hint_name, seed);
    WorkModel m(sh.cfg);
    Hint hint = make_hint(hint_name, m);
    for (const std::string& preset : presets) {
      WorkloadParams wp = workload_preset(preset);
      wp.coord_latency_us = 5;
      wp.tp_collective_us = 3;
      RealizedWork work = realize(wp, m, sh.tp, seed);
      ASSERT_EQ(work.compute_ns, realize(wp, m, sh.tp, seed).compute_ns) << "durations not pure";
      work.offer_payload = seed % 2 == 1;  // blocking runs: either rendezvous
      const LowerBound lb = lower_bound(m, work);
      std::vector<std::int64_t> busy_first;
      for (Policy policy : {Policy::Fixed, Policy::Ready}) {
        if (policy == Policy::Fixed && !list) continue;
        // Laid out for asynchronous sends, fixed ZB-V deadlocks under the rendezvous, and is
        // refused (FixedBlockingCheck.RefusesZbVWhereItsOrderDeadlocks).
        if (policy == Policy::Fixed && hint_name == "zb-v" && sh.comm == CommMode::Blocking)
          continue;
        SimOptions opt;
        opt.arbiter.policy = policy;
        opt.arbiter.limit = sh.limit;
        opt.comm = sh.comm;
        opt.tp_protocol = sh.protocol;
        const std::string ctx =
            hint_name + " " + to_string(policy) + " " + preset + " seed=" + std::to_string(seed) +
            " P=" + std::to_string(sh.cfg.pp) + " M=" + std::to_string(sh.cfg.microbatches) +
            " V=" + std::to_string(sh.cfg.vpp) + " " + to_string(sh.cfg.placement) +
            " split=" + std::to_string(sh.cfg.split_backward) + " TP=" + std::to_string(sh.tp) +
            " " + to_string(sh.comm) + " " + to_string(sh.protocol) +
            " limit=" + std::to_string(sh.limit) + " offer=" + std::to_string(work.offer_payload);
        StepRecord r;
        try {
          r = simulate(m, hint, work, opt);
        } catch (const Error& e) {
          FAIL() << ctx << ": " << e.what();
        }
        ++runs;
        // The planner's evaluation, without records or the deadlock's description: the same
        // makespan (a quarter of the runs, to keep the sanitizers' builds of this test short).
        if (seed % 4 == 0) {
          ASSERT_EQ(simulated_makespan(m, hint, work, opt), r.makespan) << ctx;
        }
        CheckOptions co;
        co.policy = policy;
        co.limit = r.arbiter.limit;
        co.max_pending_w = m.split() ? r.arbiter.max_pending_w : 0;
        const auto bad = check_run(m, sh.tp, r.tasks, co);
        ASSERT_TRUE(bad.empty()) << ctx << ": " << bad.front();
        ASSERT_GE(r.makespan, lb.value) << ctx;
        // The memory bound, where the limit holds D: ready dispatch with V = 1 (the fixed policy
        // follows its list; with V > 1 a draining microbatch may pass the limit).
        if (policy == Policy::Ready && m.vpp() == 1) {
          ASSERT_GE(r.makespan, lower_bound(m, work, r.arbiter.limit).memory) << ctx;
        }
        if (policy == Policy::Ready && sh.cfg.vpp == 1) {
          for (int d : r.peak_d)
            ASSERT_LE(d, r.arbiter.limit) << ctx;
        }
        // Identical realized work: each rank's summed compute is the same under both policies.
        std::vector<std::int64_t> busy;
        for (const auto& rs : r.ranks)
          busy.push_back(rs.busy);
        if (busy_first.empty())
          busy_first = busy;
        else
          ASSERT_EQ(busy, busy_first) << ctx;
      }
    }
  }
  EXPECT_GE(runs, suite_seeds() * static_cast<int>(presets.size()));
}

INSTANTIATE_TEST_SUITE_P(AllHints, Invariants, ::testing::ValuesIn(hint_names()),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n)
                             if (c == '-') c = '_';
                           return n;
                         });

// Appendix C: with any limit >= 1 no rule hint deadlocks, interleaved or not.
TEST(BackPressure, RuleHintsNeverDeadlockAtAnyLimit) {
  for (const char* name : {"bf", "fb", "b-priority", "f-priority", "bfw", "adaptive"}) {
    for (int seed = 0; seed < 60; ++seed) {
      for (int limit = 1; limit <= 3; ++limit) {
        PipelineConfig c = config(2 + seed % 7, 1 + seed % 24, 1 + seed % 3, true);
        WorkModel m(c);
        Hint h = make_hint(name, m);
        SimOptions opt;
        opt.arbiter.limit = limit;
        const auto work = realize(workload_preset("multimodal"), m, 1, seed);
        StepRecord r;
        ASSERT_NO_THROW(r = simulate(m, h, work, opt))
            << name << " seed " << seed << " limit " << limit;
        for (int d : r.peak_d)
          ASSERT_LE(d, limit + (c.vpp > 1 ? c.vpp : 0)) << name;
      }
    }
  }
}

TEST(TensorParallel, NoCoordinationIsCaughtAsAMismatch) {
  // Per-rank jitter makes ranks see different ready sets; without a protocol they diverge.
  WorkModel m(config(4, 16));
  Hint h = make_hint("bf", m);
  WorkloadParams wp = workload_preset("paper-comm");
  SimOptions opt;
  opt.tp_protocol = TpProtocol::None;
  int caught = 0;
  for (int seed = 0; seed < 20; ++seed) {
    try {
      simulate(m, h, realize(wp, m, 2, seed), opt);
    } catch (const CollectiveMismatchError& e) {
      ++caught;
      EXPECT_NE(std::string(e.what()).find("collective order diverged"), std::string::npos);
      // Both ranks named, as the runtime's error names them (it said "rank(s) of its group").
      const std::string what = e.what();
      const bool named = what.find("while rank(s) 0 of its group") != std::string::npos ||
                         what.find("while rank(s) 1 of its group") != std::string::npos;
      EXPECT_TRUE(named) << what;
      // The planner's evaluation: such a run does not finish either.
      EXPECT_EQ(simulated_makespan(m, h, realize(wp, m, 2, seed), opt), std::nullopt) << seed;
    }
  }
  EXPECT_GT(caught, 0);
  for (TpProtocol p : {TpProtocol::Leader, TpProtocol::Agree}) {
    opt.tp_protocol = p;
    for (int seed = 0; seed < 20; ++seed)
      EXPECT_NO_THROW(simulate(m, h, realize(wp, m, 2, seed), opt));
  }
}

}  // namespace
}  // namespace rrfp::test
