#include "plan/graph.hpp"

#include <algorithm>
#include <array>

namespace rrfp {

TaskGraph make_graph(const WorkModel& m, const RealizedWork& w) {
  TaskGraph g;
  g.n = m.num_tasks();
  g.stage.resize(g.n);
  g.dur.assign(g.n, 0);
  g.lag.assign(g.n, 0);
  g.deps.assign(g.n, {-1, -1});
  g.dep_remote.assign(g.n, {false, false});
  for (int i = 0; i < g.n; ++i) {
    const TaskId t = m.task(i);
    g.stage[i] = m.stage_of(t);
    for (int r = 0; r < w.tp; ++r)
      g.dur[i] = std::max(g.dur[i], w.compute(r, i));
    g.dur[i] += w.collective_after(t.kind);
    g.lag[i] = w.message(0, i);
    Deps d{};
    const int k = m.deps(t, d);
    for (int j = 0; j < k; ++j) {
      g.deps[i][j] = m.index(d[j].task);
      g.dep_remote[i][j] = d[j].cross_stage;
    }
  }
  // F by increasing chunk, then B by decreasing chunk, then W: every dependency comes first.
  const int chunks = m.chunks(), mbs = m.microbatches();
  auto add = [&](Kind k, int c) {
    for (int mb = 0; mb < mbs; ++mb)
      g.topo.push_back(m.index(TaskId{k, c, mb}));
  };
  for (int c = 0; c < chunks; ++c)
    add(Kind::F, c);
  for (int c = chunks - 1; c >= 0; --c)
    add(Kind::B, c);
  if (m.split())
    for (int c = 0; c < chunks; ++c)
      add(Kind::W, c);
  g.tail.assign(g.n, 0);
  for (auto it = g.topo.rbegin(); it != g.topo.rend(); ++it) {
    const int j = *it;
    for (int k = 0; k < 2; ++k) {
      const int d = g.deps[j][k];
      if (d < 0) continue;
      const std::int64_t via = (g.dep_remote[j][k] ? g.lag[d] : 0) + g.dur[j] + g.tail[j];
      g.tail[d] = std::max(g.tail[d], via);
    }
  }
  return g;
}

}  // namespace rrfp
