#include "core/record.hpp"

#include <algorithm>
#include <map>
#include <tuple>

namespace rrfp {

void send_times_from_arrivals(StepRecord& r) {
  using Key = std::tuple<int, int, int, int>;  // kind, chunk, microbatch, tp rank
  std::map<Key, std::size_t> by_task;
  std::map<std::pair<int, int>, std::vector<std::size_t>> by_rank;  // (stage, tp rank)
  for (std::size_t i = 0; i < r.tasks.size(); ++i) {
    const TaskRecord& t = r.tasks[i];
    by_task[{static_cast<int>(t.task.kind), t.task.chunk, t.task.mb, t.rank}] = i;
    by_rank[{t.stage, t.rank}].push_back(i);
  }
  // Each rank's rendezvous waits (blocked sending its output until the receiver took it).
  std::map<std::pair<int, int>, std::vector<std::pair<std::int64_t, std::int64_t>>> sends;
  for (const BlockedSpan& b : r.blocked)
    if (b.reason == BlockReason::Send) sends[{b.stage, b.rank}].emplace_back(b.start, b.end);
  // When each task's rank became free before it: the end of the task it ran before, or of the
  // send it was blocked in after that task, if later. An input that came during such a send
  // found the rank busy, not idle waiting for it: taken as idle, its message was stretched to
  // the consumer's start and the send's wait counted twice (measured interleaved blocking
  // steps replayed +3% long).
  std::vector<std::int64_t> free_since(r.tasks.size(), 0);
  for (auto& [where, tasks] : by_rank) {
    std::sort(tasks.begin(), tasks.end(),
              [&](std::size_t a, std::size_t b) { return r.tasks[a].start < r.tasks[b].start; });
    auto& spans = sends[where];  // (start, end), none where the rank never blocked sending
    std::sort(spans.begin(), spans.end());
    std::size_t s = 0;  // the first span that starts after the previous task's start
    for (std::size_t k = 1; k < tasks.size(); ++k) {
      const TaskRecord &before = r.tasks[tasks[k - 1]], &at = r.tasks[tasks[k]];
      std::int64_t free = before.end;
      while (s < spans.size() && spans[s].first < before.start)
        ++s;
      for (std::size_t j = s; j < spans.size() && spans[j].first < at.start; ++j)
        if (spans[j].second <= at.start) free = std::max(free, spans[j].second);
      free_since[tasks[k]] = free;
    }
  }
  for (std::size_t i = 0; i < r.tasks.size(); ++i) {
    const TaskRecord& c = r.tasks[i];
    const std::optional<TaskId> from = data_producer(c.task);
    if (c.input_at < 0 || !from) continue;
    const auto it = by_task.find({static_cast<int>(from->kind), from->chunk, from->mb, c.rank});
    if (it == by_task.end()) continue;  // its producer ran in a process not merged yet
    TaskRecord& p = r.tasks[it->second];
    // A rank that was idle when the input came was waiting for it: its start, not the
    // arrival, is when the input let it run (waking the thread, dispatching), which the
    // simulator has no other place for.
    const std::int64_t until = free_since[i] <= c.input_at ? c.start : c.input_at;
    // Blocking: the offer's wait for the receiver to accept is the rendezvous's, which a replay
    // adds itself (counted here too, measured blocking steps replayed 11-23% long).
    p.send_ns = std::max<std::int64_t>(0, until - p.end - c.offer_wait);
  }
}

void cut_waits_at_end(StepRecord& r) {
  std::erase_if(r.blocked, [&r](BlockedSpan& b) {
    if (b.end <= r.makespan) return false;
    const std::int64_t end = std::max(b.start, r.makespan);
    const size_t at = static_cast<size_t>(b.stage) * r.tp + b.rank;
    if (at < r.ranks.size()) r.ranks[at].add_blocked(b.reason, end - b.end);
    b.end = end;
    return b.end <= b.start;
  });
}

}  // namespace rrfp
