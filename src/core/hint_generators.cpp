// List-hint generators. GPipe, 1F1B, interleaved 1F1B (Megatron-LM's order) and looped
// breadth-first are closed-form; the zero-bubble family is produced the way its authors
// produce it: a unit-time greedy schedule under a per-stage activation cap (zb_greedy.cpp).
#include <algorithm>

#include "core/error.hpp"
#include "core/hint.hpp"
#include "core/zb_greedy.hpp"

namespace rrfp {

namespace {

void need_v1(const WorkModel& m, const char* name) {
  if (m.vpp() != 1)
    throw InputError(std::string("`hint` ") + name +
                     ": not an interleaved hint, needs `vpp` 1 (got " + std::to_string(m.vpp()) +
                     "); use interleaved-1f1b, bfs, zb-v or a rule hint");
}

void need_split(const WorkModel& m, const char* name) {
  if (!m.split()) throw InputError(std::string("`hint` ") + name + ": needs `split_backward` on");
}

// Appends B (and, when split, its W right away: the unsplit order of a split model).
void push_backward(std::vector<TaskId>& out, const WorkModel& m, int chunk, int mb) {
  out.push_back({Kind::B, chunk, mb});
  if (m.split()) out.push_back({Kind::W, chunk, mb});
}

}  // namespace

ListHint gen_gpipe(const WorkModel& m) {
  need_v1(m, "gpipe");
  ListHint h;
  h.stages.resize(m.pp());
  for (int s = 0; s < m.pp(); ++s) {
    auto& o = h.stages[s];
    for (int mb = 0; mb < m.microbatches(); ++mb)
      o.push_back({Kind::F, s, mb});
    for (int mb = 0; mb < m.microbatches(); ++mb)
      push_backward(o, m, s, mb);
  }
  return h;
}

ListHint gen_1f1b(const WorkModel& m) {
  need_v1(m, "1f1b");
  ListHint h;
  h.stages.resize(m.pp());
  const int mbs = m.microbatches();
  for (int s = 0; s < m.pp(); ++s) {
    auto& o = h.stages[s];
    const int warmup = std::min(m.pp() - 1 - s, mbs);
    for (int i = 0; i < warmup; ++i)
      o.push_back({Kind::F, s, i});
    for (int j = 0; j < mbs - warmup; ++j) {
      o.push_back({Kind::F, s, warmup + j});
      push_backward(o, m, s, j);
    }
    for (int j = mbs - warmup; j < mbs; ++j)
      push_backward(o, m, s, j);
  }
  return h;
}

ListHint gen_interleaved_1f1b(const WorkModel& m) {
  if (m.vpp() < 2)
    throw InputError("`hint` interleaved-1f1b: needs `vpp` 2 or more (got 1); use 1f1b");
  if (m.config().placement != Placement::Loop)
    throw InputError("`hint` interleaved-1f1b: needs `placement` loop");
  const int p = m.pp(), v = m.vpp(), mbs = m.microbatches();
  if (mbs % p != 0)
    throw InputError("`microbatches`: interleaved-1f1b needs a multiple of `pp` (" +
                     std::to_string(p) + "), got " + std::to_string(mbs));
  const int total = mbs * v;
  auto mb_of = [&](int k) { return (k / (p * v)) * p + k % p; };
  ListHint h;
  h.stages.resize(p);
  for (int s = 0; s < p; ++s) {
    auto& o = h.stages[s];
    auto fwd = [&](int k) { o.push_back({Kind::F, ((k / p) % v) * p + s, mb_of(k)}); };
    auto bwd = [&](int k) { push_backward(o, m, (v - 1 - (k / p) % v) * p + s, mb_of(k)); };
    // Megatron-LM: all-warmup when M == P, otherwise 2(P-s-1) + (V-1)P warm-up forwards.
    const int warmup = mbs == p ? total : std::min((p - s - 1) * 2 + (v - 1) * p, total);
    for (int k = 0; k < warmup; ++k)
      fwd(k);
    for (int k = 0; k < total - warmup; ++k) {
      fwd(warmup + k);
      bwd(k);
    }
    for (int k = total - warmup; k < total; ++k)
      bwd(k);
  }
  return h;
}

ListHint gen_looped_bfs(const WorkModel& m) {
  if (m.vpp() < 2) throw InputError("`hint` bfs: needs `vpp` 2 or more (got 1); use gpipe");
  ListHint h;
  h.stages.resize(m.pp());
  for (int s = 0; s < m.pp(); ++s) {
    auto& o = h.stages[s];
    for (int c : m.chunks_of(s))
      for (int mb = 0; mb < m.microbatches(); ++mb)
        o.push_back({Kind::F, c, mb});
    const auto& cs = m.chunks_of(s);
    for (auto it = cs.rbegin(); it != cs.rend(); ++it)
      for (int mb = 0; mb < m.microbatches(); ++mb)
        push_backward(o, m, *it, mb);
  }
  return h;
}

ListHint gen_zb_h1(const WorkModel& m) {
  need_v1(m, "zb-h1");
  need_split(m, "zb-h1");
  // 1F1B's activation peak (P - s in flight): the schedule only moves W into bubbles.
  std::vector<int> cap(m.pp());
  for (int s = 0; s < m.pp(); ++s)
    cap[s] = m.pp() - s;
  return zb_greedy(m, cap);
}

ListHint gen_zb_h2(const WorkModel& m) {
  need_v1(m, "zb-h2");
  need_split(m, "zb-h2");
  // Twice 1F1B's warm-up so the warm-up bubble fills with extra forwards.
  std::vector<int> cap(m.pp());
  for (int s = 0; s < m.pp(); ++s)
    cap[s] = 2 * (m.pp() - s) - 1;
  return zb_greedy(m, cap);
}

ListHint gen_zb_v(const WorkModel& m) {
  if (m.vpp() != 2 || m.config().placement != Placement::VShape)
    throw InputError("`hint` zb-v: needs `vpp` 2 `placement` vshape");
  need_split(m, "zb-v");
  // 1F1B's peak activation memory on every stage: P microbatches in flight, each holding two
  // half-size chunks.
  return zb_greedy(m, std::vector<int>(m.pp(), m.pp()));
}

}  // namespace rrfp
