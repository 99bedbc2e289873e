#include "core/arbiter.hpp"

#include <algorithm>
#include <bit>

#include "core/error.hpp"
#include "core/hint_io.hpp"

namespace rrfp {

std::string to_string(Policy p) {
  return p == Policy::Fixed ? "fixed" : "ready";
}

Policy parse_policy(const std::string& s) {
  if (s == "fixed") return Policy::Fixed;
  if (s == "ready") return Policy::Ready;
  throw InputError("`policy`: unknown policy '" + s + "' (expected fixed or ready)");
}

ArbiterOptions resolve_options(ArbiterOptions opt, const Hint& hint, const WorkModel& m) {
  if (opt.policy == Policy::Fixed && !hint.is_list())
    throw InputError("`policy` fixed: needs a list hint (gpipe, 1f1b, ...); '" + hint.name +
                     "' is a rule over the ready set");
  if (opt.limit < 0)
    throw InputError("`limit`: must be 0 (default) or at least 1, got " +
                     std::to_string(opt.limit));
  if (opt.limit == 0) opt.limit = default_limit(hint, m);
  if (opt.max_pending_w < 0)
    throw InputError("`max_pending_w`: must be 0 (default) or at least 1, got " +
                     std::to_string(opt.max_pending_w));
  if (opt.max_pending_w == 0) opt.max_pending_w = m.pp();
  return opt;
}

int d_bound(const ArbiterOptions& opt, const Hint& hint, const WorkModel& m) {
  if (opt.policy == Policy::Fixed) return fixed_order_peak(hint.list(), m);
  return ready_d_bound(opt.limit, m);
}

StageArbiter::StageArbiter(const WorkModel& m, int stage, const Hint& hint,
                           const ArbiterOptions& opt)
    : m_(m),
      stage_(stage),
      v_(m.vpp()),
      mbs_(m.microbatches()),
      hint_(hint),
      opt_(opt),
      list_(hint.is_list()),
      total_(m.tasks_per_stage()) {
  if (opt_.limit < 1 || opt_.max_pending_w < 1)
    throw InputError("arbiter options not resolved: limit and max_pending_w must be >= 1");
  if (opt_.policy == Policy::Fixed && !list_) throw InputError("`policy` fixed: needs a list hint");
  state_.assign(m.local_slots(), kWaiting);
  if (v_ > 1) progress_.assign(mbs_, 0);  // only a stage of several chunks drains in order
  chunks_ = m.chunks_of(stage_);
  if (list_) {
    // Checked here, whoever built the list: a task unknown, listed twice or missing wrote out
    // of bounds, ran twice, or read past the list's end.
    rank_ = stage_positions(hint_.list(), m, stage_, "hint '" + hint_.name + "'");
    for (auto& q : queue_)
      q.reset(static_cast<int>(rank_.size()));
  } else {
    rule_ = hint_.rule();
    next_backward_ = rule_ != Rule::FB;
    mb_bits_ = std::bit_width(static_cast<unsigned>(mbs_ - 1));
    for (auto& q : queue_)
      q.reset(v_ << mb_bits_);
    adaptive_ = rule_ == Rule::Adaptive;
  }
  if (adaptive_) {
    cost_.assign(state_.size(), 0);
    forwards_.resize(v_);
    for (auto& f : forwards_)
      f.reset(mbs_);
  }
}

int StageArbiter::key_of(const TaskId& t) const {
  if (list_) return rank_[local_index(t)];
  return rule_key(m_.local_chunk(t.chunk), t.mb);
}

TaskId StageArbiter::task_of_key(Kind k, int key) const {
  if (list_) return hint_.list().stages[stage_][key];
  const int lc = v_ - 1 - (key >> mb_bits_);
  return TaskId{k, chunks_[lc], key & ((1 << mb_bits_) - 1)};
}

// Out of line: building the message would cost mark_ready() a larger frame on every call.
void StageArbiter::refuse_ready(const TaskId& t) const {
  if (!m_.valid(t) || m_.stage_of(t) != stage_)
    throw Error("stage " + std::to_string(stage_) + ": task " + to_string(t) +
                " does not belong to this stage");
  throw Error(
      "stage " + std::to_string(stage_) + ": task " + to_string(t) +
      (state_[local_index(t)] == kReady ? " became ready twice" : " became ready after it ran"));
}

void StageArbiter::mark_ready(const TaskId& t) {
  if (!m_.valid(t) || m_.stage_of(t) != stage_) [[unlikely]]
    refuse_ready(t);
  std::uint8_t& st = state_[local_index(t)];
  if (st != kWaiting) [[unlikely]]
    refuse_ready(t);
  st = kReady;
  if (opt_.policy != Policy::Ready) return;
  ++queued_;
  if (adaptive_ && t.kind == Kind::F)
    queue_forward(t);
  else
    queue_[static_cast<int>(t.kind)].insert(key_of(t));
}

void StageArbiter::note_cost(const TaskId& t, std::int64_t ns) {
  if (!adaptive_ || !m_.valid(t) || m_.stage_of(t) != stage_) return;
  if (state_[local_index(t)] == kWaiting) cost_[local_index(t)] = ns;
}

// Small microbatches at both ends: a small first one fills the pipeline sooner (a stage starts
// only once it has crossed every stage before it), a small last one drains it sooner (the
// step ends when its backward has crossed them all back), and the large ones in between meet
// stages that are already busy: the pyramid orders of a proportionate flow shop. Sizes taken
// alternately for the front and the back, groups of equal size kept whole and in order, so
// equal sizes change nothing. Measured against smallest-first and the clairvoyant plans in
// docs/frontier.md.
std::vector<int> entry_ranks(const std::vector<std::int64_t>& sizes) {
  const int n = static_cast<int>(sizes.size());
  std::vector<int> by_size(n);
  for (int i = 0; i < n; ++i)
    by_size[i] = i;
  std::stable_sort(by_size.begin(), by_size.end(),
                   [&](int a, int b) { return sizes[a] < sizes[b]; });
  std::vector<std::vector<int>> front, back;  // groups of equal size, ascending
  for (int i = 0, g = 0; i < n; ++g) {
    std::vector<int> group;
    for (const std::int64_t s = sizes[by_size[i]]; i < n && sizes[by_size[i]] == s; ++i)
      group.push_back(by_size[i]);
    (g % 2 == 0 ? front : back).push_back(std::move(group));
  }
  std::vector<int> rank(n);
  int next = 0;
  for (const auto& g : front)
    for (int mb : g)
      rank[mb] = next++;
  for (auto g = back.rbegin(); g != back.rend(); ++g)
    for (int mb : *g)
      rank[mb] = next++;
  return rank;
}

void StageArbiter::note_entry_sizes(const std::vector<std::int64_t>& sizes) {
  if (!adaptive_ || m_.stage_of({Kind::F, 0, 0}) != stage_) return;
  if (static_cast<int>(sizes.size()) != mbs_)
    throw Error("stage " + std::to_string(stage_) + ": " + std::to_string(sizes.size()) +
                " microbatch sizes for " + std::to_string(mbs_) + " microbatches");
  const std::vector<int> rank = entry_ranks(sizes);
  for (int mb = 0; mb < mbs_; ++mb) {
    const TaskId t{Kind::F, 0, mb};
    const int i = local_index(t);
    if (state_[i] >= kDone) continue;
    const bool queued = state_[i] == kReady && opt_.policy == Policy::Ready;
    if (queued) forwards_[0].erase(mb);
    cost_[i] = -rank[mb];
    if (queued) queue_forward(t);
  }
}

std::optional<TaskId> StageArbiter::head() const {
  if (opt_.policy != Policy::Fixed || finished()) return std::nullopt;
  return hint_.list().stages[stage_][head_];
}

std::optional<TaskId> StageArbiter::drain_target() const {
  if (drain_mb_ >= mbs_) return std::nullopt;
  const int r = progress_[drain_mb_];
  const int lc = r < v_ ? r : 2 * v_ - 1 - r;
  return TaskId{r < v_ ? Kind::F : Kind::B, chunks_[lc], drain_mb_};
}

// Ranks by key, kind by kind, and names the task only once chosen: an optional TaskId per
// candidate, passed through memory, cost more than the choice.
StageArbiter::Pick StageArbiter::pick() const {
  // Weight gradients hold memory until they run: past the cap they go first.
  if (pending_w_ >= opt_.max_pending_w && !queue_[static_cast<int>(Kind::W)].empty())
    return min_of(Kind::W);
  if (d_ >= opt_.limit) {
    // Back-pressure: no opportunistic forward. Interleaved, the microbatch being drained goes
    // first; otherwise, and while it waits, a backward lowers D (waiting for the drained one
    // alone ran each round trip on its own). W never raises D, so it may fill the wait.
    if (v_ > 1) {
      const auto target = drain_target();
      if (target && is_ready(*target)) return {target->kind, key_of(*target)};
    }
    const Pick b = min_of(Kind::B);
    return b.key >= 0 ? b : min_of(Kind::W);
  }
  if (list_) {
    Pick best{Kind::F, -1};
    for (int k = 0; k < kNumKinds; ++k) {
      const int key = queue_[k].min();
      if (key >= 0 && (best.key < 0 || key < best.key)) best = {static_cast<Kind>(k), key};
    }
    return best;
  }
  Kind first = Kind::B, second = Kind::F;
  switch (rule_) {
    case Rule::BF:
    case Rule::FB:
    case Rule::BFW:
    case Rule::Adaptive:
      if (!next_backward_) std::swap(first, second);
      break;
    case Rule::BPriority:
      break;
    case Rule::FPriority:
      std::swap(first, second);
      break;
  }
  if (const Pick p = min_of(first); p.key >= 0) return p;
  if (const Pick p = min_of(second); p.key >= 0) return p;
  return min_of(Kind::W);
}

std::optional<TaskId> StageArbiter::peek() const {
  if (opt_.policy == Policy::Fixed) {
    auto h = head();
    if (h && is_ready(*h)) return h;
    return std::nullopt;
  }
  const Pick p = pick();
  if (p.key < 0) return std::nullopt;
  return task_of_key(p.kind, p.key);
}

// Inlined into commit() and take(): as calls they cost commit() a sixth more instructions.
[[gnu::always_inline]] inline void StageArbiter::dequeue(const TaskId& t, int key) {
  --queued_;
  if (adaptive_ && t.kind == Kind::F)
    forwards_[m_.local_chunk(t.chunk)].erase(t.mb);
  else
    queue_[static_cast<int>(t.kind)].erase(key);
}

[[gnu::always_inline]] inline void StageArbiter::count_run(const TaskId& t) {
  state_[local_index(t)] = kDone;
  ++committed_;
  switch (t.kind) {
    case Kind::F:
      ++d_;
      if (d_ > peak_d_) peak_d_ = d_;
      next_backward_ = true;
      break;
    case Kind::B:
      --d_;
      next_backward_ = false;
      if (m_.split()) {
        ++pending_w_;
        if (pending_w_ > peak_pending_w_) peak_pending_w_ = pending_w_;
      }
      break;
    case Kind::W:
      --pending_w_;
      break;
  }
  // The drain order (V > 1 only): a microbatch is through once its local F and B have all run.
  if (v_ > 1 && t.kind != Kind::W) {
    ++progress_[t.mb];
    while (drain_mb_ < mbs_ && progress_[drain_mb_] == 2 * v_)
      ++drain_mb_;
  }
}

void StageArbiter::commit(const TaskId& t) {
  if (!m_.valid(t) || m_.stage_of(t) != stage_)
    throw Error("stage " + std::to_string(stage_) + ": cannot run " + to_string(t) +
                ", it belongs to another stage");
  const std::uint8_t st = state_[local_index(t)];
  if (st != kReady)
    throw Error("stage " + std::to_string(stage_) + ": cannot run " + to_string(t) +
                (st >= kDone ? ", it already ran" : ", its inputs are not all present"));
  if (opt_.policy == Policy::Fixed) {
    const TaskId& h = hint_.list().stages[stage_][head_];
    if (!(h == t))
      throw Error("stage " + std::to_string(stage_) + ": fixed order expects " + to_string(h) +
                  " next, not " + to_string(t));
    ++head_;
  } else {
    dequeue(t, key_of(t));
  }
  count_run(t);
}

// peek() and commit() in one: the task comes from this arbiter's own queue, so it is known to
// be this stage's and ready, and its key is at hand.
std::optional<TaskId> StageArbiter::take() {
  if (opt_.policy == Policy::Fixed) {
    const auto h = peek();
    if (h) {
      ++head_;
      count_run(*h);
    }
    return h;
  }
  // A stage freed with nothing ready is common (it waits for its next input): say so at once.
  if (queued_ == 0) return std::nullopt;
  const Pick p = pick();
  if (p.key < 0) return std::nullopt;
  const TaskId t = task_of_key(p.kind, p.key);
  dequeue(t, p.key);
  count_run(t);
  return t;
}

std::string StageArbiter::describe() const {
  std::string out = "stage " + std::to_string(stage_) + ": ran " + std::to_string(committed_) +
                    "/" + std::to_string(total_);
  if (auto h = head())
    out += ", next in fixed order " + to_string(*h) +
           (is_ready(*h) ? " (ready)" : " (inputs missing)");
  out += ", D=" + std::to_string(d_);
  if (opt_.policy == Policy::Ready) {
    out += "/limit " + std::to_string(opt_.limit);
    if (back_pressured()) {
      out += " (back-pressure";
      if (v_ > 1)
        if (auto t = drain_target()) out += ", draining " + to_string(*t);
      out += ")";
    }
  }
  std::string ready;
  int shown = 0, count = 0;
  for (int i = 0; i < static_cast<int>(state_.size()); ++i) {
    if (state_[i] != kReady) continue;
    ++count;
    if (shown < 6) {
      const int mb = i % mbs_, row = i / mbs_;
      TaskId t{static_cast<Kind>(row / v_), chunks_[row % v_], mb};
      ready += (shown ? ", " : "") + to_string(t);
      ++shown;
    }
  }
  out += ", ready {" + ready + (count > shown ? ", ..." : "") + "}";
  return out;
}

}  // namespace rrfp
