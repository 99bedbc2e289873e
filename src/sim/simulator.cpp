#include "sim/simulator.hpp"

#include <algorithm>
#include <array>
#include <memory>

#include "core/error.hpp"
#include "core/stuck_report.hpp"
#include "sim/simulation.hpp"

namespace rrfp {

namespace sim_state {

Simulation::Simulation(const WorkModel& m, const Hint& hint, const RealizedWork& w,
                       const SimOptions& opt)
    : m_(m), w_(w), opt_(opt), p_(m.pp()), t_(w.tp) {
  if (w.num_tasks != m.num_tasks()) throw Error("realized work does not match the work model");
  opt_.arbiter = resolve_options(opt.arbiter, hint, m);
  coordinated_ = t_ > 1 && opt_.tp_protocol != TpProtocol::None;
  costs_ = !(coordinated_ && opt_.tp_protocol == TpProtocol::Agree);
  std::vector<std::int64_t> sizes(m.microbatches());
  for (int mb = 0; mb < m.microbatches(); ++mb)
    sizes[mb] = microbatch_size(m, w, mb);
  ranks_.resize(static_cast<size_t>(p_) * t_);
  groups_.resize(p_);
  for (int s = 0; s < p_; ++s)
    for (int r = 0; r < t_; ++r) {
      Rank& rk = rank(s, r);
      rk.arb = std::make_unique<StageArbiter>(m, s, hint, opt_.arbiter);
      // Sizes are the same on every rank of a group, so unlike costs they hold under `agree`.
      rk.arb->note_entry_sizes(sizes);
      rk.inputs = std::make_unique<Readiness>(m, s, *rk.arb);
      if (opt_.comm == CommMode::Blocking) {
        const bool fixed = opt_.arbiter.policy == Policy::Fixed;
        rk.rendezvous =
            std::make_unique<Rendezvous>(m, fixed ? &hint.list().stages[s] : nullptr, *rk.inputs);
      }
      if (coordinated_ && opt_.tp_protocol == TpProtocol::Leader && r > 0) rk.follower.emplace(r);
      if (coordinated_ && opt_.tp_protocol == TpProtocol::Agree) rk.agree.emplace(r, t_);
    }
  // Queued copies need the links' bookkeeping even where bandwidth is to spare.
  if (w.links > 0 || w.serial_receive || w.two_slowdown > 1)
    links_.emplace(w.links > 0 ? w.links : kNoLimit, w.two_slowdown);
  if (w.serial_receive) parked_.resize(ranks_.size());
  dirty_.assign(p_, 0);
  res_.pp = p_;
  res_.tp = t_;
  res_.arbiter = opt_.arbiter;
  res_.ranks.resize(ranks_.size());
  if (opt_.record) res_.tasks.reserve(static_cast<size_t>(t_) * m.num_tasks());
}

StepRecord Simulation::run() {
  for (int s = 0; s < p_; ++s)
    mark_dirty(s);
  dispatch_dirty();
  while (!events_.empty()) {
    now_ = events_.top().time;
    while (!events_.empty() && events_.top().time == now_) {
      Event e = events_.top();
      events_.pop();
      handle(e);
    }
    size_wakes();      // even where nothing became ready: a wake-up belongs to its instant
    dispatch_dirty();  // decide only once every event of this instant has landed
  }
  check_finished();
  res_.makespan = last_end_;
  res_.peak_d.resize(p_);
  res_.peak_pending_w.resize(p_);
  for (int s = 0; s < p_; ++s)
    for (int r = 0; r < t_; ++r) {
      res_.peak_d[s] = std::max(res_.peak_d[s], rank(s, r).arb->peak_outstanding());
      res_.peak_pending_w[s] = std::max(res_.peak_pending_w[s], rank(s, r).arb->peak_pending_w());
    }
  return std::move(res_);
}

void Simulation::block(int s, int r, std::int64_t from, std::int64_t to, BlockReason why) {
  if (to <= from) return;
  stats(s, r).blocked += to - from;
  if (opt_.record) res_.blocked.push_back(BlockedSpan{s, r, from, to, why});
}

void Simulation::launch(int s, int r, const TaskId& task) {
  Rank& rk = rank(s, r);
  Group& g = groups_[s];
  if (g.launched > 0 && !(g.task == task))
    throw CollectiveMismatchError("stage " + std::to_string(s) + ": tensor-parallel rank " +
                                  std::to_string(r) + " entered the collective of " +
                                  to_string(task) + " while rank(s) of its group are in " +
                                  to_string(g.task) + " (collective order diverged)");
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
  if (++g.launched == t_) push(g.end + w_.collective_ns, Ev::GroupEnd, s, 0, m_.index(task));
}

void Simulation::handle(const Event& e) {
  switch (e.type) {
    case Ev::GroupEnd:
      group_end(e.stage, e.a);
      break;
    case Ev::Arrive:
      arrive(e.stage, e.rank, e.a);
      break;
    case Ev::LinkJoin:
      link_join(e.a);
      break;
    case Ev::LinkEnd:
      link_end();
      break;
    case Ev::SendLanded:
      send_landed(e.a);
      break;
    case Ev::AckLanded:
      ack_landed(e.a);
      break;
    case Ev::CoordDone:
      coord_done(e.stage);
      break;
    case Ev::Choice:
      rank(e.stage, e.rank).follower->on_choice(0, m_.task(e.a));
      mark_dirty(e.stage);
      break;
  }
}

void Simulation::group_end(int s, int index) {
  Group& g = groups_[s];
  g.launched = 0;
  last_end_ = now_;
  if (opt_.progress && (++ended_ & ((1 << 20) - 1)) == 0) opt_.progress(ended_, m_.num_tasks());
  const TaskId task = m_.task(index);
  std::array<Dep, 2> c{};
  const int n = m_.consumers(task, c);
  for (int r = 0; r < t_; ++r) {
    Rank& rk = rank(s, r);
    rk.computing = false;
    rk.free_since = now_;
    block(s, r, rk.compute_end, now_, BlockReason::Collective);
    if (opt_.record) res_.tasks[rk.record].end = now_;
    for (int i = 0; i < n; ++i) {
      if (!c[i].cross_stage) {
        if (costs_) rk.arb->note_cost(c[i].task, w_.compute(r, index));
        ready_if(s, rk.inputs->satisfy(c[i].task));
        continue;
      }
      const int dst = m_.stage_of(c[i].task);
      const std::int64_t lat = w_.message(r, index);
      if (rk.rendezvous)
        offer(Send{s, dst, r, c[i].task, lat, rk.record});
      else
        transfer(Transfer{dst, r, m_.index(c[i].task), -1, rk.record, now_, 0}, lat);
    }
  }
  mark_dirty(s);
}

void Simulation::arrive(int s, int r, int consumer) {
  wake_if_idle(s, r);
  note_input_cost(s, r, m_.task(consumer));
  ready_if(s, rank(s, r).inputs->arrive(m_.task(consumer)));
}

// An input reaching a rank with nothing to do wakes its sleeping thread, which then waits for a
// core behind the copies under way (WorkloadParams::comm_wake_us). A rank freed in this very
// instant is awake already, and so are ranks in an agree round (inside the all-gather).
void Simulation::wake_if_idle(int s, int r) {
  Rank& rk = rank(s, r);
  if (w_.wake_ns == 0 && w_.wake_per_copy_ns == 0) return;
  if (!free(s, r) || rk.free_since == now_) return;
  if (coordinated_ && groups_[s].round) return;
  waking_.push_back(queue_of(s, r));  // twice in one instant sizes it twice alike
}

// The copies under way are counted once every event of the instant has landed, as dispatch
// decides then too.
void Simulation::size_wakes() {
  const auto copies = static_cast<std::int64_t>(links_ ? links_->moving_count() : 0);
  for (int q : waking_)
    ranks_[q].awake_at = now_ + w_.wake_ns + copies * w_.wake_per_copy_ns;
  waking_.clear();
}

// The adaptive rule learns what the producer of a task's input took, as the runtime's
// messages tell it. Not under `agree`: ranks would rank by different measurements.
void Simulation::note_input_cost(int s, int r, const TaskId& consumer) {
  if (!costs_) return;
  std::array<Dep, 2> d{};
  const int n = m_.deps(consumer, d);
  for (int i = 0; i < n; ++i)
    if (d[i].cross_stage) rank(s, r).arb->note_cost(consumer, w_.compute(r, m_.index(d[i].task)));
}

void Simulation::dispatch_dirty() {
  // Sorted for determinism: the same events always give the same decisions.
  while (!dirty_list_.empty()) {
    std::vector<int> now_dirty;
    now_dirty.swap(dirty_list_);
    std::sort(now_dirty.begin(), now_dirty.end());
    for (int s : now_dirty)
      dirty_[s] = 0;
    for (int s : now_dirty) {
      if (opt_.comm == CommMode::Blocking) accept_sends(s);  // may deliver inputs: wake-ups
      size_wakes();
      try_dispatch(s);
    }
  }
}

void Simulation::try_dispatch(int s) {
  if (!coordinated_) {
    for (int r = 0; r < t_; ++r)
      if (free(s, r))
        if (auto task = choose_alone(*rank(s, r).arb)) launch(s, r, *task);
    return;
  }
  if (opt_.tp_protocol == TpProtocol::Leader) {
    if (free(s, 0))
      if (auto task = choose_alone(*rank(s, 0).arb)) {
        launch(s, 0, *task);
        for (int r = 1; r < t_; ++r)
          push(now_ + w_.coord_ns, Ev::Choice, s, r, m_.index(*task));
      }
    for (int r = 1; r < t_; ++r) {
      Rank& rk = rank(s, r);
      if (free(s, r))
        if (auto task = rk.follower->next(*rk.arb)) launch(s, r, *task);
    }
    return;
  }
  start_round(s);
}

// agree: the group's ranks propose together once all are free with something to propose and
// one of them may open a round; the scalar all-gather takes coord_ns.
void Simulation::start_round(int s) {
  Group& g = groups_[s];
  if (g.round) return;
  std::vector<TaskId> proposal(t_);
  int opener = -1;
  for (int r = 0; r < t_; ++r) {
    Rank& rk = rank(s, r);
    if (!free(s, r)) return;
    auto p = rk.arb->peek();
    if (!p) return;  // a rank with nothing to propose waits for its inputs
    proposal[r] = *p;
    if (opener < 0 && rk.agree->may_propose(rk.inputs->version())) opener = r;
  }
  if (opener < 0) return;  // the last round failed and nothing has changed since
  for (int k = 0; k < t_; ++k) {
    const int r = (opener + k) % t_;  // the opener first: the others join its round
    Rank& rk = rank(s, r);
    const int round = rk.agree->propose(proposal[r], rk.inputs->version());
    for (int o = 0; o < t_; ++o)
      if (o != r) rank(s, o).agree->on_proposal(r, round, proposal[r]);
  }
  g.round = true;
  g.round_start = now_;
  ++res_.coordination_rounds;
  push(now_ + w_.coord_ns, Ev::CoordDone, s, 0, 0);
}

void Simulation::coord_done(int s) {
  Group& g = groups_[s];
  g.round = false;
  std::optional<TaskId> agreed;
  for (int r = 0; r < t_; ++r) {
    block(s, r, g.round_start, now_, BlockReason::Coordination);
    Rank& rk = rank(s, r);
    agreed = rk.agree->decide(*rk.arb);  // every rank holds the same proposals
  }
  if (agreed) {
    for (int r = 0; r < t_; ++r)
      launch(s, r, *agreed);
    return;
  }
  ++res_.failed_rounds;
  mark_dirty(s);  // a new round opens only if some rank's ready set has changed
}

void Simulation::check_finished() {
  std::string stuck;
  for (int s = 0; s < p_; ++s)
    for (int r = 0; r < t_; ++r) {
      Rank& rk = rank(s, r);
      if (rk.arb->finished() && !(rk.rendezvous && rk.rendezvous->held())) continue;
      StuckRank view{rk.arb.get(), rk.inputs.get(), rk.rendezvous.get(), {}, {}, r, t_};
      if (rk.follower) view.waiting = rk.follower->waiting();
      if (rk.agree) view.waiting = rk.agree->waiting();
      stuck += (stuck.empty() ? "" : " | ") + describe(view);
    }
  if (!stuck.empty())
    throw DeadlockError("deadlock at t=" + std::to_string(now_) + " ns: " + stuck);
}

}  // namespace sim_state

StepRecord simulate(const WorkModel& m, const Hint& hint, const RealizedWork& work,
                    const SimOptions& opt) {
  return sim_state::Simulation(m, hint, work, opt).run();
}

}  // namespace rrfp
