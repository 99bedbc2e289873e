#include "sim/simulator.hpp"

#include <algorithm>
#include <array>
#include <memory>
#include <optional>
#include <queue>

#include "core/error.hpp"
#include "core/stuck_report.hpp"
#include "sim/shared_links.hpp"
#include "sim/sim_state.hpp"

namespace rrfp {

namespace {

using namespace sim_state;

class Simulation {
 public:
  Simulation(const WorkModel& m, const Hint& hint, const RealizedWork& w, const SimOptions& opt)
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

  StepRecord run() {
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

 private:
  Rank& rank(int s, int r) { return ranks_[static_cast<size_t>(s) * t_ + r]; }
  RankStats& stats(int s, int r) { return res_.ranks[static_cast<size_t>(s) * t_ + r]; }
  bool free(int s, int r) {
    Rank& rk = rank(s, r);
    return !rk.computing && !(rk.rendezvous && rk.rendezvous->held() > 0);
  }

  void push(std::int64_t time, Ev type, int stage, int r, int a) {
    events_.push(Event{time, seq_++, type, stage, r, a});
  }
  void mark_dirty(int s) {
    if (!dirty_[s]) {
      dirty_[s] = 1;
      dirty_list_.push_back(s);
    }
  }
  void ready_if(int s, bool became_ready) {
    if (became_ready) mark_dirty(s);
  }

  void block(int s, int r, std::int64_t from, std::int64_t to, BlockReason why) {
    if (to <= from) return;
    stats(s, r).blocked += to - from;
    if (opt_.record) res_.blocked.push_back(BlockedSpan{s, r, from, to, why});
  }

  void launch(int s, int r, const TaskId& task) {
    Rank& rk = rank(s, r);
    Group& g = groups_[s];
    if (g.launched > 0 && !(g.task == task))
      throw CollectiveMismatchError("stage " + std::to_string(s) + ": tensor-parallel rank " +
                                    std::to_string(r) + " entered the collective of " +
                                    to_string(task) + " while rank(s) of its group are in " +
                                    to_string(g.task) + " (collective order diverged)");
    const std::int64_t d = w_.compute(r, m_.index(task));
    rk.computing = true;
    rk.compute_end = now_ + d;
    stats(s, r).busy += d;
    if (opt_.record) {
      rk.record = res_.tasks.size();
      res_.tasks.push_back(TaskRecord{task, s, r, now_, now_ + d, 0});
    }
    if (g.launched == 0) {
      g.task = task;
      g.end = 0;
    }
    g.end = std::max(g.end, rk.compute_end);
    if (++g.launched == t_) push(g.end + w_.collective_ns, Ev::GroupEnd, s, 0, m_.index(task));
  }

  void handle(const Event& e) {
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
      case Ev::SendDone:
        send_done(e.a);
        break;
      case Ev::OfferLanded:
        offer_landed(e.a);
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

  void group_end(int s, int index) {
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
        if (!rk.rendezvous) {
          transfer(Transfer{dst, r, m_.index(c[i].task), -1, rk.record, now_, 0}, lat);
          continue;
        }
        if (rk.rendezvous->held() == 0) rk.held_since = now_;
        rk.rendezvous->offered();
        const int id = static_cast<int>(sends_.size());
        sends_.push_back(Send{s, dst, r, c[i].task, lat, rk.record});
        if (w_.offer_payload) {  // the bytes first: the offer is seen once they have landed
          transfer(Transfer{dst, r, m_.index(c[i].task), id, rk.record, now_, 0}, lat);
          continue;
        }
        offer_landed(id);
      }
    }
    mark_dirty(s);
  }

  void arrive(int s, int r, int consumer) {
    note_input_cost(s, r, m_.task(consumer));
    ready_if(s, rank(s, r).inputs->arrive(m_.task(consumer)));
  }

  // The adaptive rule learns what the producer of a task's input took, as the runtime's
  // messages tell it. Not under `agree`: ranks would rank by different measurements.
  void note_input_cost(int s, int r, const TaskId& consumer) {
    if (!costs_) return;
    std::array<Dep, 2> d{};
    const int n = m_.deps(consumer, d);
    for (int i = 0; i < n; ++i)
      if (d[i].cross_stage) rank(s, r).arb->note_cost(consumer, w_.compute(r, m_.index(d[i].task)));
  }

  int queue_of(int s, int r) const { return s * t_ + r; }

  // A rendezvous offer reaches its receiver, which accepts it when its rendezvous lets it.
  void offer_landed(int id) {
    const Send& sd = sends_[id];
    rank(sd.dst_stage, sd.rank).rendezvous->on_offer(sd.consumer, id);
    mark_dirty(sd.dst_stage);
  }

  // A rendezvous transfer has landed (or, its payload with the offer, has been accepted): the
  // consumer has its input, and the receiver's acknowledgement releases the sender.
  void send_done(int id) {
    const Send& sd = sends_[id];
    note_input_cost(sd.dst_stage, sd.rank, sd.consumer);
    rank(sd.dst_stage, sd.rank).inputs->deliver(sd.consumer);
    mark_dirty(sd.dst_stage);  // its next posted receive may be another offer's
    if (w_.offer_payload) {
      push(now_ + w_.link_latency_ns, Ev::AckLanded, 0, 0, id);
      return;
    }
    ack_landed(id);
  }
  // Where each process copies its arrivals one at a time (WorkloadParams::comm_serial_receive)
  // and the sender's is inside a copy, the thread that would take the acknowledgement in is
  // busy: the release waits for that copy's end.
  void ack_landed(int id) {
    const Send& sd = sends_[id];
    if (w_.serial_receive && links_->moving(queue_of(sd.src_stage, sd.rank))) {
      parked_[queue_of(sd.src_stage, sd.rank)].push_back(id);
      return;
    }
    release(id);
  }
  void release(int id) {
    const Send& sd = sends_[id];
    Rank& src = rank(sd.src_stage, sd.rank);
    if (src.rendezvous->acknowledged())
      block(sd.src_stage, sd.rank, src.held_since, now_, BlockReason::Send);
    mark_dirty(sd.src_stage);
  }

  // A message of `lat` starts now: it lands `lat` later on its own, or, on shared links, once
  // its latency has passed and its bytes have moved at the rate the links leave it.
  void transfer(Transfer t, std::int64_t lat) {
    if (!links_) {
      if (opt_.record) res_.tasks[t.record].send_ns = lat;
      const Ev landing = t.send < 0         ? Ev::Arrive
                         : w_.offer_payload ? Ev::OfferLanded
                                            : Ev::SendDone;
      push(now_ + lat, landing, t.dst_stage, t.rank, t.send < 0 ? t.consumer : t.send);
      return;
    }
    const std::int64_t alone = std::min(lat, w_.link_latency_ns);
    t.bytes_ns = lat - alone;
    push(now_ + alone, Ev::LinkJoin, 0, 0, static_cast<int>(transfers_.size()));
    transfers_.push_back(t);
  }
  void link_join(int id) {
    const Transfer& t = transfers_[id];
    links_->add(now_, t.bytes_ns, id, w_.serial_receive ? queue_of(t.dst_stage, t.rank) : -1);
    watch_links();
  }
  void watch_links() {
    if (auto end = links_->next_end()) {
      links_version_ = links_->version();
      push(*end, Ev::LinkEnd, 0, 0, 0);
    }
  }
  void link_end() {
    if (links_->version() != links_version_) return;  // the links changed since: a later event
    for (int id : links_->finish(now_)) {
      const Transfer& t = transfers_[id];
      // The trace keeps the time shared too, so its replay (each message on its own) is this
      // very step.
      if (opt_.record) res_.tasks[t.record].send_ns = now_ - t.start;
      if (t.send < 0)
        arrive(t.dst_stage, t.rank, t.consumer);
      else if (w_.offer_payload)
        offer_landed(t.send);
      else
        send_done(t.send);
    }
    for (std::size_t q = 0; q < parked_.size(); ++q)
      if (!parked_[q].empty() && !links_->moving(static_cast<int>(q))) {
        std::vector<int> ids;
        ids.swap(parked_[q]);
        for (int id : ids)
          release(id);
      }
    watch_links();
  }

  // Blocking mode: a rank that is not computing accepts what its rendezvous lets it. An offer
  // that brought its payload delivers its input at once, which may post the next receive (under
  // `fixed`): that one's offer is accepted too, before the rank computes, as the runtime's idle
  // rank does.
  void accept_sends(int s) {
    for (int r = 0; r < t_; ++r) {
      Rank& rk = rank(s, r);
      if (rk.computing) continue;
      while (rk.rendezvous->has_offers()) {
        const std::vector<Rendezvous::Offer> offers = rk.rendezvous->take_acceptable();
        if (offers.empty()) break;
        for (const Rendezvous::Offer& o : offers) {
          const Send& sd = sends_[o.handle];
          if (w_.offer_payload)
            send_done(o.handle);
          else
            transfer(Transfer{s, r, m_.index(sd.consumer), o.handle, sd.record, now_, 0},
                     sd.latency);
        }
        if (!w_.offer_payload) break;  // the next receive is posted once these bytes land
      }
    }
  }

  void dispatch_dirty() {
    // Sorted for determinism: the same events always give the same decisions.
    while (!dirty_list_.empty()) {
      std::vector<int> now_dirty;
      now_dirty.swap(dirty_list_);
      std::sort(now_dirty.begin(), now_dirty.end());
      for (int s : now_dirty)
        dirty_[s] = 0;
      for (int s : now_dirty) {
        if (opt_.comm == CommMode::Blocking) accept_sends(s);
        try_dispatch(s);
      }
    }
  }

  void try_dispatch(int s) {
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
  void start_round(int s) {
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

  void coord_done(int s) {
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

  void check_finished() {
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

  const WorkModel& m_;
  const RealizedWork& w_;
  SimOptions opt_;
  int p_, t_;
  bool coordinated_ = false;  // T > 1 with a protocol
  bool costs_ = true;         // tell arbiters what inputs' producers took (adaptive rule)
  std::vector<Rank> ranks_;
  std::vector<Group> groups_;
  std::vector<Send> sends_;
  std::optional<SharedLinks> links_;        // WorkloadParams::comm_links; none: each on its own
  std::vector<Transfer> transfers_;         // on the links, by token
  std::uint64_t links_version_ = 0;         // the links' version the last LinkEnd was pushed for
  std::vector<std::vector<int>> parked_;    // per process: releases waiting for its copy to end
  static constexpr double kNoLimit = 4096;  // capacity where only the queues hold transfers
  std::priority_queue<Event, std::vector<Event>, Later> events_;
  std::vector<char> dirty_;
  std::vector<int> dirty_list_;
  std::int64_t now_ = 0, last_end_ = 0;
  std::uint64_t seq_ = 0;
  std::int64_t ended_ = 0;  // group tasks done (for progress)
  StepRecord res_;
};

}  // namespace

StepRecord simulate(const WorkModel& m, const Hint& hint, const RealizedWork& work,
                    const SimOptions& opt) {
  return Simulation(m, hint, work, opt).run();
}

}  // namespace rrfp
