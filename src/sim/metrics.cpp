#include "sim/metrics.hpp"

#include <algorithm>
#include <array>
#include <limits>
#include <string>

#include "core/error.hpp"

namespace rrfp {

namespace {

// What the bound reads of a task: its group's time (the slowest rank plus the collective) and
// its message's (the fastest rank's), read where they lie rather than copied per task: the
// copies were most of the bound's memory.
struct Costs {
  const RealizedWork& w;
  std::int64_t dur(int i) const {
    std::int64_t d = 0;
    for (int r = 0; r < w.tp; ++r)
      d = std::max(d, w.compute(r, i));
    return d + w.collective_ns;
  }
  std::int64_t lat(int i) const {
    std::int64_t l = std::numeric_limits<std::int64_t>::max();
    for (int r = 0; r < w.tp; ++r)
      l = std::min(l, w.message(r, i));
    return l;
  }
};

// Every task in a topological order (F by chunk ascending, B by chunk descending, then W), or
// in its reverse: f(task, index). Tasks of one kind and chunk do not depend on one another.
template <class Visit>
void in_order(const WorkModel& m, bool reverse, Visit&& f) {
  std::vector<std::pair<Kind, int>> rows;
  const int c = m.chunks(), mbs = m.microbatches();
  for (int ch = 0; ch < c; ++ch)
    rows.emplace_back(Kind::F, ch);
  for (int ch = c - 1; ch >= 0; --ch)
    rows.emplace_back(Kind::B, ch);
  if (m.split())
    for (int ch = 0; ch < c; ++ch)
      rows.emplace_back(Kind::W, ch);
  if (reverse) std::reverse(rows.begin(), rows.end());
  for (const auto& [kind, ch] : rows) {
    const int first = m.index({kind, ch, 0});  // a row's microbatches are consecutive
    for (int mb = 0; mb < mbs; ++mb)
      f(TaskId{kind, ch, mb}, first + mb);
  }
}

// (c): a stage runs one task at a time and starts an F only while fewer than L of its
// microbatch-chunks have ended their F but not their B, so the intervals [F(c,mb) starts,
// B(c,mb) ends] of its microbatch-chunks overlap at most L deep. Each is at least F(c,mb) plus
// the round trip after it, F(c+1..C-1, mb) then B(C-1..c, mb) with the messages between
// stages; all lie between the stage's earliest F start (`lead_f`) and the latest end its B
// tasks leave room for (`tail_b`). So makespan >= lead + sum of the intervals / L + tail.
void memory_bound(const WorkModel& m, const Costs& k, const std::vector<std::int64_t>& lead_f,
                  const std::vector<std::int64_t>& tail_b, int limit, LowerBound& lb) {
  const int c = m.chunks(), mbs = m.microbatches(), p = m.pp();
  std::vector<std::int64_t> sum(p, 0);
  for (int mb = 0; mb < mbs; ++mb) {
    std::int64_t after = 0;  // from F(ch, mb)'s end to B(ch, mb)'s end
    for (int ch = c - 1; ch >= 0; --ch) {
      const int f = m.index({Kind::F, ch, mb}), b = m.index({Kind::B, ch, mb});
      if (ch == c - 1) {
        after = k.dur(b);
      } else {
        const bool cross = m.stage_of(ch) != m.stage_of(ch + 1);
        const int f1 = m.index({Kind::F, ch + 1, mb}), b1 = m.index({Kind::B, ch + 1, mb});
        after = (cross ? k.lat(f) : 0) + k.dur(f1) + after + (cross ? k.lat(b1) : 0) + k.dur(b);
      }
      sum[m.stage_of(ch)] += k.dur(f) + after;
    }
  }
  for (int s = 0; s < p; ++s) {
    const std::int64_t b = lead_f[s] + sum[s] / limit + tail_b[s];
    if (b > lb.memory) {
      lb.memory = b;
      lb.memory_stage = s;
    }
  }
}

}  // namespace

LowerBound lower_bound(const WorkModel& m, const RealizedWork& w, int limit) {
  const Costs k{w};
  const std::int64_t inf = std::numeric_limits<std::int64_t>::max();
  const int p = m.pp();
  // Per stage: the earliest start (of any task, of an F), the least tail after a task (of any,
  // of a B), and the summed work.
  std::vector<std::int64_t> lead(p, inf), lead_f(p, inf), tl(p, inf), tail_b(p, inf), work(p, 0);
  LowerBound lb;
  std::array<Dep, 2> d{};
  // One array serves both passes: each task's earliest start, then the least time after it.
  std::vector<std::int64_t> at(m.num_tasks(), 0);
  in_order(m, false, [&](const TaskId& t, int i) {
    const int n = m.deps(t, d);
    for (int j = 0; j < n; ++j) {
      const int di = m.index(d[j].task);
      at[i] = std::max(at[i], at[di] + k.dur(di) + (d[j].cross_stage ? k.lat(di) : 0));
    }
    const std::int64_t dur = k.dur(i);
    lb.critical_path = std::max(lb.critical_path, at[i] + dur);
    const int s = m.stage_of(t);
    lead[s] = std::min(lead[s], at[i]);
    if (t.kind == Kind::F) lead_f[s] = std::min(lead_f[s], at[i]);
    work[s] += dur;
  });
  std::fill(at.begin(), at.end(), 0);
  in_order(m, true, [&](const TaskId& t, int i) {
    const int n = m.consumers(t, d);
    for (int j = 0; j < n; ++j) {
      const int ci = m.index(d[j].task);
      at[i] = std::max(at[i], (d[j].cross_stage ? k.lat(i) : 0) + k.dur(ci) + at[ci]);
    }
    const int s = m.stage_of(t);
    tl[s] = std::min(tl[s], at[i]);
    if (t.kind == Kind::B) tail_b[s] = std::min(tail_b[s], at[i]);
  });
  for (int s = 0; s < p; ++s) {
    const std::int64_t b = lead[s] + work[s] + tl[s];
    if (b > lb.stage_bound) {
      lb.stage_bound = b;
      lb.stage = s;
    }
  }
  lb.value = std::max(lb.stage_bound, lb.critical_path);
  if (limit > 0) memory_bound(m, k, lead_f, tail_b, limit, lb);
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
  for (const RankStats& rs : r.ranks) {
    coord += rs.coordination;
    coll += rs.collective;
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

std::int64_t percentile(std::vector<std::int64_t> v, double q) {
  if (v.empty()) return 0;
  const size_t k = std::min(v.size() - 1, static_cast<size_t>(q * (v.size() - 1) + 0.5));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
  return v[k];
}

}  // namespace rrfp
