#include "core/zb_greedy.hpp"

#include <algorithm>
#include <array>
#include <optional>
#include <set>

#include "core/error.hpp"

namespace rrfp {

namespace {

// Each (kind, chunk)'s ready tasks not yet taken, by microbatch: the least at hand. A scan of
// every microbatch from 0 at every tick made the generator O(P M^2): 46 s at M = 40,000 (a
// sweep's zb-h1 baseline ran for minutes, where every other hint took under half a second).
class ReadySets {
 public:
  explicit ReadySets(const WorkModel& m) : sets_(kNumKinds * static_cast<size_t>(m.chunks())) {}
  void add(const TaskId& t) { at(t.kind, t.chunk).insert(t.mb); }
  void take(const TaskId& t) { at(t.kind, t.chunk).erase(t.mb); }
  // The least ready microbatch of (k, chunk), or -1.
  int least(Kind k, int chunk) {
    const std::set<int>& s = at(k, chunk);
    return s.empty() ? -1 : *s.begin();
  }

 private:
  std::set<int>& at(Kind k, int chunk) {
    return sets_[static_cast<size_t>(chunk) * kNumKinds + static_cast<size_t>(k)];
  }
  std::vector<std::set<int>> sets_;
};

}  // namespace

ListHint zb_greedy(const WorkModel& m, const std::vector<int>& cap) {
  const int p = m.pp();
  std::vector<int> missing(m.num_tasks());  // unfinished inputs per task
  ReadySets ready(m);
  Deps d{};
  for (int i = 0; i < m.num_tasks(); ++i) {
    const TaskId t = m.task(i);
    missing[i] = m.deps(t, d);
    if (missing[i] == 0) ready.add(t);
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
      if (const int mb = ready.least(Kind::B, *it); mb >= 0) return TaskId{Kind::B, *it, mb};
    // F: latest chunk first (finishes admitted microbatches), admission bounded by the cap.
    for (auto it = chunks.rbegin(); it != chunks.rend(); ++it)
      if (const int mb = ready.least(Kind::F, *it); mb >= 0) {
        if (*it == first_chunk && in_flight[s] >= cap[s]) break;
        return TaskId{Kind::F, *it, mb};
      }
    if (m.split())
      for (int c : chunks)
        if (const int mb = ready.least(Kind::W, c); mb >= 0) return TaskId{Kind::W, c, mb};
    return std::nullopt;
  };

  std::vector<TaskId> running;
  while (remaining > 0) {
    running.clear();
    for (int s = 0; s < p; ++s) {
      auto t = pick(s);
      if (!t) continue;
      ready.take(*t);  // claimed this tick; its outputs land at the tick's end
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
        if (--missing[m.index(d[i].task)] == 0) ready.add(d[i].task);
    }
  }
  return h;
}

}  // namespace rrfp
