#include "sim/timeline_clocks.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "sim/metrics.hpp"

namespace rrfp {

bool cross_stage_producer(const WorkModel& m, const TaskId& t, TaskId& producer) {
  const std::optional<TaskId> p = data_producer(t);
  if (!p || !m.valid(*p)) return false;
  producer = *p;
  return m.stage_of(producer) != m.stage_of(t);
}

namespace {

// Where no receive bounds stage s+1's offset `d` from stage 0's (stage s on stage 0's clock
// already), its tasks do: a consumer cannot start before its producer ended, so a forward's
// consumer on s+1 bounds d from above and a backward's on s from below. Looser than receives by
// each consumer's wait, alike on both sides where the tightest consumer of each direction sat
// waiting for its input (the middle then holds, as with receives).
void causal_bounds(const WorkModel& m, size_t base, int s, const std::vector<double>& start,
                   const std::vector<double>& end, double& lo, double& hi) {
  for (int stage : {s, s + 1})
    for (const TaskId& c : m.stage_tasks(stage)) {
      TaskId producer;
      if (!cross_stage_producer(m, c, producer)) continue;
      const double made = end[base + m.index(producer)], began = start[base + m.index(c)];
      const int from = m.stage_of(producer);
      if (from == s && stage == s + 1) hi = std::min(hi, began - made);
      if (from == s + 1 && stage == s) lo = std::max(lo, made - began);
    }
}

// Moves (stage s, TP rank r)'s tasks, and the receives they took, by -d on its clock.
void shift_rank(const WorkModel& m, int s, int r, double d, std::vector<double>& start,
                std::vector<double>& end, std::vector<TimelineRecv>& recvs) {
  const size_t n = static_cast<size_t>(m.num_tasks());
  for (const TaskId& t : m.stage_tasks(s)) {
    start[r * n + m.index(t)] -= d;
    end[r * n + m.index(t)] -= d;
  }
  for (TimelineRecv& rv : recvs)
    if (rv.tp_rank == r && m.valid(rv.consumer) && m.stage_of(rv.consumer) == s) {
      rv.start_us -= d;
      rv.end_us -= d;
    }
}

// Each TP rank of stage s put on rank 0's clock. A group's F and B end in their collective, which
// all ranks leave together, so the tasks' ends differ by the clocks' difference alone; the
// median leaves out the tasks that do not (a span that stops short of its collective, a W,
// which runs none in Megatron or PyTorch) while they are fewer than half. Nothing else could:
// the ranks of a group exchange no message the trace shows, and their starts differ by the
// choice's way to the followers (rrfp) or by each rank's own inputs. Unaligned, a rank started
// 3 ms later made a 2 ms step read 5 ms, and the difference was replayed as coordination on
// every task.
void align_tp_ranks(const WorkModel& m, int tp, int s, std::vector<double>& start,
                    std::vector<double>& end, std::vector<TimelineRecv>& recvs) {
  const size_t n = static_cast<size_t>(m.num_tasks());
  for (int r = 1; r < tp; ++r) {
    std::vector<double> lag;
    for (const TaskId& t : m.stage_tasks(s))
      lag.push_back(end[r * n + m.index(t)] - end[m.index(t)]);
    if (lag.empty()) continue;
    const auto mid = lag.begin() + static_cast<std::ptrdiff_t>(lag.size() / 2);
    std::nth_element(lag.begin(), mid, lag.end());
    double d = *mid;
    if (lag.size() % 2 == 0) d = (d + *std::max_element(lag.begin(), mid)) / 2;
    shift_rank(m, s, r, d, start, end, recvs);
  }
}

}  // namespace

void align_clocks(const WorkModel& m, int tp, std::vector<double>& start, std::vector<double>& end,
                  std::vector<TimelineRecv>& recvs) {
  const size_t n = static_cast<size_t>(m.num_tasks());
  align_tp_ranks(m, tp, 0, start, end, recvs);
  for (int s = 0; s + 1 < m.pp(); ++s) {
    // Stage s is on stage 0's clock by now, and stage s+1's TP ranks on its rank 0's: d is
    // stage s+1's clock minus stage 0's, bounded by every rank's messages.
    align_tp_ranks(m, tp, s + 1, start, end, recvs);
    double lo = -std::numeric_limits<double>::infinity(), hi = -lo;
    for (const TimelineRecv& rv : recvs) {
      TaskId producer;
      if (!m.valid(rv.consumer) || !cross_stage_producer(m, rv.consumer, producer)) continue;
      const double made = end[rv.tp_rank * n + m.index(producer)];
      const int from = m.stage_of(producer), to = m.stage_of(rv.consumer);
      if (from == s && to == s + 1) hi = std::min(hi, rv.end_us - made);
      if (from == s + 1 && to == s) lo = std::max(lo, made - rv.end_us);
    }
    if (!std::isfinite(lo) && !std::isfinite(hi))
      for (int r = 0; r < tp; ++r)
        causal_bounds(m, r * n, s, start, end, lo, hi);
    double d = 0;
    if (std::isfinite(lo) && std::isfinite(hi))
      d = (lo + hi) / 2;
    else if (std::isfinite(hi))
      d = hi;
    else if (std::isfinite(lo))
      d = lo;
    for (int r = 0; r < tp; ++r)
      shift_rank(m, s + 1, r, d, start, end, recvs);
  }
}

EarlyInputs early_inputs(const WorkModel& m, int tp, const std::vector<double>& start,
                         const std::vector<double>& end, double slack_us) {
  const size_t n = static_cast<size_t>(m.num_tasks());
  EarlyInputs out;
  for (int rank = 0; rank < tp; ++rank)
    for (int i = 0; i < m.num_tasks(); ++i) {
      TaskId producer;
      if (!cross_stage_producer(m, m.task(i), producer)) continue;
      const double lead = end[rank * n + m.index(producer)] - start[rank * n + i];
      if (lead > slack_us) {
        ++out.count;
        out.worst_us = std::max(out.worst_us, lead);
      }
    }
  return out;
}

int infer_latencies(const WorkModel& m, int tp, const std::vector<double>& start,
                    const std::vector<double>& end, const std::vector<char>& measured,
                    RealizedWork& r) {
  const size_t n = static_cast<size_t>(m.num_tasks());
  std::vector<std::int64_t> seen;
  std::vector<char> done(measured);
  for (int rank = 0; rank < tp; ++rank)
    for (int s = 0; s < m.pp(); ++s) {
      std::vector<TaskId> order = m.stage_tasks(s);
      std::stable_sort(order.begin(), order.end(), [&](const TaskId& a, const TaskId& b) {
        return start[rank * n + m.index(a)] < start[rank * n + m.index(b)];
      });
      double free_at = -std::numeric_limits<double>::infinity();
      for (const TaskId& c : order) {
        const double began = start[rank * n + m.index(c)];
        TaskId producer;
        if (cross_stage_producer(m, c, producer)) {
          const size_t at = rank * n + m.index(producer);
          if (!done[at] && end[at] >= free_at && began >= end[at]) {
            r.message_ns[at] = static_cast<std::int64_t>((began - end[at]) * 1e3 + 0.5);
            seen.push_back(r.message_ns[at]);
            done[at] = 1;
          }
        }
        free_at = end[rank * n + m.index(c)];
      }
    }
  const int count = static_cast<int>(seen.size());
  const std::int64_t median = percentile(std::move(seen), 0.5);
  for (int rank = 0; rank < tp; ++rank)
    for (int i = 0; i < m.num_tasks(); ++i) {
      TaskId producer;
      if (cross_stage_producer(m, m.task(i), producer) && !done[rank * n + m.index(producer)])
        r.message_ns[rank * n + m.index(producer)] = median;
    }
  return count;
}

}  // namespace rrfp
