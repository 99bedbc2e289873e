// Stage state, message routing and the watchdog's description. The compute loop is in
// stage_loop.cpp.
#include "runtime/stage.hpp"

#include <array>

#include "runtime/errors.hpp"

namespace rrfp {

Stage::Stage(const StageEnv& env, int stage, std::vector<std::unique_ptr<StageProgram>> programs,
             std::vector<Transport*> endpoints, TpCollective* group)
    : env_(env),
      m_(*env.model),
      stage_(stage),
      tp_(env.tp),
      group_(group),
      failure_(*env.failure),
      ranks_(env.tp) {
  if (static_cast<int>(programs.size()) != tp_ || static_cast<int>(endpoints.size()) != tp_)
    throw Error("stage " + std::to_string(stage) + ": need one program and one endpoint per rank");
  for (int r = 0; r < tp_; ++r) {
    ranks_[r].program = std::move(programs[r]);
    ranks_[r].transport = endpoints[r];
    if (!local(r))
      distributed_ = true;
    else if (!endpoints[r])
      throw Error("stage " + std::to_string(stage) + ": rank " + std::to_string(r) +
                  " has a program but no endpoint");
  }
  round_.proposals.resize(tp_);
}

std::string Stage::name(int r) const {
  return "stage " + std::to_string(stage_) + (tp_ > 1 ? " tp rank " + std::to_string(r) : "");
}

void Stage::record_blocked(int r, std::int64_t from, std::int64_t to, BlockReason why) {
  if (to <= from) return;
  RankResult& res = ranks_[r].result;
  res.stats.blocked += to - from;
  res.blocked.push_back(BlockedSpan{stage_, r, from - t0_, to - t0_, why});
}

void Stage::begin_step(int step, std::int64_t t0) {
  std::lock_guard lk(mu_);
  step_ = step;
  t0_ = t0;
  version_ = 0;
  round_ = Round{};
  round_.proposals.resize(tp_);
  const int n = m_.num_tasks();
  std::array<Dep, 2> d{};
  for (int r = 0; r < tp_; ++r) {
    if (!local(r)) continue;
    Rank& rk = ranks_[r];
    rk.round = 0;
    rk.proposals.clear();
    rk.arb = std::make_unique<StageArbiter>(m_, stage_, *env_.hint, env_.arbiter);
    rk.missing.assign(n, 0);
    rk.arrived.assign(n, 0);
    rk.received.assign(n, 0);
    rk.offers.clear();
    rk.held = 0;
    rk.recv_pos = 0;
    rk.input.assign(n, Payload{});
    rk.chosen.clear();
    rk.failed_version = ~0ULL;
    rk.running.reset();
    rk.result = RankResult{};
    for (const TaskId& t : m_.stage_tasks(stage_)) {
      const int k = m_.deps(t, d);
      rk.missing[m_.index(t)] = static_cast<std::int8_t>(k);
      if (k == 0) rk.arb->mark_ready(t);
    }
    std::vector<Message> early;
    early.swap(rk.early);
    for (Message& msg : early)
      route(r, std::move(msg));
  }
}

void Stage::on_message(int r, Message&& msg) {
  std::lock_guard lk(mu_);
  try {
    route(r, std::move(msg));
  } catch (const Error&) {
    failure_.fail(std::current_exception());
  }
}

void Stage::route(int r, Message&& msg) {
  Rank& rk = ranks_[r];
  const MessageTag& tag = msg.tag;
  auto where = [&] {
    return name(r) + ": message " + to_string(tag) + " from rank " + std::to_string(msg.src);
  };
  if (tag.step != step_) {
    // A faster peer may already be in the next step: keep its message for then.
    if (tag.step == step_ + 1) {
      rk.early.push_back(std::move(msg));
      return;
    }
    throw ProtocolError(where() + " belongs to no step in progress (this stage is in step " +
                        std::to_string(step_) + ")");
  }
  if (tag.ack) {
    acknowledged(r, msg);
    return;
  }
  if (tag.control != Control::None) {
    on_control(r, std::move(msg));
    return;
  }
  const TaskId& p = tag.producer;
  std::optional<TaskId> consumer;
  if (m_.valid(p) && p.kind != Kind::W) {
    std::array<Dep, 2> c{};
    const int k = m_.consumers(p, c);
    for (int i = 0; i < k; ++i)
      if (c[i].cross_stage && c[i].task.kind == p.kind && m_.stage_of(c[i].task) == stage_)
        consumer = c[i].task;
  }
  if (!consumer) throw ProtocolError(where() + " matches no task this stage expects");
  const int expected_src = m_.stage_of(p) * tp_ + r;
  if (msg.src != expected_src)
    throw ProtocolError(where() + ": " + to_string(p) + " is computed by rank " +
                        std::to_string(expected_src));
  const int idx = m_.index(*consumer);
  if (rk.arrived[idx])
    throw ProtocolError(where() + " arrived twice (input of " + to_string(*consumer) + ")");
  if (auto want = rk.program->input_bytes(*consumer); want && *want != msg.payload.size())
    throw ProtocolError(where() + " has " + std::to_string(msg.payload.size()) + " bytes; " +
                        to_string(*consumer) + " expects " + std::to_string(*want));
  rk.arrived[idx] = 1;
  failure_.bump();
  if (env_.comm == CommMode::Blocking) {
    rk.offers.emplace_back(idx, std::move(msg));  // accepted by the rank's own thread
    cv_.notify_all();
    return;
  }
  deliver(rk, idx, std::move(msg.payload));
}

void Stage::deliver(Rank& rk, int index, Payload payload) {
  rk.received[index] = 1;
  rk.input[index] = std::move(payload);
  satisfy(rk, index);
}

void Stage::satisfy(Rank& rk, int index) {
  if (--rk.missing[index] == 0) {
    rk.arb->mark_ready(m_.task(index));
    ++version_;
    cv_.notify_all();
  }
}

void Stage::wake() {
  std::lock_guard lk(mu_);
  cv_.notify_all();
}

std::string Stage::expected_messages(const Rank& rk) const {
  std::string out;
  int shown = 0, count = 0;
  std::array<Dep, 2> d{};
  for (const TaskId& t : m_.stage_tasks(stage_)) {
    const int idx = m_.index(t);
    if (rk.arrived[idx]) continue;
    const int k = m_.deps(t, d);
    for (int i = 0; i < k; ++i) {
      if (!d[i].cross_stage || d[i].task.kind != t.kind) continue;
      if (++count > 4) continue;
      out += (shown++ ? ", " : "") + to_string(d[i].task) + " from " +
             peer(m_.stage_of(d[i].task) * tp_ + static_cast<int>(&rk - ranks_.data()));
    }
  }
  if (count == 0) return "none";
  if (count > shown) out += " and " + std::to_string(count - shown) + " more";
  return out;
}

std::string Stage::describe(std::int64_t now) const {
  std::lock_guard lk(mu_);
  std::string out;
  for (int r = 0; r < tp_; ++r) {
    if (!local(r)) continue;
    const Rank& rk = ranks_[r];
    if (!out.empty()) out += " | ";
    out += rk.arb->describe();
    if (tp_ > 1) out += " [tp rank " + std::to_string(r) + "]";
    if (rk.held) out += "; held on " + std::to_string(rk.held) + " unacknowledged send(s)";
    if (!rk.offers.empty())
      out += "; " + std::to_string(rk.offers.size()) + " transfer(s) offered, not accepted";
    if (rk.running)
      out += "; running " + to_string(*rk.running) + " for " +
             std::to_string((now - rk.running_since) / 1'000'000) + " ms";
    else if (!rk.arb->finished())
      out += "; waits for " + (rk.chosen.empty()
                                   ? std::string("a ready task")
                                   : "the leader's choice " + to_string(rk.chosen.front()));
    out += "; expects messages: " + expected_messages(rk);
  }
  return out;
}

}  // namespace rrfp
