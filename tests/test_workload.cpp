// A workload's realized durations (sim/workload.hpp): the presets' spreads, draws that are pure
// functions of their seed, jitter as the paper injects it, the split backward's parts, and the
// refusals of a workload that does not fit its shape. The message model: test_message_model.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "core/error.hpp"
#include "expect_error.hpp"
#include "sim_helpers.hpp"

namespace rrfp::test {
namespace {

double spread(std::vector<double> v) {  // (p95 - p5) / p50
  std::sort(v.begin(), v.end());
  auto q = [&](double p) { return v[static_cast<size_t>(p * (v.size() - 1))]; };
  return (q(0.95) - q(0.05)) / q(0.5);
}

TEST(Workload, PaperCommHasThePapersSpread) {
  // The paper measured (p95-p5)/p50 of 0.73 for compute and 58.7 for messages at fixed inputs.
  WorkModel m(config(4, 8));
  const WorkloadParams w = workload_preset("paper-comm");
  std::vector<double> comp, msg;
  const int f_idx = m.index({Kind::F, 1, 3});
  for (int seed = 0; seed < 4000; ++seed) {
    RealizedWork r = realize(w, m, 1, seed);
    comp.push_back(r.compute(0, f_idx));
    msg.push_back(r.message(0, f_idx));
  }
  EXPECT_NEAR(spread(comp), 0.70, 0.08);
  EXPECT_NEAR(spread(msg), 59, 12);
}

TEST(Workload, PaperPresetHasThePapersSpreadsAndBottleneck) {
  // The same spreads with bimodal messages; the last stage slowest for about half the
  // microbatches at P = 8 (the fit's compromise, docs/results-paper.md).
  WorkModel m(config(8, 8));
  const WorkloadParams w = workload_preset("paper");
  std::vector<double> comp, msg;
  const int f_idx = m.index({Kind::F, 1, 3});
  int last_slowest = 0, samples = 0;
  for (int seed = 0; seed < 4000; ++seed) {
    RealizedWork r = realize(w, m, 1, seed);
    comp.push_back(r.compute(0, f_idx));
    msg.push_back(r.message(0, f_idx));
    if (seed % 10) continue;
    for (int mb = 0; mb < 8; ++mb) {
      std::int64_t others = 0;
      for (int c = 0; c < 7; ++c)
        others = std::max(others, r.compute(0, m.index({Kind::F, c, mb})));
      last_slowest += r.compute(0, m.index({Kind::F, 7, mb})) > others;
      ++samples;
    }
  }
  EXPECT_NEAR(spread(comp), 0.70, 0.08);
  EXPECT_NEAR(spread(msg), 59, 12);
  const double share = static_cast<double>(last_slowest) / samples;
  EXPECT_GT(share, 0.4);
  EXPECT_LT(share, 0.7);
  // Fig. 2's ranges: forwards around 18 ms, every message below 60 ms.
  std::sort(msg.begin(), msg.end());
  std::sort(comp.begin(), comp.end());
  EXPECT_LT(msg.back(), 60e6);
  EXPECT_NEAR(comp[comp.size() / 2], 18e6, 4e6);
}

// The same seed realizes the same durations; another seed, others.
TEST(Workload, DurationsArePureAndDependOnTheSeed) {
  WorkModel m(config(4, 16, 1, true));
  for (const auto& name : workload_names()) {
    const WorkloadParams w = workload_preset(name);
    EXPECT_EQ(realize(w, m, 2, 9).compute_ns, realize(w, m, 2, 9).compute_ns) << name;
    EXPECT_NE(realize(w, m, 2, 9).compute_ns, realize(w, m, 2, 10).compute_ns) << name;
  }
}

// A straggler past the last stage would slow nothing, silently: refused once P is known.
TEST(Workload, AStragglerStagePastThePipelineIsRefused) {
  WorkModel m(config(4, 8));
  WorkloadParams w = workload_preset("straggler");
  w.straggler_prob = 1;
  w.straggler_stage = 3;
  EXPECT_NO_THROW(realize(w, m, 1, 1));
  w.straggler_stage = 4;
  EXPECT_ERROR(realize(w, m, 1, 1), InputError,
               "workload straggler_stage: 4 for 4 stages; a stage between 0 and 3, -1 for none "
               "or -2 for one drawn from the seed");
}

// A file's fields each in range may not fit the shape or may draw past a bound: the refusal
// names the file (it named the field alone), and a mean token count outside the clamp's bounds is
// refused (a language file's tokens_mean 100000 ran 16384 tokens a microbatch, silently).
TEST(Workload, AFilesRefusalsNameTheFileAndItsMeanLiesWithinTheClamp) {
  WorkModel m(config(4, 8));
  const WorkloadParams s =
      apply_workload_json(workload_preset("uniform"), R"({"preset": "straggler",
          "straggler_stage": 7})",
                          "s.json");
  EXPECT_ERROR(realize(s, m, 1, 1), InputError, "s.json: workload straggler_stage: 7 for 4 stages");
  EXPECT_ERROR(apply_workload_json(workload_preset("uniform"),
                                   R"({"preset": "language", "tokens_mean": 100000})", "t.json"),
               InputError,
               "t.json: workload tokens_mean: 100000 lies outside [tokens_min, tokens_max] = "
               "[256, 16384]");
  EXPECT_ERROR(apply_workload_json(workload_preset("uniform"), R"({"tokens_mean": 100})", "t.json"),
               InputError, "tokens_mean: 100 lies outside");
  const WorkloadParams t = apply_workload_json(
      workload_preset("uniform"), R"({"tokens_mean": 100, "tokens_min": 100})", "t.json");
  EXPECT_EQ(microbatch_tokens(t, 1, 0), 100);
  for (const auto& name : workload_names())  // every preset's mean lies within its clamp
    EXPECT_NO_THROW(validate(workload_preset(name))) << name;
}

// Each field within its range, a microbatch's message past 2^63 bytes: refused by name, where
// its size wrapped negative (and the adaptive rule's entry order with it). A clamp raised
// (tokens_max) with messages of ordinary size is no such message.
TEST(Workload, AMessagePastOneTebibyteIsRefused) {
  WorkModel m(config(2, 4));
  WorkloadParams w = workload_preset("multimodal");
  w.tokens_max = 2e8;
  EXPECT_NO_THROW(realize(w, m, 1, 1));
  w.images_scale = 1e6;
  w.images_max = 1000000;
  w.image_tokens = 1e6;
  w.bytes_per_token = 2;
  EXPECT_ERROR(realize(w, m, 1, 1), InputError,
               "workload bytes_per_token: microbatch 2's message would be 2e+12 bytes");
  EXPECT_ERROR(realize(w, m, 1, 1), InputError, "at most 2^40 (1 TiB)");
}

TEST(Workload, JitterHitsAboutPOfTasks) {
  WorkModel m(config(8, 64));
  for (int j = 1; j <= 3; ++j) {
    WorkloadParams w = workload_preset("jitter:J" + std::to_string(j));
    WorkloadParams calm = w;
    calm.jitter = jitter_level(0);
    RealizedWork a = realize(w, m, 1, 5), b = realize(calm, m, 1, 5);
    int hit = 0;
    for (int i = 0; i < m.num_tasks(); ++i)
      hit += a.compute(0, i) > b.compute(0, i);
    EXPECT_NEAR(static_cast<double>(hit) / m.num_tasks(), jitter_level(j).p, 0.03) << "J" << j;
  }
}

// The paper injects on F and B with the same seed for every method: a split backward must see
// the same hits, on the same microbatches, as a whole one, and its W none.
TEST(Workload, JitterIsTheSameWithAndWithoutASplitBackward) {
  WorkModel whole(config(4, 16, 2)), split(config(4, 16, 2, true));
  for (int j = 1; j <= 3; ++j) {
    WorkloadParams w = workload_preset("jitter:J" + std::to_string(j));
    WorkloadParams calm = w;
    calm.jitter = jitter_level(0);
    const RealizedWork a = realize(w, whole, 2, 7), b = realize(w, split, 2, 7);
    const RealizedWork ca = realize(calm, whole, 2, 7), cb = realize(calm, split, 2, 7);
    int hits = 0;
    for (int i = 0; i < split.num_tasks(); ++i) {
      const TaskId t = split.task(i);
      const int iw = whole.index(t.kind == Kind::W ? TaskId{Kind::B, t.chunk, t.mb} : t);
      for (int r = 0; r < 2; ++r) {
        const bool hit_split = b.compute(r, i) > cb.compute(r, i);
        const bool hit_whole = a.compute(r, iw) > ca.compute(r, iw);
        if (t.kind == Kind::W) {
          EXPECT_FALSE(hit_split) << "J" << j << " W mb " << t.mb;
        } else {
          EXPECT_EQ(hit_split, hit_whole) << "J" << j << " task " << i << " rank " << r;
          hits += hit_split;
        }
        if (t.kind == Kind::F) {
          EXPECT_EQ(b.compute(r, i), a.compute(r, iw));
        }
      }
    }
    EXPECT_GT(hits, 0) << "J" << j;
  }
}

// A split backward is the whole backward's work in two parts: on every preset, TP size and
// seed, each rank's B + W is the B of the same step without the split (to the nanosecond: B is
// the whole less the rounded W), and every forward and message is the same. W drew noise of its
// own, so BFW was measured on other work than 1F1B: 1.137x at P=1 M=1, where nothing can be
// scheduled.
TEST(Workload, ASplitBackwardIsTheWholeBackwardInTwoParts) {
  WorkModel whole(config(4, 8, 2)), split(config(4, 8, 2, true));
  for (const char* preset :
       {"language", "multimodal", "paper", "paper-comm", "straggler", "jitter:J2", "jitter:J3"})
    for (int tp : {1, 2})
      for (std::uint64_t seed = 1; seed <= 3; ++seed) {
        WorkloadParams w = workload_preset(preset);
        w.compute_sigma = std::max(w.compute_sigma, 0.2);  // noise everywhere
        const RealizedWork a = realize(w, whole, tp, seed), b = realize(w, split, tp, seed);
        for (int i = 0; i < whole.num_tasks(); ++i) {
          const TaskId t = whole.task(i);
          for (int r = 0; r < tp; ++r) {
            const std::string at =
                std::string(preset) + " tp " + std::to_string(tp) + " " + to_string(t);
            EXPECT_EQ(b.message(r, split.index(t)), a.message(r, i)) << at;
            if (t.kind == Kind::F) {
              EXPECT_EQ(b.compute(r, split.index(t)), a.compute(r, i)) << at;
            } else {
              const std::int64_t parts = b.compute(r, split.index(t)) +
                                         b.compute(r, split.index({Kind::W, t.chunk, t.mb}));
              EXPECT_EQ(parts, a.compute(r, i)) << at;
            }
          }
        }
      }
}

TEST(Workload, MultimodalLoadsTheFrontChunk) {
  WorkModel m(config(4, 64));
  RealizedWork r = realize(workload_preset("multimodal"), m, 1, 3);
  double front = 0, mid = 0;
  for (int mb = 0; mb < 64; ++mb) {
    front += r.compute(0, m.index({Kind::F, 0, mb}));
    mid += r.compute(0, m.index({Kind::F, 1, mb}));
  }
  EXPECT_GT(front, 1.2 * mid);
}

}  // namespace
}  // namespace rrfp::test
