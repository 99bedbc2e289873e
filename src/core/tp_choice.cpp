#include "core/tp_choice.hpp"

#include "core/error.hpp"

namespace rrfp {

void LeaderFollower::on_choice(int from, const TaskId& task) {
  if (from != 0 || rank_ == 0)
    throw ProtocolError("a choice of " + to_string(task) + " from tp rank " + std::to_string(from) +
                        " to tp rank " + std::to_string(rank_) +
                        ": only the leader (tp rank 0) sends choices, to the others");
  chosen_.push_back(task);
}

std::optional<TaskId> LeaderFollower::next(StageArbiter& arb) {
  if (chosen_.empty() || !arb.is_ready(chosen_.front())) return std::nullopt;
  const TaskId t = chosen_.front();
  chosen_.pop_front();
  arb.commit(t);
  return t;
}

std::string LeaderFollower::waiting() const {
  return chosen_.empty() ? "the leader's next choice"
                         : "the leader's choice " + to_string(chosen_.front());
}

AgreeRound::AgreeRound(int rank, int size) : rank_(rank), size_(size) {
  for (Slot& s : slots_)
    s.assign(size, std::nullopt);
}

bool AgreeRound::peer_opened() const {
  for (const auto& p : slot(round_))
    if (p) return true;
  return false;
}

bool AgreeRound::may_propose(std::uint64_t version) const {
  switch (state_) {
    case State::Idle:
      return true;
    case State::Proposed:
      return false;
    case State::Failed:
      // Failed -> Idle: the same proposals would fail again, unless something has changed.
      return version != failed_version_ || peer_opened();
  }
  return false;
}

int AgreeRound::propose(const TaskId& task, std::uint64_t version) {
  if (!may_propose(version))
    throw Error("agree: tp rank " + std::to_string(rank_) + " proposed in round " +
                std::to_string(round_) + " while it may not");
  state_ = State::Proposed;  // Idle/Failed -> Proposed: this rank's choice is out
  proposed_version_ = version;
  slot(round_)[rank_] = task;
  ++rounds_;
  return round_;
}

void AgreeRound::on_proposal(int from, int round, const TaskId& task) {
  auto where = [&] {
    return "agree: proposal " + to_string(task) + " for round " + std::to_string(round) +
           " from tp rank " + std::to_string(from) + " to tp rank " + std::to_string(rank_);
  };
  if (from < 0 || from >= size_ || from == rank_)
    throw ProtocolError(where() + ": not a peer in this group of " + std::to_string(size_));
  if (round < round_) throw ProtocolError(where() + ": that round is over");
  if (round > round_ + 1)
    throw ProtocolError(where() + ": this rank is still in round " + std::to_string(round_));
  auto& p = slot(round)[from];
  if (p) throw ProtocolError(where() + " arrived twice");
  p = task;
}

bool AgreeRound::complete() const {
  if (state_ != State::Proposed) return false;
  for (const auto& p : slot(round_))
    if (!p) return false;
  return true;
}

std::optional<TaskId> AgreeRound::decide(StageArbiter& arb) {
  if (!complete())
    throw Error("agree: tp rank " + std::to_string(rank_) + " decided round " +
                std::to_string(round_) + " before every proposal was in");
  Slot& s = slot(round_);
  const TaskId mine = *s[rank_];
  bool same = true;
  for (const auto& p : s)
    same &= *p == mine;
  if (!same) failed_slot_.swap(s);  // kept for the stuck report; `s` is cleared either way
  s.assign(size_, std::nullopt);
  ++round_;
  if (same) {
    state_ = State::Idle;  // Proposed -> Idle: everyone runs `mine`
    arb.commit(mine);
    return mine;
  }
  state_ = State::Failed;  // Proposed -> Failed: nobody runs; wait for a change
  failed_version_ = proposed_version_;
  ++failed_;
  return std::nullopt;
}

std::string AgreeRound::waiting() const {
  if (state_ == State::Failed) {
    std::string was;
    for (int r = 0; r < size_; ++r)
      was += (r ? ", tp rank " : "tp rank ") + std::to_string(r) + " proposed " +
             to_string(*failed_slot_[r]);
    return "a change of its ready set since agree round " + std::to_string(round_ - 1) +
           " failed (" + was + ")";
  }
  if (state_ != State::Proposed) return {};
  std::string from;
  for (int r = 0; r < size_; ++r)
    if (slot(round_)[r]) from += (from.empty() ? "" : ", ") + std::to_string(r);
  return "agree round " + std::to_string(round_) + " (proposals from tp ranks " + from + " of " +
         std::to_string(size_) + ")";
}

}  // namespace rrfp
