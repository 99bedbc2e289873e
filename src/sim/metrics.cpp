#include "sim/metrics.hpp"

#include <algorithm>
#include <array>
#include <limits>
#include <string>

#include "core/error.hpp"
#include "sim/parallel.hpp"

namespace rrfp {

namespace {

// What the bound reads of a task: its group's time (the slowest rank plus the collective, which
// a W has none of) and its message's (the fastest rank's), read where they lie rather than
// copied per task: the copies were most of the bound's memory.
struct Costs {
  const RealizedWork& w;
  int first_w;  // W's indices come last (WorkModel::index is kind-major)
  std::int64_t dur(int i) const {
    std::int64_t d = 0;
    for (int r = 0; r < w.tp; ++r)
      d = std::max(d, w.compute(r, i));
    return d + (i < first_w ? w.collective_ns : 0);
  }
  std::int64_t lat(int i) const {
    std::int64_t l = std::numeric_limits<std::int64_t>::max();
    for (int r = 0; r < w.tp; ++r)
      l = std::min(l, w.message(r, i));
    return l;
  }
};

// A microbatch's tasks as rows in a topological order (F by chunk ascending, B by chunk
// descending, then W). A task depends only on tasks of its own microbatch, so the bound walks a
// few microbatches at a time with scratch for their rows alone: an array over every task was a
// quarter of the simulator's peak memory.
class Rows {
 public:
  explicit Rows(const WorkModel& m) : c_(m.chunks()) {
    for (int ch = 0; ch < c_; ++ch)
      rows_.emplace_back(Kind::F, ch);
    for (int ch = c_ - 1; ch >= 0; --ch)
      rows_.emplace_back(Kind::B, ch);
    if (m.split())
      for (int ch = 0; ch < c_; ++ch)
        rows_.emplace_back(Kind::W, ch);
    for (const auto& [kind, ch] : rows_)
      first_.push_back(m.index({kind, ch, 0}));  // a row's microbatches are consecutive
  }
  int size() const { return static_cast<int>(rows_.size()); }
  TaskId task(int row, int mb) const { return {rows_[row].first, rows_[row].second, mb}; }
  int index(int row, int mb) const { return first_[row] + mb; }
  int row_of(const TaskId& t) const {
    return t.kind == Kind::F   ? t.chunk
           : t.kind == Kind::B ? 2 * c_ - 1 - t.chunk
                               : 2 * c_ + t.chunk;
  }

 private:
  int c_;
  std::vector<std::pair<Kind, int>> rows_;
  std::vector<int> first_;
};

// What a range of microbatches adds to the bound, per stage: the earliest start (of any task,
// of an F), the least tail after a task (of any, of a B), the summed work and (c)'s summed
// intervals; and the longest chain. Microbatches share no dependency, so ranges of them are
// bounded on threads of their own and merged: min, max and integer sums, the same in any order.
struct Partial {
  static constexpr std::int64_t kInf = std::numeric_limits<std::int64_t>::max();
  explicit Partial(int p)
      : lead(p, kInf), lead_f(p, kInf), tl(p, kInf), tail_b(p, kInf), work(p, 0), span(p, 0) {}
  std::vector<std::int64_t> lead, lead_f, tl, tail_b, work, span;
  std::int64_t critical_path = 0;

  void merge(const Partial& o) {
    for (std::size_t s = 0; s < lead.size(); ++s) {
      lead[s] = std::min(lead[s], o.lead[s]);
      lead_f[s] = std::min(lead_f[s], o.lead_f[s]);
      tl[s] = std::min(tl[s], o.tl[s]);
      tail_b[s] = std::min(tail_b[s], o.tail_b[s]);
      work[s] += o.work[s];
      span[s] += o.span[s];
    }
    critical_path = std::max(critical_path, o.critical_path);
  }
};

constexpr int kBlock = 8;  // microbatches walked together: a row's lie side by side in memory

// (a) and (b) for microbatches [mb0, mb0 + width): each row's earliest start, then the least
// time after it.
void bound_block(const WorkModel& m, const Costs& k, const Rows& rows, int mb0, int width,
                 std::vector<std::array<std::int64_t, kBlock>>& at, Partial& out) {
  const int n = rows.size();
  Deps d{};
  for (auto& a : at)
    a.fill(0);
  for (int row = 0; row < n; ++row)
    for (int b = 0; b < width; ++b) {
      const TaskId t = rows.task(row, mb0 + b);
      const int nd = m.deps(t, d);
      std::int64_t& start = at[row][b];
      for (int j = 0; j < nd; ++j) {
        if (d[j].order) continue;  // another microbatch's: left out, the bound only loosens
        const int di = m.index(d[j].task);
        start = std::max(
            start, at[rows.row_of(d[j].task)][b] + k.dur(di) + (d[j].cross_stage ? k.lat(di) : 0));
      }
      const std::int64_t dur = k.dur(rows.index(row, mb0 + b));
      out.critical_path = std::max(out.critical_path, start + dur);
      const int s = m.stage_of(t);
      out.lead[s] = std::min(out.lead[s], start);
      if (t.kind == Kind::F) out.lead_f[s] = std::min(out.lead_f[s], start);
      out.work[s] += dur;
    }
  for (auto& a : at)
    a.fill(0);
  for (int row = n - 1; row >= 0; --row)
    for (int b = 0; b < width; ++b) {
      const TaskId t = rows.task(row, mb0 + b);
      const int i = rows.index(row, mb0 + b);
      const int nc = m.consumers(t, d);
      std::int64_t& after = at[row][b];
      for (int j = 0; j < nc; ++j) {
        if (d[j].order) continue;
        const int ci = m.index(d[j].task);
        after = std::max(
            after, (d[j].cross_stage ? k.lat(i) : 0) + k.dur(ci) + at[rows.row_of(d[j].task)][b]);
      }
      const int s = m.stage_of(t);
      out.tl[s] = std::min(out.tl[s], after);
      if (t.kind == Kind::B) out.tail_b[s] = std::min(out.tail_b[s], after);
    }
}

// (c): a stage runs one task at a time and starts an F only while fewer than L of its
// microbatch-chunks have ended their F but not their B, so the intervals [F(c,mb) starts,
// B(c,mb) ends] of its microbatch-chunks overlap at most L deep. Each is at least F(c,mb) plus
// the round trip after it, F(c+1..C-1, mb) then B(C-1..c, mb) with the messages between
// stages; all lie between the stage's earliest F start (`lead_f`) and the latest end its B
// tasks leave room for (`tail_b`). So makespan >= lead + sum of the intervals / L + tail.
// Here: microbatch mb's intervals, added to `span`.
void add_intervals(const WorkModel& m, const Costs& k, int mb, std::vector<std::int64_t>& span) {
  const int c = m.chunks();
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
    span[m.stage_of(ch)] += k.dur(f) + after;
  }
}

// Sums of per-rank times, wide enough for any number of ranks: each rank's time fits int64
// (check_total bounds a step), but 1024 TP ranks of 9.2e18 ns each passed 2^63 and a stage read
// busy -8.8e18 ns, bubble 195.8%. Divided as int64's division of the same sum would be, so that
// every mean that did not overflow is the same to the nanosecond.
__extension__ using WideSum = __int128;

std::int64_t mean_of(WideSum sum, std::int64_t n) {
  return static_cast<std::int64_t>(sum / n);
}

}  // namespace

LowerBound lower_bound(const WorkModel& m, const RealizedWork& w, int limit, int threads) {
  const Costs k{w, m.index({Kind::W, 0, 0})};
  const int p = m.pp(), mbs = m.microbatches(), blocks = (mbs + kBlock - 1) / kBlock;
  const Rows rows(m);
  const int grain = std::max(1, kMinTasksPerThread / (kBlock * rows.size()));  // in blocks
  int parts = parallel_parts(blocks, grain);
  if (threads > 0) parts = std::min(parts, threads);
  std::vector<Partial> part(parts, Partial(p));
  parallel_ranges(blocks, parts, [&](int k_part, int begin, int end) {
    std::vector<std::array<std::int64_t, kBlock>> at(rows.size());
    for (int blk = begin; blk < end; ++blk) {
      const int mb0 = blk * kBlock, width = std::min(kBlock, mbs - mb0);
      bound_block(m, k, rows, mb0, width, at, part[k_part]);
      if (limit > 0)
        for (int mb = mb0; mb < mb0 + width; ++mb)
          add_intervals(m, k, mb, part[k_part].span);
    }
  });
  for (int i = 1; i < parts; ++i)
    part[0].merge(part[i]);
  const Partial& all = part[0];
  LowerBound lb;
  lb.critical_path = all.critical_path;
  for (int s = 0; s < p; ++s) {
    const std::int64_t b = all.lead[s] + all.work[s] + all.tl[s];
    if (b > lb.stage_bound) {
      lb.stage_bound = b;
      lb.stage = s;
    }
    if (limit > 0) {
      const std::int64_t mem = all.lead_f[s] + all.span[s] / limit + all.tail_b[s];
      if (mem > lb.memory) {
        lb.memory = mem;
        lb.memory_stage = s;
      }
    }
  }
  lb.value = std::max(lb.stage_bound, lb.critical_path);
  return lb;
}

RunMetrics compute_metrics(const StepRecord& r, const LowerBound& lb) {
  // Read by stage and rank below: a record put together by its caller with fewer read past the
  // end of its vectors.
  const auto ranks = static_cast<long long>(r.pp) * r.tp;
  const auto per_stage = [&](std::size_t n, const char* name) {
    if (n != 0 && n != static_cast<std::size_t>(r.pp))
      throw InputError("step record: `" + std::string(name) + "` holds " + std::to_string(n) +
                       " entries, not `pp` " + std::to_string(r.pp) + " (or none)");
  };
  if (r.pp < 0 || r.tp < 1 || static_cast<long long>(r.ranks.size()) != ranks)
    throw InputError("step record: `ranks` holds " + std::to_string(r.ranks.size()) +
                     " entries, not `pp` " + std::to_string(r.pp) + " x `tp` " +
                     std::to_string(r.tp));
  per_stage(r.peak_d.size(), "peak_d");
  per_stage(r.peak_pending_w.size(), "peak_pending_w");
  RunMetrics out;
  out.makespan = r.makespan;
  out.bound = lb;
  out.limit = r.arbiter.limit;
  out.max_pending_w = r.arbiter.max_pending_w;
  out.coordination_rounds = r.coordination_rounds;
  out.failed_rounds = r.failed_rounds;
  WideSum coord = 0, coll = 0;
  for (const RankStats& rs : r.ranks) {
    coord += rs.coordination;
    coll += rs.collective;
  }
  if (!r.ranks.empty()) {
    out.coordination_per_rank = mean_of(coord, static_cast<std::int64_t>(r.ranks.size()));
    out.collective_per_rank = mean_of(coll, static_cast<std::int64_t>(r.ranks.size()));
  }
  out.stages.resize(r.pp);
  double busy_total = 0;
  for (int s = 0; s < r.pp; ++s) {
    StageMetrics& st = out.stages[s];
    WideSum busy = 0, blocked = 0;
    for (int k = 0; k < r.tp; ++k) {
      const RankStats& rs = r.ranks[static_cast<size_t>(s) * r.tp + k];
      busy += rs.busy;
      blocked += rs.blocked;
    }
    st.busy = mean_of(busy, r.tp);
    st.blocked = mean_of(blocked, r.tp);
    st.idle = std::max<std::int64_t>(0, r.makespan - st.busy - st.blocked);
    st.peak_d = r.peak_d.empty() ? 0 : r.peak_d[s];
    st.peak_pending_w = r.peak_pending_w.empty() ? 0 : r.peak_pending_w[s];
    busy_total += static_cast<double>(st.busy);
  }
  if (r.makespan > 0) {
    out.bubble_ratio = 1.0 - busy_total / (static_cast<double>(r.pp) * r.makespan);
    out.efficiency = static_cast<double>(lb.value) / r.makespan;
  } else {
    out.efficiency = 1;  // a step of no time meets its bound of no time (it read 0.000)
  }
  return out;
}

RealizedWork measured_work(const WorkModel& m, const StepRecord& r) {
  RealizedWork w;
  w.num_tasks = m.num_tasks();
  w.compute_ns.assign(w.num_tasks, 0);
  w.message_ns.assign(w.num_tasks, 0);
  w.message_bytes.assign(w.num_tasks, 0);
  for (const TaskRecord& t : r.tasks) {
    // A record of another configuration (a W task where this model has none, a chunk or
    // microbatch past its counts) would index past the vectors: refused, never written.
    if (!m.valid(t.task))
      throw Error("internal: measured step: task " + to_string(t.task) +
                  " is not a task of the model (" + std::to_string(m.chunks()) + " chunks, " +
                  std::to_string(m.microbatches()) + " microbatches, split backward " +
                  (m.split() ? "on" : "off") + ")");
    w.compute_ns[m.index(t.task)] = t.compute_end - t.start;
  }
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

double median(std::vector<std::int64_t> v) {
  if (v.empty()) return 0;
  const std::size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid), v.end());
  double m = static_cast<double>(v[mid]);
  if (v.size() % 2 == 0)
    m = (m + static_cast<double>(*std::max_element(v.begin(), v.begin() + mid))) / 2;
  return m;
}

std::int64_t percentile(std::vector<std::int64_t> v, double q) {
  if (v.empty()) return 0;
  const size_t k = std::min(v.size() - 1, static_cast<size_t>(q * (v.size() - 1) + 0.5));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
  return v[k];
}

}  // namespace rrfp
