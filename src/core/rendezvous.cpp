#include "core/rendezvous.hpp"

#include "core/error.hpp"

namespace rrfp {

Rendezvous::Rendezvous(const WorkModel& m, const std::vector<TaskId>* order, Readiness& inputs)
    : m_(m), order_(order), inputs_(inputs) {}

bool Rendezvous::acknowledged() {
  if (held_ == 0) throw ProtocolError("an acknowledgement, but no send is waiting for one");
  return --held_ == 0;
}

void Rendezvous::on_offer(const TaskId& consumer, int handle) {
  inputs_.offer(consumer);
  offers_.push_back(Offer{consumer, handle});
}

int Rendezvous::first_posted(int from) const {
  const auto& order = *order_;
  for (; from < static_cast<int>(order.size()); ++from) {
    const InputState s = inputs_.input(order[from]);
    if (s != InputState::Local && s != InputState::Delivered) break;
  }
  return from;
}

const TaskId* Rendezvous::posted_receive() {
  recv_pos_ = first_posted(recv_pos_);  // a delivered input is never posted again
  return recv_pos_ < static_cast<int>(order_->size()) ? &(*order_)[recv_pos_] : nullptr;
}

const TaskId* Rendezvous::posted() const {
  if (!order_) return nullptr;
  const int at = first_posted(recv_pos_);
  return at < static_cast<int>(order_->size()) ? &(*order_)[at] : nullptr;
}

std::vector<Rendezvous::Offer> Rendezvous::take_acceptable() {
  std::vector<Offer> start;
  if (offers_.empty()) return start;
  const TaskId* posted = order_ ? posted_receive() : nullptr;
  auto keep = offers_.begin();
  for (Offer& o : offers_) {
    if (!order_ || (posted && o.consumer == *posted)) {
      inputs_.accept(o.consumer);
      start.push_back(o);
    } else {
      *keep++ = o;
    }
  }
  offers_.erase(keep, offers_.end());
  return start;
}

}  // namespace rrfp
