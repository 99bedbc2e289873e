#include "sim/metrics.hpp"

#include <algorithm>
#include <array>
#include <limits>
#include <string>

#include "core/error.hpp"

namespace rrfp {

namespace {

// (c): a stage runs one task at a time and starts an F only while fewer than L of its
// microbatch-chunks have ended their F but not their B, so the intervals [F(c,mb) starts,
// B(c,mb) ends] of its microbatch-chunks overlap at most L deep. Each is at least F(c,mb) plus
// the round trip after it, F(c+1..C-1, mb) then B(C-1..c, mb) with the messages between
// stages; all lie between the stage's earliest F start and the latest end its B tasks leave
// room for. So makespan >= lead + sum of the intervals / L + tail.
void memory_bound(const WorkModel& m, const std::vector<std::int64_t>& dur,
                  const std::vector<std::int64_t>& lat, const std::vector<std::int64_t>& start,
                  const std::vector<std::int64_t>& tail, int limit, LowerBound& lb) {
  const int c = m.chunks(), mbs = m.microbatches(), p = m.pp();
  const std::int64_t inf = std::numeric_limits<std::int64_t>::max();
  std::vector<std::int64_t> sum(p, 0), lead(p, inf), tl(p, inf);
  for (int mb = 0; mb < mbs; ++mb) {
    std::int64_t after = 0;  // from F(ch, mb)'s end to B(ch, mb)'s end
    for (int ch = c - 1; ch >= 0; --ch) {
      const int f = m.index({Kind::F, ch, mb}), b = m.index({Kind::B, ch, mb});
      if (ch == c - 1) {
        after = dur[b];
      } else {
        const bool cross = m.stage_of(ch) != m.stage_of(ch + 1);
        const int f1 = m.index({Kind::F, ch + 1, mb}), b1 = m.index({Kind::B, ch + 1, mb});
        after = (cross ? lat[f] : 0) + dur[f1] + after + (cross ? lat[b1] : 0) + dur[b];
      }
      const int s = m.stage_of(ch);
      sum[s] += dur[f] + after;
      lead[s] = std::min(lead[s], start[f]);
      tl[s] = std::min(tl[s], tail[b]);
    }
  }
  for (int s = 0; s < p; ++s) {
    const std::int64_t b = lead[s] + sum[s] / limit + tl[s];
    if (b > lb.memory) {
      lb.memory = b;
      lb.memory_stage = s;
    }
  }
}

}  // namespace

LowerBound lower_bound(const WorkModel& m, const RealizedWork& w, int limit) {
  const int n = m.num_tasks();
  std::vector<std::int64_t> dur(n), lat(n);
  for (int i = 0; i < n; ++i) {
    std::int64_t d = 0, l = std::numeric_limits<std::int64_t>::max();
    for (int r = 0; r < w.tp; ++r) {
      d = std::max(d, w.compute(r, i));
      l = std::min(l, w.message(r, i));
    }
    dur[i] = d + w.collective_ns;
    lat[i] = l;
  }
  // Topological order: F by chunk ascending, then B by chunk descending, then W.
  std::vector<int> order;
  order.reserve(n);
  const int c = m.chunks(), mbs = m.microbatches();
  for (int ch = 0; ch < c; ++ch)
    for (int mb = 0; mb < mbs; ++mb)
      order.push_back(m.index({Kind::F, ch, mb}));
  for (int ch = c - 1; ch >= 0; --ch)
    for (int mb = 0; mb < mbs; ++mb)
      order.push_back(m.index({Kind::B, ch, mb}));
  if (m.split())
    for (int ch = 0; ch < c; ++ch)
      for (int mb = 0; mb < mbs; ++mb)
        order.push_back(m.index({Kind::W, ch, mb}));

  std::vector<std::int64_t> start(n, 0), tail(n, 0);
  std::array<Dep, 2> d{};
  LowerBound lb;
  for (int i : order) {
    const int k = m.deps(m.task(i), d);
    for (int j = 0; j < k; ++j) {
      const int di = m.index(d[j].task);
      start[i] = std::max(start[i], start[di] + dur[di] + (d[j].cross_stage ? lat[di] : 0));
    }
    lb.critical_path = std::max(lb.critical_path, start[i] + dur[i]);
  }
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    const int i = *it;
    const int k = m.consumers(m.task(i), d);
    for (int j = 0; j < k; ++j) {
      const int ci = m.index(d[j].task);
      tail[i] = std::max(tail[i], (d[j].cross_stage ? lat[i] : 0) + dur[ci] + tail[ci]);
    }
  }
  const std::int64_t inf = std::numeric_limits<std::int64_t>::max();
  std::vector<std::int64_t> lead(m.pp(), inf), tl(m.pp(), inf), work(m.pp(), 0);
  for (int i = 0; i < n; ++i) {
    const int s = m.stage_of(m.task(i));
    lead[s] = std::min(lead[s], start[i]);
    tl[s] = std::min(tl[s], tail[i]);
    work[s] += dur[i];
  }
  for (int s = 0; s < m.pp(); ++s) {
    const std::int64_t b = lead[s] + work[s] + tl[s];
    if (b > lb.stage_bound) {
      lb.stage_bound = b;
      lb.stage = s;
    }
  }
  lb.value = std::max(lb.stage_bound, lb.critical_path);
  if (limit > 0) memory_bound(m, dur, lat, start, tail, limit, lb);
  return lb;
}

RunMetrics compute_metrics(const StepRecord& r, const LowerBound& lb) {
  RunMetrics out;
  out.makespan = r.makespan;
  out.bound = lb;
  out.limit = r.arbiter.limit;
  out.max_pending_w = r.arbiter.max_pending_w;
  out.coordination_rounds = r.coordination_rounds;
  out.failed_rounds = r.failed_rounds;
  std::int64_t coord = 0, coll = 0;
  for (const BlockedSpan& b : r.blocked) {
    if (b.reason == BlockReason::Coordination) coord += b.end - b.start;
    if (b.reason == BlockReason::Collective) coll += b.end - b.start;
  }
  if (!r.ranks.empty()) {
    out.coordination_per_rank = coord / static_cast<std::int64_t>(r.ranks.size());
    out.collective_per_rank = coll / static_cast<std::int64_t>(r.ranks.size());
  }
  out.stages.resize(r.pp);
  double busy_total = 0;
  for (int s = 0; s < r.pp; ++s) {
    StageMetrics& st = out.stages[s];
    for (int k = 0; k < r.tp; ++k) {
      const RankStats& rs = r.ranks[static_cast<size_t>(s) * r.tp + k];
      st.busy += rs.busy;
      st.blocked += rs.blocked;
    }
    st.busy /= r.tp;
    st.blocked /= r.tp;
    st.idle = std::max<std::int64_t>(0, r.makespan - st.busy - st.blocked);
    st.peak_d = r.peak_d.empty() ? 0 : r.peak_d[s];
    st.peak_pending_w = r.peak_pending_w.empty() ? 0 : r.peak_pending_w[s];
    busy_total += static_cast<double>(st.busy);
  }
  if (r.makespan > 0) {
    out.bubble_ratio = 1.0 - busy_total / (static_cast<double>(r.pp) * r.makespan);
    out.efficiency = static_cast<double>(lb.value) / r.makespan;
  }
  return out;
}

RealizedWork measured_work(const WorkModel& m, const StepRecord& r) {
  RealizedWork w;
  w.num_tasks = m.num_tasks();
  w.compute_ns.assign(w.num_tasks, 0);
  w.message_ns.assign(w.num_tasks, 0);
  w.message_bytes.assign(w.num_tasks, 0);
  for (const TaskRecord& t : r.tasks)
    w.compute_ns[m.index(t.task)] = t.compute_end - t.start;
  return w;
}

void use_measured_compute(const WorkModel& m, RealizedWork& w, const StepRecord& r) {
  std::vector<char> seen(w.compute_ns.size(), 0);
  for (const TaskRecord& t : r.tasks) {
    const size_t i = static_cast<size_t>(t.rank) * w.num_tasks + m.index(t.task);
    if (t.rank < 0 || t.rank >= w.tp || i >= seen.size())
      throw InputError("measured step: task " + to_string(t.task) + " on TP rank " +
                       std::to_string(t.rank) + " is outside the run's " + std::to_string(w.tp) +
                       " ranks");
    w.compute_ns[i] = t.compute_end - t.start;
    seen[i] = 1;
  }
  const auto missing = std::find(seen.begin(), seen.end(), 0);
  if (missing != seen.end()) {
    const int k = static_cast<int>(missing - seen.begin());
    throw InputError("measured step: no record of task " + to_string(m.task(k % w.num_tasks)) +
                     " on TP rank " + std::to_string(k / w.num_tasks));
  }
}

}  // namespace rrfp
