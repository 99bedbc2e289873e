// Tensor-parallel coordination (design §4): which task a rank of a group runs next, so that
// all T ranks enter their collectives in the same order. In one process the ranks share the
// stage's state; a group spread over processes exchanges control messages over the transport
// (the leader's choice; each rank's proposal in an agree round).
#include "runtime/clock.hpp"
#include "runtime/errors.hpp"
#include "runtime/stage.hpp"

namespace rrfp {

std::optional<TaskId> Stage::choose(std::unique_lock<std::mutex>& lk, int r) {
  Rank& rk = ranks_[r];
  if (tp_ == 1 || env_.protocol == TpProtocol::None) {
    auto t = rk.arb->peek();
    if (t) rk.arb->commit(*t);
    return t;
  }
  if (env_.protocol == TpProtocol::Agree) return distributed_ ? agree_remote(lk, r) : agree(lk, r);
  // leader: rank 0 arbitrates; the others run its choices in order, each once it is ready.
  if (r == 0) {
    auto t = rk.arb->peek();
    if (t) {
      rk.arb->commit(*t);
      std::vector<int> remote;
      for (int o = 1; o < tp_; ++o)
        if (local(o))
          ranks_[o].chosen.push_back(*t);
        else
          remote.push_back(o);
      cv_.notify_all();
      MessageTag tag{step_, *t};
      tag.control = Control::Choice;
      if (!remote.empty()) send_control(lk, r, tag, remote);
    }
    return t;
  }
  if (rk.chosen.empty() || !rk.arb->is_ready(rk.chosen.front())) return std::nullopt;
  const TaskId t = rk.chosen.front();
  rk.chosen.pop_front();
  rk.arb->commit(t);
  return t;
}

// The paper's protocol: every rank proposes its own choice; the proposals are compared (an
// all-gather, here through shared memory); on agreement all run it, otherwise nobody does and
// the group retries once some rank's ready set has changed since the failed round began.
std::optional<TaskId> Stage::agree(std::unique_lock<std::mutex>& lk, int r) {
  Rank& rk = ranks_[r];
  for (;;) {
    if (rk.failed_version == version_) return std::nullopt;
    const auto proposal = rk.arb->peek();
    if (!proposal) return std::nullopt;
    const std::int64_t since = now_ns();
    const std::uint64_t id = round_.id;
    if (round_.arrived == 0) round_.version_at_start = version_;
    round_.proposals[r] = proposal;
    ++rk.result.rounds;
    if (++round_.arrived == tp_) {
      bool same = true;
      for (int o = 1; o < tp_; ++o)
        same &= *round_.proposals[o] == *round_.proposals[0];
      round_.outcome = same ? round_.proposals[0] : std::nullopt;
      round_.outcome_since = round_.version_at_start;
      round_.arrived = 0;
      ++round_.id;
      cv_.notify_all();
    } else {
      // A rank waiting for its group still takes rendezvous transfers, as an idle rank does:
      // the rank the group waits for may itself be held on a send to this stage.
      while (round_.id == id && !failure_.failed()) {
        if (env_.comm == CommMode::Blocking) accept_offers(lk, r);
        if (round_.id == id && !failure_.failed()) cv_.wait(lk);
      }
      if (round_.id == id) return std::nullopt;
    }
    record_blocked(r, since, now_ns(), BlockReason::Coordination);
    // Nobody can finish the next round before this rank joins it, so the outcome is still ours
    // (version_at_start, in contrast, may already belong to a round another rank began).
    if (round_.outcome) {
      rk.arb->commit(*round_.outcome);
      return round_.outcome;
    }
    ++rk.result.failed_rounds;
    rk.failed_version = round_.outcome_since;
  }
}

// agree across processes: every rank sends its proposal for round k to its peers and waits for
// theirs; all see the same proposals, so all reach the same outcome. After a failed round a rank
// proposes again once its ready set has changed, or once a peer has opened its next round (the
// peer's ready set changed, and the round needs everyone).
std::optional<TaskId> Stage::agree_remote(std::unique_lock<std::mutex>& lk, int r) {
  Rank& rk = ranks_[r];
  for (;;) {
    const bool peer_opened = rk.proposals.count(rk.round) > 0;
    if (rk.failed_version == version_ && !peer_opened) return std::nullopt;
    const auto proposal = rk.arb->peek();
    if (!proposal) return std::nullopt;
    const int round = rk.round;
    const std::uint64_t version = version_;
    ++rk.result.rounds;
    MessageTag tag{step_, *proposal};
    tag.control = Control::Proposal;
    tag.round = round;
    std::vector<int> peers;
    for (int o = 0; o < tp_; ++o)
      if (o != r) peers.push_back(o);
    const std::int64_t since = now_ns();
    send_control(lk, r, tag, peers);
    auto complete = [&] {
      auto it = rk.proposals.find(round);
      if (it == rk.proposals.end()) return false;
      for (int o = 0; o < tp_; ++o)
        if (o != r && !it->second[o]) return false;
      return true;
    };
    while (!complete() && !failure_.failed()) {
      if (env_.comm == CommMode::Blocking) accept_offers(lk, r);
      if (!complete() && !failure_.failed()) cv_.wait(lk);
    }
    if (failure_.failed()) return std::nullopt;
    record_blocked(r, since, now_ns(), BlockReason::Coordination);
    bool same = true;
    for (const auto& p : rk.proposals[round])
      same &= !p || *p == *proposal;
    rk.proposals.erase(round);
    ++rk.round;
    if (same) {
      rk.arb->commit(*proposal);
      return proposal;
    }
    ++rk.result.failed_rounds;
    rk.failed_version = version;
  }
}

// Control messages leave without the stage lock: an in-process peer's handler takes its own.
void Stage::send_control(std::unique_lock<std::mutex>& lk, int r, const MessageTag& tag,
                         const std::vector<int>& peers) {
  Transport* tr = ranks_[r].transport;
  FailureState* failure = &failure_;
  lk.unlock();
  for (int o : peers) {
    try {
      tr->send(stage_ * tp_ + o, tag, {}, [failure](std::exception_ptr e) {
        if (e && !failure->failed()) failure->fail(e);
      });
    } catch (const std::exception&) {
      if (!failure_.failed()) failure_.fail(std::current_exception());
    }
  }
  lk.lock();
}

void Stage::on_control(int r, Message&& msg) {
  Rank& rk = ranks_[r];
  const MessageTag& tag = msg.tag;
  const int from = msg.src - stage_ * tp_;
  auto where = [&] {
    return name(r) + ": message " + to_string(tag) + " from rank " + std::to_string(msg.src);
  };
  if (from < 0 || from >= tp_ || from == r)
    throw ProtocolError(where() + ": control messages come from this stage's own group");
  if (!m_.valid(tag.producer) || m_.stage_of(tag.producer) != stage_)
    throw ProtocolError(where() + ": names no task of this stage");
  if (tag.control == Control::Choice) {
    if (env_.protocol != TpProtocol::Leader || from != 0)
      throw ProtocolError(where() + ": only the leader (tp rank 0) sends choices");
    rk.chosen.push_back(tag.producer);
  } else if (tag.control == Control::Proposal) {
    if (env_.protocol != TpProtocol::Agree)
      throw ProtocolError(where() + ": a proposal, but the group does not use agree");
    if (tag.round < rk.round)
      throw ProtocolError(where() + ": round " + std::to_string(tag.round) + " is over");
    auto& slot = rk.proposals[tag.round];
    slot.resize(tp_);
    if (slot[from]) throw ProtocolError(where() + " arrived twice");
    slot[from] = tag.producer;
  } else {
    throw ProtocolError(where() + ": unknown control message");
  }
  failure_.bump();
  cv_.notify_all();
}

std::string Stage::peer(int endpoint) const {
  if (env_.peer_name) return env_.peer_name(endpoint);
  return "stage " + std::to_string(endpoint / tp_);
}

}  // namespace rrfp
