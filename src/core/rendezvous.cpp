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

const TaskId* Rendezvous::posted_receive() {
  const auto& order = *order_;
  for (; recv_pos_ < static_cast<int>(order.size()); ++recv_pos_) {
    const TaskId& t = order[recv_pos_];
    const InputState s = inputs_.input(t);
    if (s != InputState::Local && s != InputState::Delivered) return &t;
  }
  return nullptr;
}

const TaskId* Rendezvous::posted() const {
  if (!order_) return nullptr;
  for (int i = recv_pos_; i < static_cast<int>(order_->size()); ++i) {
    const InputState s = inputs_.input((*order_)[i]);
    if (s != InputState::Local && s != InputState::Delivered) return &(*order_)[i];
  }
  return nullptr;
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
