#include "sim/check.hpp"

#include <algorithm>
#include <array>

namespace rrfp {

std::vector<std::string> check_run(const WorkModel& m, int tp, const std::vector<TaskRecord>& tasks,
                                   const CheckOptions& opt) {
  std::vector<std::string> bad;
  auto fail = [&](std::string s) {
    if (bad.size() < 20) bad.push_back(std::move(s));
  };
  const int n = m.num_tasks();
  std::vector<const TaskRecord*> at(static_cast<size_t>(tp) * n, nullptr);
  for (const TaskRecord& t : tasks) {
    if (t.rank < 0 || t.rank >= tp || !m.valid(t.task) || m.stage_of(t.task) != t.stage) {
      fail("invalid record " + to_string(t.task) + " on stage " + std::to_string(t.stage));
      continue;
    }
    auto& slot = at[static_cast<size_t>(t.rank) * n + m.index(t.task)];
    if (slot) fail(to_string(t.task) + " ran twice on rank " + std::to_string(t.rank));
    slot = &t;
    if (t.end < t.start || t.compute_end < t.start)
      fail(to_string(t.task) + " ends before it starts");
  }
  Deps d{};
  for (int r = 0; r < tp; ++r)
    for (int i = 0; i < n; ++i) {
      const TaskRecord* t = at[static_cast<size_t>(r) * n + i];
      if (!t) {
        fail(to_string(m.task(i)) + " never ran on rank " + std::to_string(r));
        continue;
      }
      const int k = m.deps(t->task, d);
      for (int j = 0; j < k; ++j) {
        const TaskRecord* dep = at[static_cast<size_t>(r) * n + m.index(d[j].task)];
        if (dep && dep->end > t->start)
          fail(to_string(t->task) + " started at " + std::to_string(t->start) + " before " +
               to_string(d[j].task) + " ended at " + std::to_string(dep->end));
      }
    }
  // Per rank: one task at a time; D and pending W over the execution order.
  std::vector<std::vector<const TaskRecord*>> by_rank(static_cast<size_t>(m.pp()) * tp);
  for (const TaskRecord& t : tasks)
    if (t.rank >= 0 && t.rank < tp && t.stage >= 0 && t.stage < m.pp())
      by_rank[static_cast<size_t>(t.stage) * tp + t.rank].push_back(&t);
  const int d_bound = opt.limit > 0 ? ready_d_bound(opt.limit, m) : 0;
  for (auto& list : by_rank) {
    std::sort(list.begin(), list.end(),
              [](const TaskRecord* a, const TaskRecord* b) { return a->start < b->start; });
    int dd = 0, w = 0;
    for (size_t i = 0; i < list.size(); ++i) {
      const TaskRecord* t = list[i];
      if (i > 0 && list[i - 1]->end > t->start)
        fail("stage " + std::to_string(t->stage) + " ran " + to_string(t->task) + " while " +
             to_string(list[i - 1]->task) + " was still running");
      dd += t->task.kind == Kind::F ? 1 : t->task.kind == Kind::B ? -1 : 0;
      w += t->task.kind == Kind::B && m.split() ? 1 : t->task.kind == Kind::W ? -1 : 0;
      if (opt.policy == Policy::Ready && d_bound > 0 && dd > d_bound)
        fail("stage " + std::to_string(t->stage) + ": D reached " + std::to_string(dd) + " at " +
             to_string(t->task) + ", above its bound " + std::to_string(d_bound));
      if (opt.policy == Policy::Ready && opt.max_pending_w > 0 && w > opt.max_pending_w)
        fail("stage " + std::to_string(t->stage) + ": pending W reached " + std::to_string(w) +
             ", above the cap " + std::to_string(opt.max_pending_w));
    }
  }
  return bad;
}

}  // namespace rrfp
