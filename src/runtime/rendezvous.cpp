// Blocking (rendezvous) communication, the Megatron-style baseline of design.md §3, with the
// simulator's semantics: a finished task's outputs are offered to their receivers and the
// sender computes nothing until every one is acknowledged; a receiver that is not computing
// accepts an offer (under `fixed` only the one its next posted receive, in list order, is
// for; under `ready` any), the transfer then takes its modelled latency, the payload is
// delivered and an acknowledgement releases the sender.
#include "runtime/clock.hpp"
#include "runtime/errors.hpp"
#include "runtime/stage.hpp"

namespace rrfp {

void Stage::acknowledged(int r, const Message& msg) {
  Rank& rk = ranks_[r];
  if (env_.comm != CommMode::Blocking || rk.held == 0)
    throw ProtocolError(name(r) + ": message " + to_string(msg.tag) + " from rank " +
                        std::to_string(msg.src) + " acknowledges no pending send");
  failure_.bump();
  if (--rk.held > 0) return;
  record_blocked(r, rk.held_since, now_ns(), BlockReason::Send);
  cv_.notify_all();
}

int Stage::posted_receive(Rank& rk) {
  return next_posted_receive(m_, env_.hint->list().stages[stage_], rk.recv_pos,
                             [&](int idx) { return rk.received[idx] != 0; });
}

// Loops until no acceptable offer is left: completing a transfer inline unlocks the stage, and
// an offer arriving meanwhile must not wait for a wake-up that already happened. Returns
// whether it accepted any.
bool Stage::accept_offers(std::unique_lock<std::mutex>& lk, int r) {
  Rank& rk = ranks_[r];
  const bool any = env_.arbiter.policy == Policy::Ready;
  bool accepted = false;
  while (!rk.offers.empty()) {
    const int posted = any ? -1 : posted_receive(rk);
    std::vector<std::pair<int, Message>> start;
    auto keep = rk.offers.begin();
    for (auto& o : rk.offers)
      if (any || o.first == posted)
        start.push_back(std::move(o));
      else
        *keep++ = std::move(o);
    rk.offers.erase(keep, rk.offers.end());
    if (start.empty()) return accepted;
    accepted = true;
    const std::int64_t now = now_ns();
    std::vector<std::function<void()>> inline_now;
    for (auto& [idx, msg] : start) {
      const std::int64_t lat = env_.latency ? env_.latency(r, msg.tag.producer) : 0;
      auto done = [this, r, idx = idx, msg = std::move(msg)]() mutable {
        complete_transfer(r, idx, std::move(msg));
      };
      if (env_.delay && lat > 0)
        env_.delay->post(now + lat, std::move(done));
      else
        inline_now.push_back(std::move(done));
    }
    if (inline_now.empty()) return accepted;
    lk.unlock();  // completing sends an acknowledgement: never with a stage lock held
    for (auto& f : inline_now)
      f();
    lk.lock();
  }
  return accepted;
}

void Stage::complete_transfer(int r, int index, Message msg) {
  Rank& rk = ranks_[r];
  {
    std::lock_guard lk(mu_);
    if (failure_.failed()) return;
    deliver(rk, index, std::move(msg.payload));
    cv_.notify_all();  // the next posted receive may now be another offer's
  }
  MessageTag ack = msg.tag;
  ack.ack = true;
  FailureState* failure = &failure_;
  try {
    rk.transport->send(msg.src, ack, {}, [failure](std::exception_ptr e) {
      if (e && !failure->failed()) failure->fail(e);
    });
  } catch (const std::exception&) {
    if (!failure_.failed()) failure_.fail(std::current_exception());
  }
}

}  // namespace rrfp
