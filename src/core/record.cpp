#include "core/record.hpp"

#include <algorithm>
#include <map>
#include <tuple>

namespace rrfp {

void send_times_from_arrivals(StepRecord& r) {
  using Key = std::tuple<int, int, int, int>;  // kind, chunk, microbatch, tp rank
  std::map<Key, TaskRecord*> by_task;
  // When each task's rank was last busy before it: the end of the task before it there.
  std::map<std::pair<int, int>, std::vector<const TaskRecord*>> by_rank;
  for (TaskRecord& t : r.tasks) {
    by_task[{static_cast<int>(t.task.kind), t.task.chunk, t.task.mb, t.rank}] = &t;
    by_rank[{t.stage, t.rank}].push_back(&t);
  }
  std::map<const TaskRecord*, std::int64_t> free_since;
  for (auto& [where, tasks] : by_rank) {
    std::sort(tasks.begin(), tasks.end(), [](auto* a, auto* b) { return a->start < b->start; });
    std::int64_t prev_end = 0;
    for (const TaskRecord* t : tasks) {
      free_since[t] = prev_end;
      prev_end = t->end;
    }
  }
  for (const TaskRecord& c : r.tasks) {
    if (c.input_at < 0 || c.task.kind == Kind::W) continue;
    const int chunk = c.task.kind == Kind::F ? c.task.chunk - 1 : c.task.chunk + 1;
    const auto it = by_task.find({static_cast<int>(c.task.kind), chunk, c.task.mb, c.rank});
    if (it == by_task.end()) continue;  // its producer ran in a process not merged yet
    TaskRecord& p = *it->second;
    // A rank that was idle when the input came was waiting for it: its start, not the
    // arrival, is when the input let it run (waking the thread, dispatching), which the
    // simulator has no other place for.
    const std::int64_t until = free_since[&c] <= c.input_at ? c.start : c.input_at;
    p.send_ns = std::max<std::int64_t>(0, until - p.end);
  }
}

}  // namespace rrfp
