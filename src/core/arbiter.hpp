#pragma once
// Ready-set arbitration for one stage (semantics.md §2): the only implementation of the
// policies, used by the simulator, the threaded runtime and training alike.
//
// Protocol: the owner reports each task whose inputs are all present with mark_ready(), asks
// peek() for the task to run next when the stage is free (nullopt: wait for a change), and
// reports the dispatch with commit(). peek() has no side effects, so tensor-parallel ranks can
// propose a choice, compare, and commit only on agreement. Cost per decision: O(log64 n), and
// O(log n) for the adaptive rule's forwards.
//
// The adaptive rule also uses note_cost(): before a task becomes ready, the executor may say
// how long the task that produced its input took (the previous stage's forward of the same
// microbatch, measured there and carried with the message); and note_entry_sizes(): how large
// each microbatch is, as its data loader knows it before the step. Without either it is BFW.
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "core/hint.hpp"
#include "core/min_set.hpp"
#include "core/work_model.hpp"

namespace rrfp {

enum class Policy { Fixed, Ready };
std::string to_string(Policy p);
Policy parse_policy(const std::string& s);  // throws InputError

// Under Policy::Fixed the list alone decides what a stage holds: `limit` and `max_pending_w`
// are not read. The CLI and Python refuse them there; the library takes them, as a comparison
// gives its fixed baseline and its ready runs one set, and a record keeps them as given (the
// reports leave them out of fixed runs).
struct ArbiterOptions {
  Policy policy = Policy::Ready;
  int limit = 0;          // back-pressure limit on D = F done - B done; 0 = hint default
  int max_pending_w = 0;  // cap on B done - W done; 0 = P
};

// The largest D = F done - B done a ready-policy stage may reach under limit L: L, plus V where
// draining a microbatch through its V >= 2 chunks may pass L (semantics.md §2, Cor. C.2). A
// limit near the largest int, which binds nothing, stays the largest (the sum wrapped negative:
// no order was feasible, and an activation estimate passed any memory).
inline int ready_d_bound(int limit, const WorkModel& m) {
  const int drain = m.vpp() > 1 ? m.vpp() : 0;
  return limit > std::numeric_limits<int>::max() - drain ? std::numeric_limits<int>::max()
                                                         : limit + drain;
}

// The largest D any stage reaches under resolved options: the order's peak under the fixed
// policy, which follows the order, and ready_d_bound() under the ready one. Whatever a stage holds
// from a forward to its backward (activations, outputs not yet consumed) is bounded by it.
int d_bound(const ArbiterOptions& opt, const Hint& hint, const WorkModel& m);

// The adaptive rule's entry order, as a rank per microbatch (0 enters first): small ones at both
// ends, the largest in the middle; microbatches of equal size keep their order.
std::vector<int> entry_ranks(const std::vector<std::int64_t>& sizes);

// Resolves defaults (limit 0, max_pending_w 0) and checks the combination against the hint.
ArbiterOptions resolve_options(ArbiterOptions opt, const Hint& hint, const WorkModel& m);

class StageArbiter {
 public:
  // `opt` must be resolved (resolve_options). The hint must outlive the arbiter.
  StageArbiter(const WorkModel& m, int stage, const Hint& hint, const ArbiterOptions& opt);

  void mark_ready(const TaskId& t);
  // The measured duration of the task whose output `t` waits for (adaptive rule); call it
  // before the input makes `t` ready. Ignored by every other hint.
  void note_cost(const TaskId& t, std::int64_t ns);
  bool reads_costs() const { return adaptive_; }  // note_cost ignores them otherwise
  // Every microbatch's size (tokens, bytes: only the order matters), on the stage that runs
  // the first forwards, before they run: the adaptive rule lets them enter in entry_ranks()
  // order. Ignored elsewhere and by every other hint.
  void note_entry_sizes(const std::vector<std::int64_t>& sizes);
  std::optional<TaskId> peek() const;
  void commit(const TaskId& t);
  // peek(), and commit() what it gives: a rank that decides alone.
  std::optional<TaskId> take();

  bool is_ready(const TaskId& t) const { return state_[local_index(t)] == kReady; }
  // `t`, taken to run this step, has ended: false (nothing marked) where it was not taken or
  // has ended already. Kept in the task's state byte: a vector of its own cost the simulator 1
  // byte a task (31 -> 32 at P=M=1024).
  bool end(const TaskId& t) {
    std::uint8_t& st = state_[local_index(t)];
    if (st != kDone) return false;
    st = kEnded;
    return true;
  }
  bool ended(const TaskId& t) const { return state_[local_index(t)] == kEnded; }
  bool finished() const { return committed_ == total_; }
  int committed() const { return committed_; }
  int outstanding() const { return d_; }  // D = F done - B done
  int peak_outstanding() const { return peak_d_; }
  int pending_w() const { return pending_w_; }
  int peak_pending_w() const { return peak_pending_w_; }
  bool back_pressured() const { return opt_.policy == Policy::Ready && d_ >= opt_.limit; }
  int stage() const { return stage_; }
  // The fixed policy's next task (nullopt under `ready` or when finished).
  std::optional<TaskId> head() const;
  // One line for watchdogs and deadlock reports: what the stage waits for and what is ready.
  std::string describe() const;

 private:
  // kDone: taken to run; kEnded: its end reported (RankDriver::task_ended).
  enum : std::uint8_t { kWaiting = 0, kReady = 1, kDone = 2, kEnded = 3 };

  int local_index(const TaskId& t) const { return m_.local_index(t); }
  int key_of(const TaskId& t) const;
  // A rule hint's key of local chunk `lc`'s task of microbatch `mb`, any kind: the largest
  // chunk first, ties to the smallest microbatch. For forwards that is depth first: a
  // microbatch already in the stage goes on before a new one enters, as interleaved schedules
  // order them (semantics.md §2; the paper's smallest chunk first filled the limit with first
  // chunks, then drained microbatch by microbatch). task_of_key() inverts it.
  int rule_key(int lc, int mb) const { return ((v_ - 1 - lc) << mb_bits_) | mb; }
  TaskId task_of_key(Kind k, int key) const;
  // A ready task as its kind and key (-1: none).
  struct Pick {
    Kind kind;
    int key;
  };
  Pick pick() const;
  // The least key of kind k; the adaptive rule's forwards are ranked by their own keys, and
  // the least of them is named by its rule key.
  Pick min_of(Kind k) const {
    if (k == Kind::F && adaptive_) {
      for (int lc = v_ - 1; lc >= 0; --lc)  // the largest chunk first, as rule_key ranks
        if (!forwards_[lc].empty()) return {k, rule_key(lc, forwards_[lc].top())};
      return {k, -1};
    }
    return {k, queue_[static_cast<int>(k)].min()};
  }
  std::optional<TaskId> drain_target() const;
  [[noreturn, gnu::cold, gnu::noinline]] void refuse_ready(const TaskId& t) const;
  // commit()'s bookkeeping once the task is known to be this stage's and ready.
  void dequeue(const TaskId& t, int key);
  void count_run(const TaskId& t);

  const WorkModel& m_;
  int stage_, v_, mbs_;
  const Hint& hint_;
  ArbiterOptions opt_;
  bool list_;
  Rule rule_ = Rule::BF;

  std::vector<std::uint8_t> state_;  // by local index
  std::vector<int> rank_;            // list hints: local index -> position
  std::vector<int> chunks_;          // this stage's chunks, by local chunk
  // Rule hints: a key is (row << mb_bits_) | mb, so it splits without a division.
  int mb_bits_ = 0;
  // Ready tasks of each kind, by key; the adaptive rule's forwards are in forwards_ instead.
  MinSet queue_[kNumKinds];
  int queued_ = 0;             // ready tasks in either
  int head_ = 0;               // fixed policy: next position in the list
  bool next_backward_ = true;  // BF/FB/BFW round state
  int d_ = 0, peak_d_ = 0, pending_w_ = 0, peak_pending_w_ = 0;
  int committed_ = 0, total_;
  // Adaptive: ready forwards by (largest local chunk first, longest producer first,
  // microbatch); a first forward's "cost" is minus its entry rank.
  bool adaptive_ = false;
  std::vector<std::int64_t> cost_;  // by local index, adaptive only
  // A ready forward's key: minus its cost, so the longest producer comes first; ties go to the
  // smaller microbatch (the heap's id).
  void queue_forward(const TaskId& t) {
    forwards_[m_.local_chunk(t.chunk)].insert(t.mb, -cost_[local_index(t)]);
  }
  std::vector<KeyedHeap> forwards_;  // by local chunk, each by microbatch
  std::vector<int> progress_;        // V > 1, per microbatch: local F and B done (drain order)
  int drain_mb_ = 0;
};

}  // namespace rrfp
