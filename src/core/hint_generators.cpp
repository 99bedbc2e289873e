// List-hint generators. GPipe, 1F1B, interleaved 1F1B (Megatron-LM's order), looped
// breadth-first, ZB-H1 and ZB-V (the zero-bubble authors' handcrafted orders, as
// torch.distributed.pipelining runs them) are closed-form; ZB-H2 is a unit-time greedy
// schedule under a per-stage activation cap (zb_greedy.cpp).
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

// 1F1B's order on stage s: min(P - 1 - s, M) warm-up forwards, then a forward and a backward
// in turn (`backward(j)` appends microbatch j's), then the backwards left.
template <typename Backward>
void one_f_one_b(std::vector<TaskId>& o, const WorkModel& m, int s, Backward backward) {
  const int mbs = m.microbatches();
  const int warmup = std::min(m.pp() - 1 - s, mbs);
  for (int i = 0; i < warmup; ++i)
    o.push_back({Kind::F, s, i});
  for (int j = 0; j < mbs - warmup; ++j) {
    o.push_back({Kind::F, s, warmup + j});
    backward(j);
  }
  for (int j = mbs - warmup; j < mbs; ++j)
    backward(j);
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
  for (int s = 0; s < m.pp(); ++s) {
    auto& o = h.stages[s];
    one_f_one_b(o, m, s, [&](int j) { push_backward(o, m, s, j); });
  }
  return h;
}

bool interleaved_1f1b_takes(int pp, int microbatches) {
  return microbatches % std::max(1, microbatches / pp) == 0;
}

int interleaved_1f1b_round(int pp, int microbatches) {
  return microbatches / std::max(1, microbatches / pp);
}

ListHint gen_interleaved_1f1b(const WorkModel& m) {
  if (m.vpp() < 2)
    throw InputError("`hint` interleaved-1f1b: needs `vpp` 2 or more (got 1); use 1f1b");
  if (m.config().placement != Placement::Loop)
    throw InputError("`hint` interleaved-1f1b: needs `placement` loop");
  const int p = m.pp(), v = m.vpp(), mbs = m.microbatches();
  if (!interleaved_1f1b_takes(p, mbs)) {
    // The nearest counts it takes on either side (every multiple of P is one): the next
    // multiple of the rounds was often refused too, its own rounds one more (21 at P=4: 25).
    int below = mbs - 1, above = mbs + 1;
    while (!interleaved_1f1b_takes(p, below))
      --below;
    while (!interleaved_1f1b_takes(p, above))
      ++above;
    throw InputError("`microbatches`: interleaved-1f1b runs them in rounds of `pp` (" +
                     std::to_string(p) + ") or more, and " + std::to_string(mbs / p) +
                     " rounds do not divide " + std::to_string(mbs) + ": give " +
                     std::to_string(below) + " or " + std::to_string(above) + ", or use bfs");
  }
  // Microbatches go in rounds of g, each chunk's forwards (and backwards) of a round in a row:
  // g = P where P divides M (Megatron-LM's order), else as torch's ScheduleInterleaved1F1B
  // groups them (one round of M below P; two of 5 for M = 10 at P = 4).
  const int total = mbs * v, g = interleaved_1f1b_round(p, mbs);
  auto mb_of = [&](int k) { return (k / (g * v)) * g + k % g; };
  ListHint h;
  h.stages.resize(p);
  for (int s = 0; s < p; ++s) {
    auto& o = h.stages[s];
    auto fwd = [&](int k) { o.push_back({Kind::F, ((k / g) % v) * p + s, mb_of(k)}); };
    auto bwd = [&](int k) { push_backward(o, m, (v - 1 - (k / g) % v) * p + s, mb_of(k)); };
    // Megatron-LM and torch: 2(P-s-1) + (V-1)g warm-up forwards, at most all of them. (Before
    // late 2024 Megatron ran all of them on every stage when M == P; it and torch now cap the
    // count only at V M, so the stages s >= P/2 alternate there too.)
    const int warmup = std::min((p - s - 1) * 2 + (v - 1) * g, total);
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
  // 1F1B's order of F and B. Stage s lets its first s Bs go without their W, then runs the
  // oldest W left after each B, and the rest at the end: a B's gradient reaches the stage
  // before it one W sooner during the ramp, where 1F1B's bubble is, while at most s W wait
  // on stage s. With F = B = W this idles P - 1 units a stage, a third of 1F1B's.
  ListHint h;
  h.stages.resize(m.pp());
  const int mbs = m.microbatches();
  for (int s = 0; s < m.pp(); ++s) {
    auto& o = h.stages[s];
    int next_w = 0;
    one_f_one_b(o, m, s, [&](int j) {
      o.push_back({Kind::B, s, j});
      if (j >= s) o.push_back({Kind::W, s, next_w++});
    });
    while (next_w < mbs)
      o.push_back({Kind::W, s, next_w++});
  }
  return h;
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

namespace {

// Stage s of ZB-V: chunk s (on the way down) and chunk 2P-1-s (on the way up). The order runs
// as if there were at least 2P - 1 microbatches, then drops the tasks of those there are not.
std::vector<TaskId> zb_v_stage(int p, int mbs, int s) {
  const int n = std::max(2 * p - 1, mbs);
  const int down = s, up = 2 * p - 1 - s;
  std::vector<TaskId> o;
  int f0 = 0, f1 = 0, b0 = 0, b1 = 0;
  auto add = [&](Kind k, int chunk, int& count) { o.push_back({k, chunk, count++}); };
  auto bw = [&](int chunk, int& count) {  // B and its W at once
    o.push_back({Kind::B, chunk, count});
    o.push_back({Kind::W, chunk, count++});
  };
  for (int i = 0; i < 2 * (p - s) - 1; ++i)  // warm-up: chunk 0, then both, then the up chunk's
    add(Kind::F, down, f0);
  for (int i = 0; i < s; ++i) {
    add(Kind::F, up, f1);
    add(Kind::F, down, f0);
  }
  for (int i = 0; i < p - s; ++i) {
    add(Kind::F, up, f1);
    bw(up, b1);
  }
  while (f1 < f0 || f0 < n) {  // steady state: each chunk's F, then a B and W
    if (f0 < n) add(Kind::F, down, f0);
    bw(down, b0);
    add(Kind::F, up, f1);
    bw(up, b1);
  }
  int w0 = b0, w1 = b1;  // cool-down: the Bs first, their Ws behind
  for (int i = 0; i < s; ++i) {
    add(Kind::B, down, b0);
    add(Kind::B, up, b1);
  }
  for (int i = 0; i < p - s; ++i) {
    add(Kind::B, down, b0);
    add(Kind::W, down, w0);
  }
  while (w1 < b1)
    add(Kind::W, up, w1);
  while (w0 < b0)
    add(Kind::W, down, w0);
  std::erase_if(o, [&](const TaskId& t) { return t.mb >= mbs; });
  return o;
}

}  // namespace

ListHint gen_zb_v(const WorkModel& m) {
  if (m.vpp() != 2 || m.config().placement != Placement::VShape)
    throw InputError("`hint` zb-v: needs `vpp` 2 `placement` vshape");
  need_split(m, "zb-v");
  // The zero-bubble paper's V schedule (its section 6) as its authors and torch lay it out:
  // stage 0 holds 2P half-size chunks at most, 1F1B's first stage's activations.
  ListHint h;
  h.stages.resize(m.pp());
  for (int s = 0; s < m.pp(); ++s)
    h.stages[s] = zb_v_stage(m.pp(), m.microbatches(), s);
  return h;
}

}  // namespace rrfp
