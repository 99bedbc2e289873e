#include "sim/simulator.hpp"

#include <algorithm>
#include <array>
#include <deque>
#include <memory>
#include <queue>

#include "core/error.hpp"

namespace rrfp {

std::string to_string(CommMode c) {
  return c == CommMode::Async ? "async" : "blocking";
}
CommMode parse_comm(const std::string& s) {
  if (s == "async") return CommMode::Async;
  if (s == "blocking") return CommMode::Blocking;
  throw InputError("--comm: unknown mode '" + s + "' (expected async or blocking)");
}

std::string to_string(TpProtocol p) {
  return p == TpProtocol::Leader ? "leader" : p == TpProtocol::Agree ? "agree" : "none";
}
TpProtocol parse_tp_protocol(const std::string& s) {
  if (s == "leader") return TpProtocol::Leader;
  if (s == "agree") return TpProtocol::Agree;
  if (s == "none") return TpProtocol::None;
  throw InputError("--tp-protocol: unknown protocol '" + s + "' (expected leader or agree)");
}

namespace {

enum class Ev : std::uint8_t { GroupEnd, Arrive, SendDone, CoordDone, Choice };

struct Event {
  std::int64_t time;
  std::uint64_t seq;
  Ev type;
  std::int32_t stage, rank, a;  // a: task index or send id
};
struct Later {
  bool operator()(const Event& x, const Event& y) const {
    return x.time != y.time ? x.time > y.time : x.seq > y.seq;
  }
};

// A rendezvous transfer (blocking mode): starts once the receiver accepts it.
struct Send {
  int src_stage, dst_stage, rank, consumer;
  std::int64_t latency;
};

struct Rank {
  std::unique_ptr<StageArbiter> arb;
  bool computing = false;
  std::int64_t compute_end = 0;
  int held_sends = 0;
  std::int64_t held_since = 0;
  std::deque<TaskId> chosen;  // leader protocol: the leader's choices, in order
  std::vector<int> incoming;  // blocking: sends waiting for this rank to accept
  int recv_pos = 0;           // blocking + fixed: list position of the next posted receive
  std::size_t record = 0;     // index of the running task's record
};

struct Group {
  int launched = 0;
  TaskId task{};
  std::int64_t end = 0;
  bool round = false, changed = false;
  std::int64_t round_start = 0;
  std::vector<std::optional<TaskId>> proposals;
};

class Simulation {
 public:
  Simulation(const WorkModel& m, const Hint& hint, const RealizedWork& w, const SimOptions& opt)
      : m_(m), hint_(hint), w_(w), opt_(opt), p_(m.pp()), t_(w.tp) {
    if (w.num_tasks != m.num_tasks()) throw Error("realized work does not match the work model");
    opt_.arbiter = resolve_options(opt.arbiter, hint, m);
    ranks_.resize(static_cast<size_t>(p_) * t_);
    groups_.resize(p_);
    for (int s = 0; s < p_; ++s) {
      groups_[s].proposals.resize(t_);
      for (int r = 0; r < t_; ++r)
        rank(s, r).arb = std::make_unique<StageArbiter>(m, s, hint, opt_.arbiter);
    }
    missing_.assign(static_cast<size_t>(t_) * m.num_tasks(), 0);
    received_.assign(static_cast<size_t>(t_) * m.num_tasks(), 0);
    dirty_.assign(p_, 0);
    res_.pp = p_;
    res_.tp = t_;
    res_.arbiter = opt_.arbiter;
    res_.ranks.resize(ranks_.size());
    if (opt_.record) res_.tasks.reserve(static_cast<size_t>(t_) * m.num_tasks());
  }

  SimResult run() {
    std::array<Dep, 2> d{};
    for (int i = 0; i < m_.num_tasks(); ++i) {
      const TaskId task = m_.task(i);
      const int n = m_.deps(task, d);
      for (int r = 0; r < t_; ++r) {
        missing_[static_cast<size_t>(r) * m_.num_tasks() + i] = static_cast<std::int8_t>(n);
        if (n == 0) rank(m_.stage_of(task), r).arb->mark_ready(task);
      }
    }
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
  bool free(int s, int r) { return !rank(s, r).computing && rank(s, r).held_sends == 0; }

  void push(std::int64_t time, Ev type, int stage, int r, int a) {
    events_.push(Event{time, seq_++, type, stage, r, a});
  }
  void mark_dirty(int s) {
    if (!dirty_[s]) {
      dirty_[s] = 1;
      dirty_list_.push_back(s);
    }
  }

  void block(int s, int r, std::int64_t from, std::int64_t to, BlockReason why) {
    if (to <= from) return;
    stats(s, r).blocked += to - from;
    if (opt_.record) res_.blocked.push_back(BlockedSpan{s, r, from, to, why});
  }

  // One input of a task on (stage, rank) is present.
  void satisfy(int s, int r, int index) {
    if (--missing_[static_cast<size_t>(r) * m_.num_tasks() + index] == 0) {
      rank(s, r).arb->mark_ready(m_.task(index));
      groups_[s].changed = true;
      mark_dirty(s);
    }
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
        satisfy(e.stage, e.rank, e.a);
        break;
      case Ev::SendDone:
        send_done(e.a);
        break;
      case Ev::CoordDone:
        coord_done(e.stage);
        break;
      case Ev::Choice:
        rank(e.stage, e.rank).chosen.push_back(m_.task(e.a));
        mark_dirty(e.stage);
        break;
    }
  }

  void group_end(int s, int index) {
    Group& g = groups_[s];
    g.launched = 0;
    last_end_ = now_;
    const TaskId task = m_.task(index);
    std::array<Dep, 2> c{};
    const int n = m_.consumers(task, c);
    for (int r = 0; r < t_; ++r) {
      Rank& rk = rank(s, r);
      rk.computing = false;
      block(s, r, rk.compute_end, now_, BlockReason::Collective);
      if (opt_.record) res_.tasks[rk.record].end = now_;
      for (int i = 0; i < n; ++i) {
        const int ci = m_.index(c[i].task);
        if (!c[i].cross_stage) {
          satisfy(s, r, ci);
          continue;
        }
        const int dst = m_.stage_of(c[i].task);
        const std::int64_t lat = w_.message(r, index);
        if (opt_.comm == CommMode::Async) {
          push(now_ + lat, Ev::Arrive, dst, r, ci);
        } else {
          if (rk.held_sends++ == 0) rk.held_since = now_;
          rank(dst, r).incoming.push_back(static_cast<int>(sends_.size()));
          sends_.push_back(Send{s, dst, r, ci, lat});
          mark_dirty(dst);
        }
      }
    }
    mark_dirty(s);
  }

  void send_done(int id) {
    const Send& sd = sends_[id];
    received_[static_cast<size_t>(sd.rank) * m_.num_tasks() + sd.consumer] = 1;
    satisfy(sd.dst_stage, sd.rank, sd.consumer);
    Rank& src = rank(sd.src_stage, sd.rank);
    if (--src.held_sends == 0)
      block(sd.src_stage, sd.rank, src.held_since, now_, BlockReason::Send);
    mark_dirty(sd.src_stage);
  }

  // Blocking mode: a transfer is a rendezvous. Under `fixed` a stage posts its receives one at a
  // time in its list order (Megatron's batched send/recv: a stage held on its own send still
  // receives), so a transfer starts when its consumer is the next task awaiting a cross-stage
  // input and the receiver is not computing. Under `ready` any idle receiver takes it.
  int posted_receive(int s, int r) {
    const size_t base = static_cast<size_t>(r) * m_.num_tasks();
    return next_posted_receive(m_, hint_.list().stages[s], rank(s, r).recv_pos,
                               [&](int idx) { return received_[base + idx] != 0; });
  }

  void accept_sends(int s) {
    for (int r = 0; r < t_; ++r) {
      Rank& rk = rank(s, r);
      if (rk.computing || rk.incoming.empty()) continue;
      const bool any = opt_.arbiter.policy == Policy::Ready;
      const int posted = any ? -1 : posted_receive(s, r);
      auto keep = rk.incoming.begin();
      for (int id : rk.incoming) {
        const Send& sd = sends_[id];
        if (any || sd.consumer == posted)
          push(now_ + sd.latency, Ev::SendDone, s, r, id);
        else
          *keep++ = id;
      }
      rk.incoming.erase(keep, rk.incoming.end());
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
    if (t_ == 1 || opt_.tp_protocol == TpProtocol::None) {
      for (int r = 0; r < t_; ++r) {
        if (!free(s, r)) continue;
        StageArbiter& a = *rank(s, r).arb;
        if (auto task = a.peek()) {
          a.commit(*task);
          launch(s, r, *task);
        }
      }
      return;
    }
    if (opt_.tp_protocol == TpProtocol::Leader) {
      if (free(s, 0)) {
        StageArbiter& a = *rank(s, 0).arb;
        if (auto task = a.peek()) {
          a.commit(*task);
          launch(s, 0, *task);
          for (int r = 1; r < t_; ++r)
            push(now_ + w_.coord_ns, Ev::Choice, s, r, m_.index(*task));
        }
      }
      for (int r = 1; r < t_; ++r) {
        Rank& rk = rank(s, r);
        if (!free(s, r) || rk.chosen.empty() || !rk.arb->is_ready(rk.chosen.front())) continue;
        const TaskId task = rk.chosen.front();
        rk.chosen.pop_front();
        rk.arb->commit(task);
        launch(s, r, task);
      }
      return;
    }
    // agree: every rank proposes; a scalar all-gather compares the proposals.
    Group& g = groups_[s];
    if (g.round) return;
    for (int r = 0; r < t_; ++r)
      if (!free(s, r)) return;
    for (int r = 0; r < t_; ++r) {
      g.proposals[r] = rank(s, r).arb->peek();
      if (!g.proposals[r]) return;  // a rank with nothing to propose waits for its inputs
    }
    g.round = true;
    g.changed = false;
    g.round_start = now_;
    ++res_.coordination_rounds;
    push(now_ + w_.coord_ns, Ev::CoordDone, s, 0, 0);
  }

  void coord_done(int s) {
    Group& g = groups_[s];
    g.round = false;
    for (int r = 0; r < t_; ++r)
      block(s, r, g.round_start, now_, BlockReason::Coordination);
    bool agree = true;
    for (int r = 1; r < t_; ++r)
      agree &= *g.proposals[r] == *g.proposals[0];
    if (agree) {
      for (int r = 0; r < t_; ++r) {
        rank(s, r).arb->commit(*g.proposals[0]);
        launch(s, r, *g.proposals[0]);
      }
      return;
    }
    // Nobody runs; retry from the top of the hint once some rank's ready set has changed.
    ++res_.failed_rounds;
    if (g.changed) mark_dirty(s);
  }

  void check_finished() {
    std::string stuck;
    for (int s = 0; s < p_; ++s)
      for (int r = 0; r < t_; ++r) {
        Rank& rk = rank(s, r);
        if (rk.arb->finished()) continue;
        if (!stuck.empty()) stuck += " | ";
        stuck += rk.arb->describe() + (t_ > 1 ? " [tp rank " + std::to_string(r) + "]" : "");
        if (rk.held_sends) stuck += ", held on " + std::to_string(rk.held_sends) + " send(s)";
        if (!rk.incoming.empty())
          stuck += ", " + std::to_string(rk.incoming.size()) + " transfer(s) not accepted";
      }
    if (!stuck.empty())
      throw DeadlockError("deadlock at t=" + std::to_string(now_) + " ns: " + stuck);
  }

  const WorkModel& m_;
  const Hint& hint_;
  const RealizedWork& w_;
  SimOptions opt_;
  int p_, t_;
  std::vector<Rank> ranks_;
  std::vector<Group> groups_;
  std::vector<std::int8_t> missing_;
  std::vector<char> received_;  // blocking: the task's cross-stage input has been delivered
  std::vector<Send> sends_;
  std::priority_queue<Event, std::vector<Event>, Later> events_;
  std::vector<char> dirty_;
  std::vector<int> dirty_list_;
  std::int64_t now_ = 0, last_end_ = 0;
  std::uint64_t seq_ = 0;
  SimResult res_;
};

}  // namespace

SimResult simulate(const WorkModel& m, const Hint& hint, const RealizedWork& work,
                   const SimOptions& opt) {
  return Simulation(m, hint, work, opt).run();
}

}  // namespace rrfp
