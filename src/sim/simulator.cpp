#include "sim/simulator.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <memory>

#include "core/error.hpp"
#include "core/stuck_report.hpp"
#include "sim/simulation.hpp"

namespace rrfp {

namespace sim_state {

Simulation::Simulation(const WorkModel& m, const Hint& hint, const RealizedWork& w,
                       const SimOptions& opt)
    : m_(m), w_(w), opt_(opt), p_(m.pp()), t_(w.tp) {
  if (!opt.work_checked) check_work(w, m);  // indexed by task and rank below without a check
  opt_.arbiter = resolve_options(opt.arbiter, hint, m);
  coordinated_ = opt_.coordinated(t_);
  accepts_in_collective_ = opt_.comm == CommMode::Blocking && t_ > 1;
  std::vector<std::int64_t> sizes(m.microbatches());
  for (int mb = 0; mb < m.microbatches(); ++mb)
    sizes[mb] = microbatch_size(m, w, mb);
  ranks_.reserve(static_cast<size_t>(p_) * t_);
  for (int s = 0; s < p_; ++s)
    for (int r = 0; r < t_; ++r) {
      ranks_.emplace_back(RankDriver(m, hint, opt_.dispatch(), t_, s, r));
      ranks_.back().driver.begin_step(sizes);
    }
  reads_costs_ = ranks_.front().driver.reads_costs();
  groups_.resize(p_);
  // Queued copies need the links' bookkeeping even where bandwidth is to spare.
  if (w.links > 0 || w.serial_receive || w.two_slowdown > 1)
    links_.emplace(w.links > 0 ? w.links : kNoLimit, w.two_slowdown);
  progress_mask_ = std::max<std::int64_t>(
                       1, SimOptions::kProgressEvery / std::bit_ceil(static_cast<unsigned>(t_))) -
                   1;
  dirty_.assign(p_, 0);
  dirty_list_.reserve(p_);  // a stage is listed once: no list grows in the run
  dispatching_.reserve(p_);
  res_.pp = p_;
  res_.tp = t_;
  res_.arbiter = opt_.arbiter;
  res_.ranks.resize(ranks_.size());
  if (opt_.record) res_.tasks.reserve(static_cast<size_t>(t_) * m.num_tasks());
}

StepRecord Simulation::run() {
  if (!run_events()) throw_deadlock();
  res_.makespan = last_end_;
  end_waits();
  res_.peak_d.resize(p_);
  res_.peak_pending_w.resize(p_);
  for (int s = 0; s < p_; ++s) {
    for (int r = 0; r < t_; ++r) {
      const StageArbiter& arb = rank(s, r).driver.arbiter();
      res_.peak_d[s] = std::max(res_.peak_d[s], arb.peak_outstanding());
      res_.peak_pending_w[s] = std::max(res_.peak_pending_w[s], arb.peak_pending_w());
    }
    if (const AgreeRound* a = rank(s, 0).driver.agree()) {  // the group's rounds, as the runtime
      res_.coordination_rounds += a->rounds();              // counts them: its rank 0's
      res_.failed_rounds += a->failed_rounds();
    }
  }
  return std::move(res_);
}

bool Simulation::run_events() {
  for (int s = 0; s < p_; ++s)
    mark_dirty(s);
  dispatch_dirty();
  while (!events_.empty()) {
    now_ = events_.top_time();
    while (!events_.empty() && events_.top_time() == now_) {
      Event e = events_.top();
      events_.pop();
      handle(e);
    }
    size_wakes();      // where nothing became ready too: a wake-up is of its instant
    dispatch_dirty();  // decide only once every event of this instant has landed
  }
  for (const Rank& rk : ranks_)
    if (!rk.driver.done()) return false;
  return true;
}

void Simulation::block(int s, int r, std::int64_t from, std::int64_t to, BlockReason why) {
  if (to <= from) return;
  stats(s, r).add_blocked(why, to - from);
  if (opt_.record) res_.blocked.push_back(BlockedSpan{s, r, from, to, why});
  Rank& rk = rank(s, r);
  rk.wait_from = from;
  rk.wait_to = to;
  rk.wait_why = why;
}

// A rendezvous whose acknowledgement lands after the step's last task ended (its payload rode
// on the offer) held its sender past the makespan: that part of the wait is no part of the
// step (cut_waits_at_end). Without records, each rank's latest wait is the one that can reach
// past the end: every wait follows a task of its rank, and the next task follows it.
void Simulation::end_waits() {
  if (opt_.record) return cut_waits_at_end(res_);
  for (int s = 0; s < p_; ++s)
    for (int r = 0; r < t_; ++r) {
      const Rank& rk = rank(s, r);
      if (rk.wait_to > last_end_)
        stats(s, r).add_blocked(rk.wait_why, std::max(rk.wait_from, last_end_) - rk.wait_to);
    }
}

// Out of line, so that launch() does not pay for the message's frame on every task. `in`: the
// ranks already in the group's collective, named as the runtime's error names them.
[[noreturn, gnu::cold, gnu::noinline]] static void diverged(int s, int r, const TaskId& task,
                                                            const TaskId& group_task,
                                                            const std::string& in) {
  throw CollectiveMismatchError("stage " + std::to_string(s) + ": tensor-parallel rank " +
                                std::to_string(r) + " entered the collective of " +
                                to_string(task) + " while rank(s) " + in + " of its group are in " +
                                to_string(group_task) + " (collective order diverged)");
}

void Simulation::launch(int s, int r, const TaskId& task) {
  Rank& rk = rank(s, r);
  Group& g = groups_[s];
  if (g.launched > 0 && !(g.task == task)) [[unlikely]] {
    std::string in;
    for (int o = 0; o < t_; ++o)
      if (rank(s, o).computing) in += (in.empty() ? "" : ", ") + std::to_string(o);
    diverged(s, r, task, g.task, in);
  }
  const std::int64_t d = w_.compute(r, m_.index(task));
  // An input woke the idle rank: its thread starts the task once awake (a follower's choice or
  // an agree round may come later than that).
  const std::int64_t start = std::max(now_, rk.awake_at);
  rk.computing = true;
  rk.compute_end = start + d;
  stats(s, r).busy += d;
  if (opt_.record) {
    rk.record = res_.tasks.size();
    res_.tasks.push_back(TaskRecord{task, s, r, start, start + d, 0});
  }
  if (g.launched == 0) {
    g.task = task;
    g.end = 0;
  }
  g.end = std::max(g.end, rk.compute_end);
  if (accepts_in_collective_) push(rk.compute_end, Ev::ShareDone, s, r, 0);
  if (++g.launched == t_)
    push(g.end + w_.collective_after(task.kind), Ev::GroupEnd, s, 0, m_.index(task));
}

void Simulation::handle(const Event& e) {
  switch (e.type) {
    case Ev::GroupEnd:
      group_end(e.stage, e.a);
      break;
    case Ev::ShareDone:  // offers that came while it computed are taken now
      if (in_collective(e.stage, e.rank) && rank(e.stage, e.rank).driver.has_offers())
        mark_dirty(e.stage);
      break;
    case Ev::Arrive:
      arrive(e.stage, e.rank, e.a);
      break;
    case Ev::LinkJoin:
      link_join(e.a);
      break;
    case Ev::LinkEnd:
      link_end(e.a);
      break;
    case Ev::SendLanded:
      send_landed(e.a);
      break;
    case Ev::AckLanded:
      ack_landed(e.a);
      break;
    case Ev::Proposal:
      proposal_landed(e.stage, e.rank, e.a);
      break;
    case Ev::Choice:
      rank(e.stage, e.rank).driver.on_choice(0, m_.task(e.a));
      mark_dirty(e.stage);
      break;
  }
}

void Simulation::group_end(int s, int index) {
  Group& g = groups_[s];
  g.launched = 0;
  last_end_ = now_;
  if (opt_.progress && (++ended_ & progress_mask_) == 0) opt_.progress(ended_, m_.num_tasks());
  const TaskId task = m_.task(index);
  for (int r = 0; r < t_; ++r) {
    Rank& rk = rank(s, r);
    rk.computing = false;
    rk.free_since = now_;
    block(s, r, rk.compute_end, now_, BlockReason::Collective);
    if (opt_.record) res_.tasks[rk.record].end = now_;
    for (const Dep& c : rk.driver.task_ended(task, w_.compute(r, index))) {
      if (!c.cross_stage) continue;
      const int dst = m_.stage_of(c.task);
      const std::int64_t lat = w_.message(r, index);
      if (opt_.comm == CommMode::Blocking)
        offer(Send{s, dst, r, c.task, lat, rk.record});
      else
        transfer(Transfer{dst, r, m_.index(c.task), -1, rk.record, now_, 0}, lat);
    }
  }
  mark_dirty(s);
}

void Simulation::arrive(int s, int r, int consumer) {
  wake_if_idle(s, r);
  const TaskId t = m_.task(consumer);
  // A rank inside a task dispatches when it ends (group_end marks its stage then).
  if (rank(s, r).driver.arrived(t, producer_cost(r, t)) && free(s, r)) mark_dirty(s);
}

// An input reaching a rank with nothing to do wakes its sleeping thread, which then waits for a
// core behind the copies under way (WorkloadParams::comm_wake_us). A rank freed in this very
// instant is awake already, and so is a rank in an agree round (inside the all-gather: not
// free).
void Simulation::wake(int s, int r) {
  if (!free(s, r) || rank(s, r).free_since == now_) return;
  waking_.push_back(queue_of(s, r));  // twice in one instant sizes it twice alike
}

// The copies under way are counted once every event of the instant has landed, as dispatch
// decides then too.
void Simulation::size_pending_wakes() {
  const auto copies = static_cast<std::int64_t>(links_ ? links_->moving_count() : 0);
  for (int q : waking_)
    ranks_[q].awake_at = now_ + w_.wake_ns + copies * w_.wake_per_copy_ns;
  waking_.clear();
}

// What the producer of `consumer`'s input from another stage took, as the runtime's messages
// tell the receiver (the adaptive rule's cost; 0 where the rank reads none).
std::int64_t Simulation::producer_cost(int r, const TaskId& consumer) const {
  if (!reads_costs_) return 0;
  Deps d{};
  const int n = m_.deps(consumer, d);
  for (int i = 0; i < n; ++i)
    if (d[i].cross_stage) return w_.compute(r, m_.index(d[i].task));
  return 0;
}

void Simulation::dispatch_dirty() {
  // Sorted for determinism: the same events always give the same decisions.
  while (!dirty_list_.empty()) {
    if (dirty_list_.size() == 1) {  // the common instant: one event, one stage
      const int s = dirty_list_.front();
      dirty_list_.clear();
      dirty_[s] = 0;
      dispatch(s);
      continue;
    }
    std::vector<int>& now_dirty = dispatching_;  // kept: its capacity outlives the instant
    now_dirty.swap(dirty_list_);
    dirty_list_.clear();
    std::sort(now_dirty.begin(), now_dirty.end());
    for (int s : now_dirty)
      dirty_[s] = 0;
    for (int s : now_dirty)
      dispatch(s);
  }
}

void Simulation::dispatch(int s) {
  if (opt_.comm == CommMode::Blocking) accept_sends(s);  // may deliver inputs: wake-ups
  size_wakes();
  try_dispatch(s);
}

void Simulation::try_dispatch(int s) {
  if (coordinated_ && opt_.tp_protocol == TpProtocol::Agree) return propose(s);
  for (int r = 0; r < t_; ++r) {
    if (!free(s, r)) continue;
    const auto task = rank(s, r).driver.next();
    if (!task) continue;
    launch(s, r, *task);
    // The leader's choice reaches its followers a hop after it is made, by its thread once awake
    // (it left at once, and a follower woken with it started with the leader).
    if (coordinated_ && r == 0) {
      const std::int64_t chosen = std::max(now_, rank(s, r).awake_at);
      for (int o = 1; o < t_; ++o)
        push(chosen + w_.coord_ns, Ev::Choice, s, o, m_.index(*task));
    }
  }
}

// agree, as the runtime's ranks run it: a free rank with something to propose (and leave to:
// RankDriver::propose) proposes at once and waits in the all-gather, booked as blocked
// (coordination) until its round holds every proposal; each proposal reaches the other ranks
// coord_ns later. A rank whose peer has nothing ready yet waits for it in the round, as in the
// runtime (the simulator used to open a round only once every rank had a candidate, which
// booked that wait as idle and proposed later, from fuller ready sets).
void Simulation::propose(int s) {
  for (int r = 0; r < t_; ++r) {
    if (!free(s, r)) continue;
    Rank& rk = rank(s, r);
    const auto p = rk.driver.propose();
    if (!p) continue;
    rk.proposing = true;
    rk.proposed_at = now_;
    const int id = static_cast<int>(proposals_.size());
    proposals_.push_back(SentProposal{r, p->round, m_.index(p->task)});
    for (int o = 0; o < t_; ++o)
      if (o != r) push(now_ + w_.coord_ns, Ev::Proposal, s, o, id);
    if (rk.driver.round_complete()) end_round(s, r);  // the last to propose: its peers' are in
  }
}

void Simulation::proposal_landed(int s, int r, int id) {
  const SentProposal& p = proposals_[id];
  Rank& rk = rank(s, r);
  rk.driver.on_proposal(p.from, p.round, m_.task(p.task));
  if (rk.proposing && rk.driver.round_complete())
    end_round(s, r);
  else
    mark_dirty(s);  // a peer opened a round this rank may join
}

// Every proposal of r's round is in: the agreed task runs; without agreement the rank proposes
// again once its ready set has grown or a peer opens the next round.
void Simulation::end_round(int s, int r) {
  Rank& rk = rank(s, r);
  rk.proposing = false;
  block(s, r, rk.proposed_at, now_, BlockReason::Coordination);
  if (const auto t = rk.driver.decide())
    launch(s, r, *t);
  else
    mark_dirty(s);
}

void Simulation::throw_deadlock() const {
  std::string stuck;
  for (int s = 0; s < p_; ++s)
    for (int r = 0; r < t_; ++r) {
      const RankDriver& d = rank(s, r).driver;
      if (!d.done()) stuck += (stuck.empty() ? "" : " | ") + describe(d.stuck());
    }
  throw DeadlockError("deadlock at t=" + std::to_string(now_) + " ns: " + stuck);
}

}  // namespace sim_state

StepRecord simulate(const WorkModel& m, const Hint& hint, const RealizedWork& work,
                    const SimOptions& opt) {
  return sim_state::Simulation(m, hint, work, opt).run();
}

std::optional<std::int64_t> simulated_makespan(const WorkModel& m, const Hint& hint,
                                               const RealizedWork& work, SimOptions opt) {
  opt.record = false;
  sim_state::Simulation sim(m, hint, work, opt);
  try {
    if (!sim.run_events()) return std::nullopt;
  } catch (const CollectiveMismatchError&) {
    return std::nullopt;  // ranks of a group diverged (tp_protocol none): nor does it finish
  }
  return sim.makespan();
}

}  // namespace rrfp
