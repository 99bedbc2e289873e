// The simulator's messages (sim/simulation.hpp): each on its own or sharing the links, and the
// rendezvous of blocking mode, whose offers, acceptances and acknowledgements core/rendezvous.hpp
// decides.
#include <algorithm>
#include <vector>

#include "sim/simulation.hpp"

namespace rrfp::sim_state {

namespace {

// `item`'s id in `list`: a freed one first. Sends' and transfers' ids are handles alone (events
// are ordered by time and sequence, the links' transfers by when they joined), and lists of
// every message of the step, kept to its end, were most of a run's memory (a blocking run at
// P=M=2048: 503 of 693 MB; over shared links, 40 bytes a message more).
template <class T>
int place(std::vector<T>& list, std::vector<int>& freed, const T& item) {
  if (freed.empty()) {
    list.push_back(item);
    return static_cast<int>(list.size()) - 1;
  }
  const int id = freed.back();
  freed.pop_back();
  list[id] = item;
  return id;
}

}  // namespace

// Blocking mode: the sender is held until the receiver acknowledges. With the payload on the
// offer (WorkloadParams::comm_offer_payload) the bytes move first, and the receiver sees the
// offer once they have landed; else it sees the bare offer at once.
void Simulation::offer(const Send& sd) {
  Rank& rk = rank(sd.src_stage, sd.rank);
  if (!rk.driver.held()) rk.held_since = now_;
  rk.driver.sent();
  const int id = place(sends_, free_sends_, sd);  // freed by release()
  if (w_.offer_payload)
    move_bytes(id);
  else
    offer_landed(id);
}

// A rendezvous send's bytes start moving to its receiver: from the producer's end with the
// offer, or from the acceptance.
void Simulation::move_bytes(int id) {
  const Send& sd = sends_[id];
  transfer(Transfer{sd.dst_stage, sd.rank, m_.index(sd.consumer), id, sd.record, now_, 0},
           sd.latency);
}

// A rendezvous transfer's bytes have landed: with them the offer, or, after the acceptance, the
// input itself.
void Simulation::send_landed(int id) {
  if (w_.offer_payload)
    offer_landed(id);
  else
    send_done(id);
}

// A rendezvous offer reaches its receiver, which accepts it when its rendezvous lets it.
void Simulation::offer_landed(int id) {
  const Send& sd = sends_[id];
  rank(sd.dst_stage, sd.rank).driver.offered(sd.consumer, id);
  mark_dirty(sd.dst_stage);
}

// A rendezvous transfer has landed (or, its payload with the offer, has been accepted): the
// consumer has its input, and the receiver's acknowledgement releases the sender.
void Simulation::send_done(int id) {
  const Send& sd = sends_[id];
  // Delivering an input wakes an idle receiver: its bytes landing after the acceptance, or, with
  // the payload on its offer, the acceptance an idle rank makes in the instant the offer lands.
  wake_if_idle(sd.dst_stage, sd.rank);
  rank(sd.dst_stage, sd.rank).driver.delivered(sd.consumer, producer_cost(sd.rank, sd.consumer));
  mark_dirty(sd.dst_stage);  // its next posted receive may be another offer's
  if (w_.offer_payload) {
    push(now_ + w_.link_latency_ns, Ev::AckLanded, 0, 0, id);
    return;
  }
  ack_landed(id);
}

// Where each process copies its arrivals one at a time (WorkloadParams::comm_serial_receive)
// and the sender's is inside a copy, the thread that would take the acknowledgement in is
// busy: the release waits for that copy's end, and no longer (the copies queued behind it
// come after the acknowledgement; it waited for them all, and for those joining meanwhile).
void Simulation::ack_landed(int id) {
  const Send& sd = sends_[id];
  const int copy = w_.serial_receive ? links_->moving_token(queue_of(sd.src_stage, sd.rank)) : -1;
  if (copy >= 0) {
    parked_[copy].push_back(id);
    return;
  }
  release(id);
}

void Simulation::release(int id) {
  const Send& sd = sends_[id];
  Rank& src = rank(sd.src_stage, sd.rank);
  if (src.driver.released()) {
    block(sd.src_stage, sd.rank, src.held_since, now_, BlockReason::Send);
    src.free_since = now_;
  }
  mark_dirty(sd.src_stage);
  free_sends_.push_back(id);  // its last use: the sender is released
}

// A message of `lat` starts now: it lands `lat` later on its own, or, on shared links, once
// its latency has passed and its bytes have moved at the rate the links leave it.
void Simulation::transfer(Transfer t, std::int64_t lat) {
  if (!links_) {
    if (opt_.record) res_.tasks[t.record].send_ns = lat;
    if (t.send < 0)
      push(now_ + lat, Ev::Arrive, t.dst_stage, t.rank, t.consumer);
    else
      push(now_ + lat, Ev::SendLanded, t.dst_stage, t.rank, t.send);
    return;
  }
  const std::int64_t alone = std::min(lat, w_.link_latency_ns);
  t.bytes_ns = lat - alone;
  const int id = place(transfers_, free_transfers_, t);  // freed by link_end()
  push(now_ + alone, Ev::LinkJoin, 0, 0, id);
}

void Simulation::link_join(int id) {
  const Transfer& t = transfers_[id];
  links_->add(now_, t.bytes_ns, id, w_.serial_receive ? queue_of(t.dst_stage, t.rank) : -1);
  watch_links();
}

// The end event carries the links' version it was scheduled for: every add and finish schedules
// one, and one whose links changed since is dropped. Compared with the version of the last event
// scheduled, every event passed (each one scheduled the next), ran finish() early for nothing
// and scheduled another: the events in the queue grew by one a transfer while the links stayed
// busy, a step's time as the cube of its transfers (P=8 M=256 gpipe over shared links: 6.7 s).
int Simulation::links_stamp() const {
  return static_cast<int>(links_->version() & 0x7fffffff);
}

void Simulation::watch_links() {
  if (auto end = links_->next_end()) push(*end, Ev::LinkEnd, 0, 0, links_stamp());
}

void Simulation::link_end(int stamp) {
  if (stamp != links_stamp()) return;  // the links changed since: a later event holds their end
  const std::vector<int> ended = links_->finish(now_);
  for (int id : ended) {
    const Transfer& t = transfers_[id];
    // The trace keeps the time shared too, so its replay (each message on its own) is this
    // very step, but for the acknowledgements a copy held (core/record.hpp).
    if (opt_.record) res_.tasks[t.record].send_ns = now_ - t.start;
    if (t.send < 0)
      arrive(t.dst_stage, t.rank, t.consumer);
    else
      send_landed(t.send);
  }
  if (!parked_.empty())
    for (int id : ended)
      if (auto parked = parked_.find(id); parked != parked_.end()) {
        const std::vector<int> sends = std::move(parked->second);
        parked_.erase(parked);
        for (int send : sends)
          release(send);
      }
  // Their last use: no release is parked on them any more, and none moves.
  free_transfers_.insert(free_transfers_.end(), ended.begin(), ended.end());
  watch_links();
}

// Blocking mode: a rank that is not computing, or that waits in its group's collective,
// accepts what its rendezvous lets it. An offer that brought its payload delivers its input at
// once, which may post the next receive (under `fixed`): that one's offer is accepted too,
// before the rank computes, as the runtime's idle rank does.
void Simulation::accept_sends(int s) {
  for (int r = 0; r < t_; ++r) {
    Rank& rk = rank(s, r);
    if (rk.computing && !(accepts_in_collective_ && in_collective(s, r))) continue;
    while (rk.driver.has_offers()) {
      const std::vector<Rendezvous::Offer> offers = rk.driver.accept();
      if (offers.empty()) break;
      for (const Rendezvous::Offer& o : offers) {
        if (w_.offer_payload)
          send_done(o.handle);
        else
          move_bytes(o.handle);
      }
      if (!w_.offer_payload) break;  // the next receive is posted once these bytes land
    }
  }
}

}  // namespace rrfp::sim_state
