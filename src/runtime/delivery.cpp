// The two deliveries of delivery.hpp.
#include "runtime/delivery.hpp"

#include <algorithm>

#include "core/clock.hpp"
#include "core/error.hpp"

namespace rrfp {

namespace {

MessageTag data_tag(int step, const TaskId& producer, std::int64_t cost_ns) {
  MessageTag t{step, producer};
  t.cost_ns = cost_ns;
  return t;
}

int destination(const StageCore& c, int r, const TaskId& consumer) {
  return c.m().stage_of(consumer) * c.tp() + r;
}

// async (rrfp): an arrival is an input at once; sends leave without waiting for the receiver,
// after the emulated latency when there is one.
class AsyncDelivery final : public Delivery {
 public:
  explicit AsyncDelivery(StageCore& c) : c_(c) {}

  void begin_step(Locked&) override {}

  void on_data(Locked& lk, int r, const TaskId& consumer, Message&& msg,
               std::vector<Outgoing>&) override {
    if (msg.tag.offer) throw ProtocolError("is an offer, and this stage sends asynchronously");
    StageRank& rk = c_.rank(lk, r);
    const bool ready = rk.driver->arrived(consumer, msg.tag.cost_ns);  // refuses a second one
    rk.input[c_.m().local_index(consumer)] = std::move(msg.payload);
    rk.arrived[c_.m().local_index(consumer)] = now_ns();
    if (ready) c_.notify(lk);
  }

  void on_ack(Locked&, int, const Message&) override {
    throw ProtocolError("acknowledges no pending send (this stage sends asynchronously)");
  }
  void on_pull(Locked&, int, const Message&, std::vector<Outgoing>&) override {
    throw ProtocolError("asks for an output never offered (this stage sends asynchronously)");
  }

  bool idle(Locked&, int) override { return false; }

  void output(Locked& lk, int r, const TaskId& producer, const TaskId& consumer, const Payload& out,
              std::int64_t end, std::int64_t cost_ns, std::vector<Outgoing>& sends) override {
    const std::int64_t lat = c_.env().latency ? c_.env().latency(r, producer) : 0;
    sends.push_back(Outgoing{destination(c_, r, consumer), data_tag(c_.step(lk), producer, cost_ns),
                             out, end + lat});
  }

 private:
  StageCore& c_;
};

// blocking (the baseline): core/rendezvous.hpp decides what is offered, accepted and held;
// this delivers the input at the acceptance (after the emulated latency, if any) and
// acknowledges it. The offer carries the payload, or, with RuntimeOptions::rendezvous_pull,
// leaves it with the sender until the receiver, having accepted, pulls it: over a transport
// that moves bytes, the first lets the copy overlap the receiver's compute, which Megatron's
// batched send/recv cannot; the second costs two more control messages (docs/runtime.md).
class RendezvousDelivery final : public Delivery {
 public:
  explicit RendezvousDelivery(StageCore& c)
      : c_(c), ranks_(c.tp()), pull_(c.env().rendezvous_pull) {}

  void begin_step(Locked&) override {
    for (int r = 0; r < c_.tp(); ++r) {
      PerRank& pr = ranks_[r];
      pr.offered.clear();
      pr.offered_at.clear();
      pr.unsent.clear();
      pr.pulled.clear();
    }
  }

  void on_data(Locked& lk, int r, const TaskId& consumer, Message&& msg,
               std::vector<Outgoing>& replies) override {
    PerRank& pr = ranks_[r];
    if (pull_ && !msg.tag.offer) {  // a pulled payload
      const auto it = std::find(pr.pulled.begin(), pr.pulled.end(), consumer);
      if (it == pr.pulled.end())
        throw ProtocolError("brings a payload that " + to_string(consumer) +
                            " did not ask for (rendezvous: offer, pull, then the payload)");
      pr.pulled.erase(it);
      replies.push_back(deliver(lk, r, consumer, std::move(msg)));
      return;
    }
    if (msg.tag.offer && !pull_)
      throw ProtocolError(
          "is an offer without its payload, which this stage expects with the "
          "offer (emulated latency)");
    c_.driver(lk, r).offered(consumer, static_cast<int>(pr.offered.size()));
    pr.offered.push_back(std::move(msg));
    pr.offered_at.push_back(now_ns());
    c_.notify(lk);  // accepted by the rank's own thread when it is idle
    poke(r);        // or waiting in its group's collective
  }

  void on_pull(Locked&, int r, const Message& msg, std::vector<Outgoing>& replies) override {
    PerRank& pr = ranks_[r];
    const auto it = std::find_if(pr.unsent.begin(), pr.unsent.end(), [&](const Unsent& u) {
      return u.tag.producer == msg.tag.producer;
    });
    if (it == pr.unsent.end() || it->dst != msg.src)
      throw ProtocolError("asks for an output this rank has not offered to it, or has sent");
    replies.push_back(Outgoing{it->dst, it->tag, std::move(it->payload)});
    pr.unsent.erase(it);
  }

  void on_ack(Locked& lk, int r, const Message&) override {
    if (!c_.driver(lk, r).released()) return;
    c_.record_blocked(lk, r, ranks_[r].held_since, now_ns(), BlockReason::Send);
    c_.notify(lk);
  }

  // Loops until no acceptable offer is left: completing a transfer inline releases the lock,
  // and an offer arriving meanwhile must not wait for a wake-up that already happened.
  bool idle(Locked& lk, int r) override {
    PerRank& pr = ranks_[r];
    bool accepted = false;
    for (;;) {
      const std::vector<Rendezvous::Offer> start = c_.driver(lk, r).accept();
      if (start.empty()) return accepted;
      accepted = true;
      const std::int64_t now = now_ns();
      std::vector<std::function<void()>> inline_now;
      StageRank& rk = c_.rank(lk, r);
      for (const Rendezvous::Offer& o : start) {
        rk.offer_wait[c_.m().local_index(o.consumer)] = now - pr.offered_at[o.handle];
        Message msg = std::move(pr.offered[o.handle]);
        if (pull_) {
          pr.pulled.push_back(o.consumer);
          MessageTag pull = msg.tag;
          pull.offer = false;
          pull.pull = true;
          inline_now.push_back([this, r, src = msg.src, pull] { c_.send(r, src, pull, {}); });
          continue;
        }
        const std::int64_t lat = c_.env().latency ? c_.env().latency(r, msg.tag.producer) : 0;
        auto done = [this, r, consumer = o.consumer, msg = std::move(msg)]() mutable {
          complete(r, consumer, std::move(msg));
        };
        if (c_.env().delay && lat > 0)
          c_.env().delay->post(now + lat, std::move(done));
        else
          inline_now.push_back(std::move(done));
      }
      if (inline_now.empty()) return accepted;
      lk.unlock();  // completing or pulling sends a message: never with the stage lock held
      for (auto& f : inline_now)
        f();
      lk.relock();
    }
  }

  void output(Locked& lk, int r, const TaskId& producer, const TaskId& consumer, const Payload& out,
              std::int64_t end, std::int64_t cost_ns, std::vector<Outgoing>& sends) override {
    PerRank& pr = ranks_[r];
    RankDriver& d = c_.driver(lk, r);
    if (!d.held()) pr.held_since = end;
    d.sent();  // the latency runs from the receiver's acceptance
    const int dst = destination(c_, r, consumer);
    const MessageTag tag = data_tag(c_.step(lk), producer, cost_ns);
    if (!pull_) {
      sends.push_back(Outgoing{dst, tag, out});
      return;
    }
    pr.unsent.push_back(Unsent{dst, tag, out});
    MessageTag offer = tag;
    offer.offer = true;
    sends.push_back(Outgoing{dst, offer, {}});
  }

 private:
  struct Unsent {  // pull mode: an offered output, until its receiver pulls it
    int dst;
    MessageTag tag;
    Payload payload;
  };
  struct PerRank {
    std::vector<Message> offered;          // by offer handle
    std::vector<std::int64_t> offered_at;  // by offer handle: when it came
    std::vector<Unsent> unsent;
    std::vector<TaskId> pulled;  // pull mode: accepted inputs whose payload is on its way
    std::int64_t held_since = 0;
  };

  // The input is delivered; returns its acknowledgement, to send unlocked.
  Outgoing deliver(Locked& lk, int r, const TaskId& consumer, Message msg) {
    StageRank& rk = c_.rank(lk, r);
    rk.input[c_.m().local_index(consumer)] = std::move(msg.payload);
    rk.arrived[c_.m().local_index(consumer)] = now_ns();
    rk.driver->delivered(consumer, msg.tag.cost_ns);
    c_.notify(lk);  // the next posted receive may now be another offer's
    poke(r);
    MessageTag ack = msg.tag;
    ack.ack = true;
    ack.offer = false;
    return Outgoing{msg.src, ack, {}};
  }

  // A rank waiting inside a task for its group's collective accepts too (Stage::Acceptor).
  void poke(int r) {
    if (c_.tp() > 1 && c_.group() != nullptr) c_.group()->poke(r);
  }

  void complete(int r, const TaskId& consumer, Message msg) {
    Outgoing ack;
    {
      Locked lk = c_.lock();
      if (c_.failure().failed()) return;
      ack = deliver(lk, r, consumer, std::move(msg));
    }
    c_.send(r, ack.dst, ack.tag, {});
  }

  StageCore& c_;
  std::vector<PerRank> ranks_;
  const bool pull_;
};

}  // namespace

std::unique_ptr<Delivery> make_delivery(StageCore& core) {
  if (core.env().dispatch.comm == CommMode::Blocking)
    return std::make_unique<RendezvousDelivery>(core);
  return std::make_unique<AsyncDelivery>(core);
}

}  // namespace rrfp
