#include <array>

#include "core/error.hpp"
#include "core/hint_io.hpp"

namespace rrfp {

std::vector<int> stage_positions(const ListHint& h, const WorkModel& m, int s,
                                 const std::string& origin) {
  // Built only for an error: a planner builds an arbiter from a list thousands of times.
  const auto pre = [&] { return origin.empty() ? std::string() : origin + ": "; };
  if (s >= static_cast<int>(h.stages.size()))
    throw HintError(pre() + "hint has " + std::to_string(h.stages.size()) +
                    " stages, the run has " + std::to_string(m.pp()));
  const auto where = [&] { return pre() + "stage " + std::to_string(s); };
  const auto& order = h.stages[s];
  std::vector<int> pos(m.local_slots(), -1);
  for (int i = 0; i < static_cast<int>(order.size()); ++i) {
    const TaskId& t = order[i];
    if (!m.valid(t))
      throw HintError(where() + ": task " + to_string(t) + " does not exist in this run" +
                      (t.kind == Kind::W && !m.split() ? " (W needs `split_backward`)"
                       : t.mb >= m.microbatches()
                           ? " (microbatches 0-" + std::to_string(m.microbatches() - 1) + ")"
                       : t.chunk >= m.chunks()
                           ? " (chunks 0-" + std::to_string(m.chunks() - 1) + ")"
                           : std::string()));
    if (m.stage_of(t) != s)
      throw HintError(where() + ": task " + to_string(t) + " belongs to stage " +
                      std::to_string(m.stage_of(t)));
    int& p = pos[m.local_index(t)];
    if (p >= 0) throw HintError(where() + ": task " + to_string(t) + " listed twice");
    p = i;
  }
  if (order.size() != pos.size())
    for (const TaskId& t : m.stage_tasks(s))
      if (pos[m.local_index(t)] < 0)
        throw HintError(where() + ": task " + to_string(t) + " is missing");
  return pos;
}

namespace {

// With ordered forwards a chunk's forward waits for its previous microbatch's: a list with
// them otherwise is refused as such, on its stage (it was called a cyclic wait between stages).
void refuse_unordered_forwards(const WorkModel& m, int s, const std::vector<int>& pos,
                               const std::string& where) {
  if (!m.config().ordered_forwards) return;
  for (int lc = 0; lc < m.vpp(); ++lc)
    for (int mb = 1; mb < m.microbatches(); ++mb) {
      const TaskId t{Kind::F, m.chunk_at(s, lc), mb}, before{Kind::F, t.chunk, mb - 1};
      if (pos[m.local_index(t)] < pos[m.local_index(before)])
        throw HintError(where + ": task " + to_string(t) + " comes before " + to_string(before) +
                        ", which it waits for under `ordered_forwards` (each chunk's forwards "
                        "in microbatch order)");
    }
}

}  // namespace

void validate_hint(const ListHint& h, const WorkModel& m, const std::string& origin,
                   const std::vector<int>* stage_lines) {
  const std::string pre = origin.empty() ? "" : origin + ": ";
  if (static_cast<int>(h.stages.size()) != m.pp())
    throw HintError(pre + "hint has " + std::to_string(h.stages.size()) + " stages, the run has " +
                    std::to_string(m.pp()));
  for (int s = 0; s < m.pp(); ++s) {
    // At the stage's line of a text file: its task's error named the stage alone.
    const std::string at = stage_lines ? origin + ":" + std::to_string((*stage_lines)[s]) : origin;
    const std::string where = (at.empty() ? "" : at + ": ") + "stage " + std::to_string(s);
    const std::vector<int> pos = stage_positions(h, m, s, at);
    refuse_unordered_forwards(m, s, pos, where);
    // Local order per microbatch: the stage would wait forever for a task it runs later.
    for (int mb = 0; mb < m.microbatches(); ++mb) {
      int last_pos = -1;
      TaskId last{};
      for (int r = 0; r < 2 * m.vpp(); ++r) {
        const int lc = r < m.vpp() ? r : 2 * m.vpp() - 1 - r;
        TaskId t{r < m.vpp() ? Kind::F : Kind::B, m.chunk_at(s, lc), mb};
        const int p = pos[m.local_index(t)];
        if (p < last_pos)
          throw HintError(where + ": task " + to_string(t) + " comes before " + to_string(last) +
                          ", which it depends on");
        last_pos = p;
        last = t;
        if (m.split() && t.kind == Kind::B) {
          TaskId w{Kind::W, t.chunk, mb};
          if (pos[m.local_index(w)] < p)
            throw HintError(where + ": task " + to_string(w) + " comes before " + to_string(t) +
                            ", which it depends on");
        }
      }
    }
  }
  // Cross-stage cycles: run every stage's order with only dependencies as constraints.
  std::vector<char> done(m.num_tasks(), 0);
  std::vector<int> head(m.pp(), 0);
  Deps d{};
  auto head_ready = [&](int s) {
    if (head[s] >= static_cast<int>(h.stages[s].size())) return false;
    int n = m.deps(h.stages[s][head[s]], d);
    for (int i = 0; i < n; ++i)
      if (!done[m.index(d[i].task)]) return false;
    return true;
  };
  bool progress = true;
  while (progress) {
    progress = false;
    for (int s = 0; s < m.pp(); ++s)
      while (head_ready(s)) {
        done[m.index(h.stages[s][head[s]])] = 1;
        ++head[s];
        progress = true;
      }
  }
  std::string stuck;
  for (int s = 0; s < m.pp(); ++s) {
    if (head[s] >= static_cast<int>(h.stages[s].size())) continue;
    const TaskId& t = h.stages[s][head[s]];
    int n = m.deps(t, d);
    std::string wait;
    for (int i = 0; i < n; ++i)
      if (!done[m.index(d[i].task)])
        wait = to_string(d[i].task);  // never an ordered forward's: refused on its stage above
    stuck += (stuck.empty() ? "" : "; ") + std::string("stage ") + std::to_string(s) +
             " waits at " + to_string(t) + " for " + wait;
    if (stuck.size() > 400) break;
  }
  if (!stuck.empty()) throw HintError(pre + "hint can never finish (cyclic wait): " + stuck);
}

}  // namespace rrfp
