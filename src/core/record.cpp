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
  // When each task's rank became free before it: the end of the task it ran before.
  std::vector<std::int64_t> free_since(r.tasks.size(), 0);
  for (auto& [where, tasks] : by_rank) {
    std::sort(tasks.begin(), tasks.end(),
              [&](std::size_t a, std::size_t b) { return r.tasks[a].start < r.tasks[b].start; });
    for (std::size_t k = 1; k < tasks.size(); ++k)
      free_since[tasks[k]] = r.tasks[tasks[k - 1]].end;
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
