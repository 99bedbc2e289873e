#include "core/rank_driver.hpp"

#include "core/error.hpp"

namespace rrfp {

RankDriver::RankDriver(const WorkModel& m, const Hint& hint, const DispatchOptions& opt, int tp,
                       int stage, int tp_rank)
    : m_(m), hint_(hint), opt_(opt), tp_(tp), stage_(stage), tp_rank_(tp_rank) {}

void RankDriver::begin_step(const std::vector<std::int64_t>& entry_sizes) {
  // The readiness marks ready what waits for nothing, so the arbiter comes first, with the
  // sizes that order the first forwards.
  arb_ = std::make_unique<StageArbiter>(m_, stage_, hint_, opt_.arbiter);
  // A list of another length is refused there (it was dropped without a word).
  if (!entry_sizes.empty()) arb_->note_entry_sizes(entry_sizes);
  costs_ = opt_.note_costs(tp_) && arb_->reads_costs();
  inputs_ = std::make_unique<Readiness>(m_, stage_, *arb_);
  rendezvous_.reset();
  if (opt_.comm == CommMode::Blocking) {
    // Under `fixed` receives are posted one at a time in the stage's list order.
    const bool fixed = opt_.arbiter.policy == Policy::Fixed;
    rendezvous_ =
        std::make_unique<Rendezvous>(m_, fixed ? &hint_.list().stages[stage_] : nullptr, *inputs_);
  }
  follower_.reset();
  agree_.reset();
  if (opt_.coordinated(tp_) && opt_.tp_protocol == TpProtocol::Leader && tp_rank_ > 0)
    follower_.emplace(tp_rank_);
  if (opt_.coordinated(tp_) && opt_.tp_protocol == TpProtocol::Agree) agree_.emplace(tp_rank_, tp_);
}

bool RankDriver::delivered(const TaskId& consumer, std::int64_t cost_ns) {
  if (!m_.valid(consumer) || m_.stage_of(consumer) != stage_) refuse_arrival(consumer);
  if (costs_) arb_->note_cost(consumer, cost_ns);
  return inputs_->deliver(consumer);
}

std::optional<RankDriver::Proposal> RankDriver::propose() {
  if (held() || !may_propose()) return std::nullopt;
  const auto task = arb_->peek();
  if (!task) return std::nullopt;
  return Proposal{agree_->propose(*task, inputs_->version()), *task};
}

void RankDriver::refuse_end(const TaskId& t) const {
  const std::string rank = "stage " + std::to_string(stage_) + " rank " + std::to_string(tp_rank_);
  if (!m_.valid(t))
    throw ProtocolError(rank + ": task " + to_string(t) +
                        " ended, which does not exist in this run");
  if (m_.stage_of(t) != stage_)
    throw ProtocolError(rank + ": task " + to_string(t) + " ended, which is not this stage's");
  throw ProtocolError(rank + ": task " + to_string(t) +
                      (arb_->ended(t) ? " ended twice" : " ended, but was never taken"));
}

void RankDriver::refuse_arrival(const TaskId& t) const {
  throw ProtocolError("stage " + std::to_string(stage_) + ": an input of task " + to_string(t) +
                      " arrived, which " +
                      (m_.valid(t) ? "is not this stage's" : "does not exist in this run"));
}

void RankDriver::refuse_message(const std::string& what) const {
  throw ProtocolError("stage " + std::to_string(stage_) + " tp rank " + std::to_string(tp_rank_) +
                      ": " + what);
}

StuckRank RankDriver::stuck(std::string running) const {
  StuckRank v{arb_.get(), inputs_.get(), rendezvous_.get(), {}, std::move(running), tp_rank_, tp_};
  if (follower_) v.waiting = follower_->waiting();
  if (agree_) v.waiting = agree_->waiting();
  return v;
}

}  // namespace rrfp
