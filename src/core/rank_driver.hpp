#pragma once
// One tensor-parallel rank's protocol, driven once for every executor: the simulator, the
// threaded runtime, the processes of a job and the Python stages all hold one RankDriver per
// rank and decide no protocol matter themselves. It owns the rank's machines (the arbiter, the
// readiness of its tasks, the rendezvous of blocking mode, its group's leader/follower or agree
// state) and the rules that join them: which consumers a finished task satisfies here, when an
// arbiter hears a producer's cost, how the fixed order posts receives, what a stuck rank waits
// for. The executor tells it what happened and asks it what to do; how time passes, how bytes
// and control messages move and which thread calls is the executor's. No clock, thread or
// lock: the executor serialises the calls for a rank (and for its group, under `agree`).
//
// An executor in a few lines (tests/test_driver.cpp runs one): per step, begin_step(); while
// some rank is not done(): a rank with nothing running takes next() (or an agree round's
// decide()), runs it, and reports task_ended(), sending each returned cross-stage consumer its
// input, which the receiver reports with arrived() (async) or with offered(), accept() and
// delivered() (blocking, the sender's released() on the acknowledgement).
#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/arbiter.hpp"
#include "core/modes.hpp"
#include "core/readiness.hpp"
#include "core/rendezvous.hpp"
#include "core/stuck_report.hpp"
#include "core/tp_choice.hpp"

namespace rrfp {

// How every rank of a run dispatches, whichever executor runs it: the arbiter's options, the
// communication mode and the TP protocol. The simulator's and the runtime's options are these
// plus what their executor adds (SimOptions, RuntimeOptions derive from it), so the shared part
// is set, checked and copied as one: `runtime.dispatch() = sim.dispatch()`.
struct DispatchOptions {
  ArbiterOptions arbiter;
  CommMode comm = CommMode::Async;
  TpProtocol tp_protocol = TpProtocol::Leader;
  // A fixed list replays the order of a run whose groups chose together (the twin's replay of
  // a ready run): its ranks wait for the protocol as that run's did, which a fixed list's own
  // run does not (coordinated).
  bool coordinate_fixed = false;
  DispatchOptions& dispatch() { return *this; }
  const DispatchOptions& dispatch() const { return *this; }
  // The ranks of a group of `tp` choose together: T > 1 with a protocol other than `none`,
  // under `ready`. Under `fixed` every rank runs the same list, which keeps them in step alone
  // (semantics.md §4); the protocol cost such a baseline what a Megatron-like runtime never
  // pays (0.4% at P=4 M=8 T=2).
  bool coordinated(int tp) const {
    return tp > 1 && tp_protocol != TpProtocol::None &&
           (arbiter.policy == Policy::Ready || coordinate_fixed);
  }
  // Arbiters hear what inputs' producers took (the adaptive rule), except under `agree`: the
  // ranks of a group, ranking by their own measurements, could propose differently.
  bool note_costs(int tp) const { return !(coordinated(tp) && tp_protocol == TpProtocol::Agree); }
};

// An ended task's consumers: those on this stage are already satisfied; the executor moves the
// output to each that takes it (an input slot here, a message to another stage), and to no
// ordering edge (Dep::order).
struct Consumers {
  Deps deps{};
  int n = 0;
  const Dep* begin() const { return deps.data(); }
  const Dep* end() const { return deps.data() + n; }
};

class RankDriver {
 public:
  // `m` and `hint` must outlive the driver; `opt.arbiter` must be resolved (resolve_options).
  // The rank is `tp_rank` of the `tp` of its stage's group.
  RankDriver(const WorkModel& m, const Hint& hint, const DispatchOptions& opt, int tp, int stage,
             int tp_rank);

  // Fresh machines for a step. `entry_sizes`: every microbatch's size, for the adaptive rule's
  // entry order (the same on every rank of a group), or empty; a list of another length is an
  // Error where the rule reads it.
  void begin_step(const std::vector<std::int64_t>& entry_sizes = {});

  // --- What happened ---
  // Task `t` ran for `cost_ns` and ended: its consumers on this stage are satisfied.
  // Throws ProtocolError for a task this rank did not take or has ended already: its
  // consumers would be satisfied again, and one ran without its input from another stage.
  Consumers task_ended(const TaskId& t, std::int64_t cost_ns) {  // inline: the hottest call
    if (!m_.valid(t) || m_.stage_of(t) != stage_ || !arb_->end(t)) [[unlikely]]
      refuse_end(t);
    Consumers c;
    c.n = m_.consumers(t, c.deps);
    for (const Dep& d : c) {
      if (d.cross_stage) continue;
      if (costs_ && !d.order) arb_->note_cost(d.task, cost_ns);  // an ordering edge is no input
      inputs_->satisfy(d.task);
    }
    return c;
  }
  // Async: `consumer`'s input from another stage arrived, its producer having taken
  // `cost_ns`. True when it made the task ready; throws ProtocolError on a second arrival.
  bool arrived(const TaskId& consumer, std::int64_t cost_ns) {  // inline: one per message
    if (!m_.valid(consumer) || m_.stage_of(consumer) != stage_) [[unlikely]]
      refuse_arrival(consumer);
    if (costs_) arb_->note_cost(consumer, cost_ns);
    return inputs_->arrive(consumer);
  }
  // Whether arrivals' costs are read (the adaptive rule): an executor that must work a cost out
  // may pass 0 where they are not.
  bool reads_costs() const { return costs_; }
  // Blocking, receiving side: an offer of `consumer`'s input (`handle`: the executor's name for
  // it); the offers to start now (Offered -> Accepted), the rest wait; the bytes are here.
  void offered(const TaskId& consumer, int handle) {
    if (!m_.valid(consumer) || m_.stage_of(consumer) != stage_) [[unlikely]]
      refuse_arrival(consumer);
    if (!rendezvous_) [[unlikely]]
      refuse_message("an offer of " + to_string(consumer) + " in a step that does not block");
    rendezvous_->on_offer(consumer, handle);
  }
  std::vector<Rendezvous::Offer> accept() {
    return rendezvous_ ? rendezvous_->take_acceptable() : std::vector<Rendezvous::Offer>{};
  }
  bool has_offers() const { return rendezvous_ && rendezvous_->has_offers(); }
  bool delivered(const TaskId& consumer, std::int64_t cost_ns);
  // Blocking, sending side: one output offered (the rank is held until acknowledged); an
  // acknowledgement, true when it freed the rank (throws ProtocolError when none is held).
  void sent() {
    if (!rendezvous_) [[unlikely]]
      refuse_message("an output offered in a step that does not block");
    rendezvous_->offered();
  }
  bool released() {
    if (!rendezvous_) [[unlikely]]
      refuse_message("an acknowledgement in a step that does not block");
    return rendezvous_->acknowledged();
  }
  // `leader`: the leader's choice reached this follower. A message's: refused (ProtocolError)
  // where this rank follows no leader (tp rank 0, another protocol), as from a peer not rank 0.
  void on_choice(int from, const TaskId& t) {
    if (!follower_) [[unlikely]]
      refuse_message("a choice of " + to_string(t) + " from tp rank " + std::to_string(from) +
                     ": only the leader (tp rank 0) sends choices, to the others, under `leader`");
    follower_->on_choice(from, t);
  }
  // `agree`: a peer's proposal for `round` (refused where the group does not agree).
  void on_proposal(int from, int round, const TaskId& t) {
    if (!agree_) [[unlikely]]
      refuse_message("a proposal of " + to_string(t) + " from tp rank " + std::to_string(from) +
                     ": this group does not agree (`tp_protocol` agree)");
    agree_->on_proposal(from, round, t);
  }

  // --- What to do ---
  // Alone, the leader, or a follower: the task to run now, committed; nullopt: wait for a
  // change. (Under `agree` the group decides: propose() then decide().) A rank held on a send
  // takes nothing, here and in propose(): each executor checked held() itself, and one that did
  // not would have broken the blocking semantics without a word.
  std::optional<TaskId> next() {
    if (held()) return std::nullopt;
    return follower_ ? follower_->next(*arb_) : choose_alone(*arb_);
  }
  // `agree`: what this rank would propose, without proposing it.
  std::optional<TaskId> peek() const { return arb_->peek(); }
  bool may_propose() const { return agree_->may_propose(inputs_->version()); }
  struct Proposal {
    int round;
    TaskId task;
  };
  // Opens (or joins) a round with this rank's choice; nullopt when it may not (held on a send,
  // or the round's rules) or has nothing to propose. The executor sends the proposal to the
  // rest of the group.
  std::optional<Proposal> propose();
  bool round_complete() const { return agree_->complete(); }
  // Every proposal of the round is in: the agreed task, committed, or nullopt (no agreement).
  std::optional<TaskId> decide() { return agree_->decide(*arb_); }

  // --- What it is ---
  bool held() const { return rendezvous_ && rendezvous_->held() > 0; }
  bool finished() const { return arb_->finished(); }
  bool done() const { return finished() && !held(); }  // nothing left to run or release
  const StageArbiter& arbiter() const { return *arb_; }
  const Readiness& inputs() const { return *inputs_; }
  const AgreeRound* agree() const { return agree_ ? &*agree_ : nullptr; }
  // What the stuck report reads of this rank; `running` is the executor's word.
  StuckRank stuck(std::string running = {}) const;
  int stage() const { return stage_; }
  int tp_rank() const { return tp_rank_; }

 private:
  const WorkModel& m_;
  const Hint& hint_;
  DispatchOptions opt_;
  int tp_;
  // opt_.note_costs(tp_), and this step's arbiter reads them: asked on every arrival and
  // completion, where the call would be wasted on every hint but the adaptive one.
  bool costs_ = false;
  int stage_, tp_rank_;
  std::unique_ptr<StageArbiter> arb_;       // per step
  std::unique_ptr<Readiness> inputs_;       // per step, on arb_
  std::unique_ptr<Rendezvous> rendezvous_;  // blocking mode, per step, on inputs_
  std::optional<LeaderFollower> follower_;  // `leader`, tp ranks > 0
  std::optional<AgreeRound> agree_;         // `agree`

  [[noreturn]] void refuse_end(const TaskId& t) const;  // out of line: the message's frame
  [[noreturn]] void refuse_arrival(const TaskId& t) const;
  // A message this rank's protocols do not take: a ProtocolError naming the rank.
  [[noreturn, gnu::cold]] void refuse_message(const std::string& what) const;
};

}  // namespace rrfp
