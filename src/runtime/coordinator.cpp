// The three coordinators of coordinator.hpp.
#include "runtime/coordinator.hpp"

#include "core/clock.hpp"
#include "core/error.hpp"
#include "core/tp_choice.hpp"

namespace rrfp {

namespace {

// Each rank arbitrates for itself: T = 1, or protocol none (which exists to show that a
// divergence is caught as a CollectiveMismatchError).
class Alone final : public Coordinator {
 public:
  explicit Alone(StageCore& c) : c_(c) {}
  void begin_step() override {}
  std::optional<TaskId> choose(std::unique_lock<std::mutex>&, int r) override {
    return choose_alone(*c_.rank(r).arb);
  }
  void on_control(int, int, const MessageTag&) override {
    throw ProtocolError("a control message, but the group does not coordinate");
  }
  std::string waiting(int) const override { return {}; }

 private:
  StageCore& c_;
};

// Sends `tag` from rank r to the peers of its group: a local peer's state machine takes it at
// once (lock held), a remote one gets a control message (sent without the lock).
template <class Deliver>
void tell_peers(StageCore& c, std::unique_lock<std::mutex>& lk, int r, const MessageTag& tag,
                Deliver local) {
  std::vector<int> remote;
  for (int o = 0; o < c.tp; ++o) {
    if (o == r) continue;
    if (c.rank(o).local())
      local(o);
    else
      remote.push_back(o);
  }
  c.cv.notify_all();
  if (remote.empty()) return;
  lk.unlock();
  for (int o : remote)
    c.send(r, c.stage * c.tp + o, tag, {});
  lk.lock();
}

class Leader final : public Coordinator {
 public:
  explicit Leader(StageCore& c) : c_(c) {}

  void begin_step() override {
    followers_.clear();
    for (int r = 0; r < c_.tp; ++r)
      followers_.emplace_back(r);
  }

  std::optional<TaskId> choose(std::unique_lock<std::mutex>& lk, int r) override {
    StageArbiter& arb = *c_.rank(r).arb;
    if (r != 0) return followers_[r].next(arb);
    auto t = choose_alone(arb);
    if (!t) return t;
    MessageTag tag{c_.step, *t};
    tag.control = Control::Choice;
    tell_peers(c_, lk, r, tag, [&](int o) { followers_[o].on_choice(0, *t); });
    return t;
  }

  void on_control(int r, int from, const MessageTag& tag) override {
    if (tag.control != Control::Choice)
      throw ProtocolError("a proposal, but the group follows its leader");
    followers_[r].on_choice(from, tag.producer);
  }

  std::string waiting(int r) const override {
    return r == 0 ? std::string() : followers_[r].waiting();
  }

 private:
  StageCore& c_;
  std::vector<LeaderFollower> followers_;  // by tp rank (rank 0's is unused)
};

class Agree final : public Coordinator {
 public:
  explicit Agree(StageCore& c) : c_(c) {}

  void begin_step() override {
    rounds_.clear();
    for (int r = 0; r < c_.tp; ++r)
      rounds_.emplace_back(r, c_.tp);
  }

  std::optional<TaskId> choose(std::unique_lock<std::mutex>& lk, int r) override {
    StageRank& rk = c_.rank(r);
    AgreeRound& me = rounds_[r];
    for (;;) {
      if (!me.may_propose(rk.inputs->version())) return std::nullopt;
      const auto proposal = rk.arb->peek();
      if (!proposal) return std::nullopt;
      const int round = me.propose(*proposal, rk.inputs->version());
      MessageTag tag{c_.step, *proposal};
      tag.control = Control::Proposal;
      tag.round = round;
      const std::int64_t since = now_ns();
      tell_peers(c_, lk, r, tag, [&](int o) { rounds_[o].on_proposal(r, round, *proposal); });
      if (!c_.wait(lk, r, [&] { return me.complete(); })) return std::nullopt;
      c_.record_blocked(r, since, now_ns(), BlockReason::Coordination);
      if (auto t = me.decide(*rk.arb)) return t;
    }
  }

  void on_control(int r, int from, const MessageTag& tag) override {
    if (tag.control != Control::Proposal)
      throw ProtocolError("a leader's choice, but the group agrees by proposals");
    rounds_[r].on_proposal(from, tag.round, tag.producer);
  }

  std::string waiting(int r) const override { return rounds_[r].waiting(); }
  std::int64_t rounds(int r) const override { return rounds_[r].rounds(); }
  std::int64_t failed_rounds(int r) const override { return rounds_[r].failed_rounds(); }

 private:
  StageCore& c_;
  std::vector<AgreeRound> rounds_;  // by tp rank
};

}  // namespace

std::unique_ptr<Coordinator> make_coordinator(StageCore& core) {
  if (core.tp == 1 || core.env.protocol == TpProtocol::None) return std::make_unique<Alone>(core);
  if (core.env.protocol == TpProtocol::Leader) return std::make_unique<Leader>(core);
  return std::make_unique<Agree>(core);
}

}  // namespace rrfp
