// The simulator's work on threads: ranges of a loop (sim/parallel.hpp), the workload drawn in
// ranges, and the lower bound summed over ranges of microbatches, each against what one thread
// computes.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <functional>
#include <limits>
#include <stdexcept>

#include "seeds.hpp"
#include "sim/parallel.hpp"
#include "sim/rng.hpp"
#include "sim_helpers.hpp"

namespace rrfp::test {
namespace {

TEST(ParallelRanges, CoverEveryItemOnceInContiguousRanges) {
  for (int n : {0, 1, 7, 100, 1000})
    for (int parts : {1, 2, 3, 8}) {
      std::vector<int> seen(n, 0);
      std::vector<std::pair<int, int>> range(parts, {-1, -1});
      parallel_ranges(n, parts, [&](int k, int begin, int end) {
        range[k] = {begin, end};
        for (int i = begin; i < end; ++i)
          ++seen[i];
      });
      for (int i = 0; i < n; ++i)
        ASSERT_EQ(seen[i], 1) << "n=" << n << " parts=" << parts << " item " << i;
      ASSERT_EQ(range.front().first, 0);
      ASSERT_EQ(range.back().second, n);
      for (int k = 1; k < parts; ++k)
        ASSERT_EQ(range[k].first, range[k - 1].second) << "n=" << n << " parts=" << parts;
    }
}

TEST(ParallelRanges, RethrowTheLowestRangesErrorAfterEveryRangeRan) {
  std::vector<int> ran(4, 0);
  try {
    parallel_ranges(400, 4, [&](int k, int, int) {
      ran[k] = 1;
      if (k == 1) throw std::runtime_error("range 1");
      if (k == 3) throw std::invalid_argument("range 3");
    });
    FAIL() << "no error rethrown";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "range 1");
  }
  EXPECT_EQ(ran, std::vector<int>(4, 1));
}

TEST(ParallelRanges, SplitOnlyWhatPaysForAThread) {
  EXPECT_EQ(parallel_parts(0, 100), 1);
  EXPECT_EQ(parallel_parts(199, 100), 1);
  EXPECT_GE(parallel_parts(1 << 20, 100), 1);
  EXPECT_LE(parallel_parts(1 << 20, 100), 8);
}

// A task's compute is keyed by (kind, chunk, microbatch) alone at TP 1, so a model with many
// more microbatches, drawn in ranges on several threads, gives the first microbatches the
// durations that a small one draws on the calling thread.
TEST(Realize, DrawsInRangesEqualTheSerialDraws) {
  const int big = 1 << 14, small = 64;  // 131,072 tasks: several ranges on a machine of 2 cores
  for (const char* preset : {"multimodal", "language"}) {
    WorkModel mb(config(4, big, 2, true)), ms(config(4, small, 2, true));
    const RealizedWork wb = realize(workload_preset(preset), mb, 1, 7);
    const RealizedWork ws = realize(workload_preset(preset), ms, 1, 7);
    int compared = 0;
    for (int i = 0; i < ms.num_tasks(); ++i) {
      const TaskId t = ms.task(i);
      ASSERT_EQ(wb.compute(0, mb.index(t)), ws.compute(0, i)) << preset << " " << to_string(t);
      ASSERT_EQ(wb.message_bytes[mb.index(t)], ws.message_bytes[i]) << preset;
      ++compared;
    }
    EXPECT_EQ(compared, 3 * 8 * small);
  }
}

// The bound as its definition reads, task by task over one array (what lower_bound computed
// before it walked ranges of microbatches): (a), (b) and (c).
LowerBound reference_bound(const WorkModel& m, const RealizedWork& w, int limit) {
  auto dur = [&](int i) {
    std::int64_t d = 0;
    for (int r = 0; r < w.tp; ++r)
      d = std::max(d, w.compute(r, i));
    return d + w.collective_after(m.task(i).kind);
  };
  auto lat = [&](int i) {
    std::int64_t l = std::numeric_limits<std::int64_t>::max();
    for (int r = 0; r < w.tp; ++r)
      l = std::min(l, w.message(r, i));
    return l;
  };
  const int n = m.num_tasks(), p = m.pp();
  const std::int64_t inf = std::numeric_limits<std::int64_t>::max();
  std::vector<std::int64_t> start(n, -1), after(n, -1);
  Deps d{};
  // Memoised recursion: the earliest start and the least time after, from their definitions.
  std::function<std::int64_t(int)> start_of = [&](int i) {
    if (start[i] >= 0) return start[i];
    std::int64_t s = 0;
    const int nd = m.deps(m.task(i), d);
    const Deps deps = d;
    for (int j = 0; j < nd; ++j) {
      const int di = m.index(deps[j].task);
      s = std::max(s, start_of(di) + dur(di) + (deps[j].cross_stage ? lat(di) : 0));
    }
    return start[i] = s;
  };
  std::function<std::int64_t(int)> after_of = [&](int i) {
    if (after[i] >= 0) return after[i];
    std::int64_t a = 0;
    const int nc = m.consumers(m.task(i), d);
    const Deps cons = d;
    for (int j = 0; j < nc; ++j) {
      const int ci = m.index(cons[j].task);
      a = std::max(a, (cons[j].cross_stage ? lat(i) : 0) + dur(ci) + after_of(ci));
    }
    return after[i] = a;
  };
  std::vector<std::int64_t> lead(p, inf), lead_f(p, inf), tl(p, inf), tail_b(p, inf), work(p, 0),
      span(p, 0);
  LowerBound lb;
  for (int i = 0; i < n; ++i) {
    const TaskId t = m.task(i);
    const int s = m.stage_of(t);
    lb.critical_path = std::max(lb.critical_path, start_of(i) + dur(i));
    lead[s] = std::min(lead[s], start_of(i));
    tl[s] = std::min(tl[s], after_of(i));
    work[s] += dur(i);
    if (t.kind == Kind::F) {
      lead_f[s] = std::min(lead_f[s], start_of(i));
      // (c): F's interval runs from its start to its B's end: F, then the round trip after it.
      const int b = m.index({Kind::B, t.chunk, t.mb});
      std::int64_t round = dur(b);
      for (int ch = m.chunks() - 1; ch > t.chunk; --ch) {
        const bool cross = m.stage_of(ch - 1) != m.stage_of(ch);
        const int f_prev = m.index({Kind::F, ch - 1, t.mb}), b_here = m.index({Kind::B, ch, t.mb});
        round += dur(m.index({Kind::F, ch, t.mb})) + dur(b_here) + (cross ? lat(f_prev) : 0) +
                 (cross ? lat(b_here) : 0);
      }
      span[s] += dur(i) + round;
    }
    if (t.kind == Kind::B) tail_b[s] = std::min(tail_b[s], after_of(i));
  }
  for (int s = 0; s < p; ++s) {
    if (lead[s] + work[s] + tl[s] > lb.stage_bound) {
      lb.stage_bound = lead[s] + work[s] + tl[s];
      lb.stage = s;
    }
    if (limit > 0 && lead_f[s] + span[s] / limit + tail_b[s] > lb.memory) {
      lb.memory = lead_f[s] + span[s] / limit + tail_b[s];
      lb.memory_stage = s;
    }
  }
  lb.value = std::max(lb.stage_bound, lb.critical_path);
  return lb;
}

// Random shapes, presets, TP sizes and limits; every tenth seed has enough microbatches for the
// bound to walk several ranges of them on threads of their own.
TEST(LowerBound, EqualsItsDefinitionTaskByTaskOverManySeeds) {
  const auto& presets = workload_names();
  const int seeds = std::max(20, suite_seeds() / 5);
  for (int seed = 0; seed < seeds; ++seed) {
    const std::uint64_t h = hash_keys(42, seed);
    const bool large = seed % 10 == 0;  // P >= 4, so rows of 8 tasks and more: several ranges
    const int p = (large ? 4 : 1) + static_cast<int>(h % 3), v = 1 + static_cast<int>((h >> 8) % 3);
    const int mbs =
        large ? 8192 + static_cast<int>((h >> 16) % 9) : 1 + static_cast<int>((h >> 16) % 40);
    const bool split = (h >> 24) % 2 == 1;
    const int tp = 1 + static_cast<int>((h >> 28) % 2), limit = static_cast<int>((h >> 32) % 5);
    WorkModel m(config(p, mbs, v, split));
    const std::string& preset = presets[(h >> 40) % presets.size()];
    const RealizedWork w = realize(workload_preset(preset), m, tp, seed);
    const LowerBound got = lower_bound(m, w, limit), want = reference_bound(m, w, limit);
    const std::string ctx = "seed " + std::to_string(seed) + " P=" + std::to_string(p) +
                            " V=" + std::to_string(v) + " M=" + std::to_string(mbs) + " " + preset;
    ASSERT_EQ(got.value, want.value) << ctx;
    ASSERT_EQ(got.stage_bound, want.stage_bound) << ctx;
    ASSERT_EQ(got.stage, want.stage) << ctx;
    ASSERT_EQ(got.critical_path, want.critical_path) << ctx;
    ASSERT_EQ(got.memory, want.memory) << ctx;
    ASSERT_EQ(got.memory_stage, want.memory_stage) << ctx;
  }
}

}  // namespace
}  // namespace rrfp::test
