// The three coordinators of coordinator.hpp.
#include "runtime/coordinator.hpp"

#include "core/clock.hpp"
#include "core/error.hpp"

namespace rrfp {

namespace {

// Each rank arbitrates for itself: T = 1, or protocol none (which exists to show that a
// divergence is caught as a CollectiveMismatchError).
class Alone final : public Coordinator {
 public:
  explicit Alone(StageCore& c) : c_(c) {}
  std::optional<TaskId> choose(Locked& lk, int r) override { return c_.driver(lk, r).next(); }
  void on_control(Locked&, int, int, const MessageTag&) override {
    throw ProtocolError("a control message, but the group does not coordinate");
  }

 private:
  StageCore& c_;
};

// Sends `tag` from rank r to the peers of its group: a local peer's driver takes it at once,
// a remote one gets a control message (sent without the lock).
template <class Deliver>
void tell_peers(StageCore& c, Locked& lk, int r, const MessageTag& tag, Deliver local) {
  std::vector<int> remote;
  for (int o = 0; o < c.tp(); ++o) {
    if (o == r) continue;
    if (c.local(o))
      local(c.driver(lk, o));
    else
      remote.push_back(o);
  }
  c.notify(lk);
  if (remote.empty()) return;
  lk.unlock();
  for (int o : remote)
    c.send(r, c.stage() * c.tp() + o, tag, {});
  lk.relock();
}

class Leader final : public Coordinator {
 public:
  explicit Leader(StageCore& c) : c_(c) {}

  std::optional<TaskId> choose(Locked& lk, int r) override {
    auto t = c_.driver(lk, r).next();  // the leader's own choice, or a follower's next one
    if (!t || r != 0) return t;
    MessageTag tag{c_.step(lk), *t};
    tag.control = Control::Choice;
    tell_peers(c_, lk, r, tag, [&](RankDriver& d) { d.on_choice(0, *t); });
    return t;
  }

  void on_control(Locked& lk, int r, int from, const MessageTag& tag) override {
    if (tag.control != Control::Choice)
      throw ProtocolError("a proposal, but the group follows its leader");
    c_.driver(lk, r).on_choice(from, tag.producer);
  }

 private:
  StageCore& c_;
};

class Agree final : public Coordinator {
 public:
  Agree(StageCore& c, Delivery& d) : c_(c), delivery_(d) {}

  std::optional<TaskId> choose(Locked& lk, int r) override {
    RankDriver& me = c_.driver(lk, r);
    for (;;) {
      const auto p = me.propose();
      if (!p) return std::nullopt;
      MessageTag tag{c_.step(lk), p->task};
      tag.control = Control::Proposal;
      tag.round = p->round;
      const std::int64_t since = now_ns();
      tell_peers(c_, lk, r, tag, [&](RankDriver& d) { d.on_proposal(r, p->round, p->task); });
      if (!c_.wait(
              lk, [&] { return me.round_complete(); }, [&] { delivery_.idle(lk, r); }))
        return std::nullopt;
      c_.record_blocked(lk, r, since, now_ns(), BlockReason::Coordination);
      if (auto t = me.decide()) return t;
    }
  }

  void on_control(Locked& lk, int r, int from, const MessageTag& tag) override {
    if (tag.control != Control::Proposal)
      throw ProtocolError("a leader's choice, but the group agrees by proposals");
    c_.driver(lk, r).on_proposal(from, tag.round, tag.producer);
  }

 private:
  StageCore& c_;
  Delivery& delivery_;
};

}  // namespace

std::unique_ptr<Coordinator> make_coordinator(StageCore& core, Delivery& delivery) {
  const DispatchOptions& d = core.env().dispatch;
  if (!d.coordinated(core.tp())) return std::make_unique<Alone>(core);
  if (d.tp_protocol == TpProtocol::Leader) return std::make_unique<Leader>(core);
  return std::make_unique<Agree>(core, delivery);
}

}  // namespace rrfp
