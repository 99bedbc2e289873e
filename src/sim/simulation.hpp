#pragma once
// One simulated step (sim/simulator.hpp's simulate): the simulator's state and its event
// handlers. Two files define it: simulator.cpp the event loop, dispatch, tasks and
// tensor-parallel coordination; sim_messages.cpp the messages, on their own or on the shared
// links, and the rendezvous of blocking mode. Internal to the simulator.
#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

#include "sim/event_queue.hpp"
#include "sim/shared_links.hpp"
#include "sim/sim_state.hpp"
#include "sim/simulator.hpp"

namespace rrfp::sim_state {

class Simulation {
 public:
  Simulation(const WorkModel& m, const Hint& hint, const RealizedWork& w, const SimOptions& opt);
  StepRecord run();
  // The events to the end; false where some rank cannot finish (run() throws DeadlockError).
  bool run_events();
  std::int64_t makespan() const { return last_end_; }

 private:
  Rank& rank(int s, int r) { return ranks_[static_cast<size_t>(s) * t_ + r]; }
  const Rank& rank(int s, int r) const { return ranks_[static_cast<size_t>(s) * t_ + r]; }
  RankStats& stats(int s, int r) { return res_.ranks[static_cast<size_t>(s) * t_ + r]; }
  bool free(int s, int r) const {
    const Rank& rk = rank(s, r);
    return !rk.computing && !rk.driver.held() && !rk.proposing;
  }
  void push(std::int64_t time, Ev type, int stage, int r, int a) {
    events_.push(time, Event{type, stage, r, a});
  }
  void mark_dirty(int s) {
    if (!dirty_[s]) {
      dirty_[s] = 1;
      dirty_list_.push_back(s);
    }
  }
  int queue_of(int s, int r) const { return s * t_ + r; }
  // Blocking mode with T > 1: a rank whose own share of its group's task is done, waiting in the
  // collective for a peer that has not entered it or is still computing, accepts offers as an
  // idle rank does (a peer may be held by a send that only this stage can take: semantics.md §4).
  bool in_collective(int s, int r) const {
    const Rank& rk = rank(s, r);
    const Group& g = groups_[s];
    return rk.computing && now_ >= rk.compute_end && (g.launched < t_ || now_ < g.end);
  }

  // simulator.cpp
  void end_waits();
  void block(int s, int r, std::int64_t from, std::int64_t to, BlockReason why);
  void launch(int s, int r, const TaskId& task);
  void handle(const Event& e);
  void group_end(int s, int index);
  void arrive(int s, int r, int consumer);
  void wake_if_idle(int s, int r) {  // inline: asked on every arrival, mostly of no wake-up
    if (w_.wake_ns != 0 || w_.wake_per_copy_ns != 0) wake(s, r);
  }
  void wake(int s, int r);
  void size_wakes() {  // inline: asked every instant and every dispatch, mostly of none
    if (!waking_.empty()) size_pending_wakes();
  }
  void size_pending_wakes();
  std::int64_t producer_cost(int r, const TaskId& consumer) const;
  void dispatch_dirty();
  void dispatch(int s);
  void try_dispatch(int s);
  void propose(int s);
  void proposal_landed(int s, int r, int id);
  void end_round(int s, int r);
  [[noreturn]] void throw_deadlock() const;

  // sim_messages.cpp
  void offer(const Send& sd);
  void move_bytes(int id);
  void send_landed(int id);
  void offer_landed(int id);
  void send_done(int id);
  void ack_landed(int id);
  void release(int id);
  void transfer(Transfer t, std::int64_t lat);
  void link_join(int id);
  void watch_links();
  void link_end(int stamp);
  int links_stamp() const;  // the links' version, as a LinkEnd event carries it
  void accept_sends(int s);

  const WorkModel& m_;
  const RealizedWork& w_;
  SimOptions opt_;
  int p_, t_;
  bool coordinated_ = false;            // T > 1 with a protocol
  bool accepts_in_collective_ = false;  // blocking with T > 1 (in_collective)
  // Whether the ranks' arbiters read their producers' costs; the same hint and options make it
  // one answer for all, asked once rather than per message from a rank far away in memory.
  bool reads_costs_ = false;
  std::vector<Rank> ranks_;
  std::vector<Group> groups_;
  std::vector<Send> sends_;              // by id, the offer's handle
  std::vector<int> free_sends_;          // ids of released sends, taken again first
  std::vector<SentProposal> proposals_;  // agree: by Ev::Proposal's index
  std::optional<SharedLinks> links_;     // WorkloadParams::comm_links; none: each on its own
  std::vector<Transfer> transfers_;      // on the links, by token
  std::vector<int> free_transfers_;      // tokens of ended transfers, taken again first
  // Releases waiting for the end of the copy (a transfer's token) their process was inside.
  std::unordered_map<int, std::vector<int>> parked_;
  static constexpr double kNoLimit = 4096;  // capacity where only the queues hold transfers
  EventQueue<Event> events_;
  std::vector<int> waking_;  // ranks (queue_of) woken in this instant, their wake-up unsized
  std::vector<char> dirty_;
  std::vector<int> dirty_list_;
  std::vector<int> dispatching_;  // dispatch_dirty's stages of the instant
  std::int64_t now_ = 0, last_end_ = 0;
  std::int64_t ended_ = 0;          // group tasks done (for progress)
  std::int64_t progress_mask_ = 0;  // progress every progress_mask_ + 1 of them
  StepRecord res_;
};

}  // namespace rrfp::sim_state
