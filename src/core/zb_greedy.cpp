#include "core/zb_greedy.hpp"

#include <algorithm>
#include <array>
#include <optional>

#include "core/error.hpp"

namespace rrfp {

ListHint zb_greedy(const WorkModel& m, const std::vector<int>& cap) {
  const int p = m.pp();
  std::vector<int> missing(m.num_tasks());  // unfinished inputs per task
  std::vector<char> ready(m.num_tasks(), 0), done(m.num_tasks(), 0);
  Deps d{};
  for (int i = 0; i < m.num_tasks(); ++i) {
    TaskId t = m.task(i);
    missing[i] = m.deps(t, d);
    if (missing[i] == 0) ready[i] = 1;
  }
  std::vector<int> in_flight(p, 0);
  ListHint h;
  h.stages.resize(p);
  int remaining = m.num_tasks();

  auto pick = [&](int s) -> std::optional<TaskId> {
    const auto& chunks = m.chunks_of(s);
    const int first_chunk = chunks.front();
    // B: latest chunk first, then smallest microbatch.
    for (auto it = chunks.rbegin(); it != chunks.rend(); ++it)
      for (int mb = 0; mb < m.microbatches(); ++mb)
        if (TaskId t{Kind::B, *it, mb}; ready[m.index(t)] && !done[m.index(t)]) return t;
    // F: latest chunk first (finishes admitted microbatches), admission bounded by the cap.
    for (auto it = chunks.rbegin(); it != chunks.rend(); ++it)
      for (int mb = 0; mb < m.microbatches(); ++mb)
        if (TaskId t{Kind::F, *it, mb}; ready[m.index(t)] && !done[m.index(t)]) {
          if (*it == first_chunk && in_flight[s] >= cap[s]) break;
          return t;
        }
    if (m.split())
      for (int c : chunks)
        for (int mb = 0; mb < m.microbatches(); ++mb)
          if (TaskId t{Kind::W, c, mb}; ready[m.index(t)] && !done[m.index(t)]) return t;
    return std::nullopt;
  };

  std::vector<TaskId> running;
  while (remaining > 0) {
    running.clear();
    for (int s = 0; s < p; ++s) {
      auto t = pick(s);
      if (!t) continue;
      done[m.index(*t)] = 1;  // claimed this tick; its outputs land at the tick's end
      running.push_back(*t);
      h.stages[s].push_back(*t);
      if (t->chunk == m.chunks_of(s).front())
        in_flight[s] += t->kind == Kind::F ? 1 : t->kind == Kind::B ? -1 : 0;
    }
    if (running.empty()) throw HintError("zero-bubble generator stalled (internal error)");
    remaining -= static_cast<int>(running.size());
    for (const TaskId& t : running) {
      int n = m.consumers(t, d);
      for (int i = 0; i < n; ++i)
        if (--missing[m.index(d[i].task)] == 0) ready[m.index(d[i].task)] = 1;
    }
  }
  return h;
}

}  // namespace rrfp
