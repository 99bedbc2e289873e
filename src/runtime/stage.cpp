// Stage set-up, message routing and the watchdog's description. The compute loop is in
// stage_loop.cpp.
#include "runtime/stage.hpp"

#include <algorithm>
#include <array>
#include <limits>

#include "core/error.hpp"
#include "core/stuck_report.hpp"
#include "runtime/errors.hpp"

namespace rrfp {

Stage::Stage(const StageEnv& env, int stage, std::vector<std::unique_ptr<StageProgram>> programs,
             std::vector<Transport*> endpoints, TpCollective* group)
    : core_(env, stage, group) {
  const int tp = core_.tp();
  if (static_cast<int>(programs.size()) != tp || static_cast<int>(endpoints.size()) != tp)
    throw Error("stage " + std::to_string(stage) + ": need one program and one endpoint per rank");
  for (int r = 0; r < tp; ++r)
    core_.adopt(r, std::move(programs[r]), endpoints[r]);
  delivery_ = make_delivery(core_);
  coordinator_ = make_coordinator(core_, *delivery_);
  if (env.dispatch.comm == CommMode::Blocking && tp > 1)
    for (int r = 0; r < tp; ++r)
      acceptors_.emplace_back(*this, r);
}

void Stage::Acceptor::serve() {
  Locked lk = s_.core_.lock();
  if (!s_.core_.failure().failed()) s_.delivery_->idle(lk, r_);
}

bool Stage::begin_step(int step, std::int64_t t0) {
  Locked lk = core_.lock();
  core_.begin(lk, step, t0);
  ended_.store(0, std::memory_order_relaxed);
  for (int r = 0; r < core_.tp(); ++r) {
    if (!core_.local(r)) continue;
    // What fails here (the program's microbatch_size, an allocation) fails the step, named by
    // the rank, as a task's error does. Thrown, it left run_step bare: the runtime took further
    // steps and no peer was told.
    try {
      begin_rank(lk, r);
    } catch (const TaskError&) {
      core_.failure().fail(std::current_exception());
      return false;
    } catch (...) {
      core_.failure().fail(std::make_exception_ptr(
          call_failed(core_.name(r) + ": beginning step " + std::to_string(step))));
      return false;
    }
  }
  delivery_->begin_step(lk);
  for (int r = 0; r < core_.tp(); ++r) {
    std::vector<Message> early;
    early.swap(core_.rank(lk, r).early);
    // Early messages are data and offers: a pull or an acknowledgement answers something this
    // rank sent in this step, and so cannot come before it.
    std::vector<Outgoing> replies;
    // What they fail with fails the step, as a message arriving now does: thrown from here it
    // left run_step bare, the step not failed and no peer told.
    for (Message& msg : early)
      route_or_fail(lk, r, std::move(msg), replies);
    // An early acknowledgement or pull is refused inside route(): none can ask for a reply here.
    // Kept as a check of that invariant, failing the step as the rest of this function does.
    if (!replies.empty()) {
      core_.failure().fail(std::make_exception_ptr(
          ProtocolError(core_.name(r) + ": a message kept for step " + std::to_string(step) +
                        " asked for a reply before the step began")));
      return false;
    }
  }
  return true;
}

std::int64_t Stage::tasks_hosted() const {
  std::int64_t ranks = 0;
  for (int r = 0; r < core_.tp(); ++r)
    ranks += core_.local(r) ? 1 : 0;
  return ranks * core_.m().local_slots();
}

void Stage::begin_rank(Locked& lk, int r) {
  const WorkModel& m = core_.m();
  StageRank& rk = core_.rank(lk, r);
  // Sizes are the same on every rank of a group, so unlike costs they hold under `agree`.
  std::vector<std::int64_t> sizes;
  int unknown = -1;  // the first microbatch whose size the program does not know
  if (m.stage_of({Kind::F, 0, 0}) == core_.stage())
    for (int mb = 0; mb < m.microbatches(); ++mb) {
      std::optional<std::int64_t> size;
      try {
        size = rk.program->microbatch_size(mb);
      } catch (...) {
        throw call_failed(core_.name(r) + ": microbatch_size(" + std::to_string(mb) + ")");
      }
      if (size) sizes.push_back(*size);
      if (!size && unknown < 0) unknown = mb;
    }
  // Some sizes without the others cannot order the entries; they were dropped without a word.
  if (!sizes.empty() && unknown >= 0)
    throw TaskError(core_.name(r) + ": microbatch_size gave " + std::to_string(sizes.size()) +
                    " of " + std::to_string(m.microbatches()) +
                    " microbatches' sizes (none for microbatch " + std::to_string(unknown) +
                    "): give every microbatch's size or none");
  rk.driver->begin_step(sizes);
  rk.input.assign(m.local_slots(), Payload{});
  rk.arrived.assign(m.local_slots(), -1);
  rk.offer_wait.assign(m.local_slots(), 0);
  rk.running.reset();
  rk.result = RankResult{};
  // Appended between a task's end and the next start: no reallocation on that path.
  rk.result.tasks.reserve(m.local_slots());
  rk.result.gaps.reserve(m.local_slots());
}

void Stage::on_message(int r, Message&& msg) {
  std::vector<Outgoing> replies;
  {
    Locked lk = core_.lock();
    route_or_fail(lk, r, std::move(msg), replies);
  }
  post_sends(r, replies);
}

void Stage::route_or_fail(Locked& lk, int r, Message&& msg, std::vector<Outgoing>& replies) {
  try {
    route(lk, r, std::move(msg), replies);
  } catch (const Error&) {
    core_.failure().fail(std::current_exception());
  } catch (const std::exception& e) {  // an allocation: it reached run_step unnamed
    core_.failure().fail(std::make_exception_ptr(
        TaskError(core_.name(r) + ": taking a message failed: " + failure_reason(e))));
  }
}

std::optional<std::size_t> Stage::input_bytes(int r, const TaskId& consumer) const {
  // The program's hook, named: what it threw reached run_step bare, naming no stage or task.
  try {
    return core_.program(r).input_bytes(consumer);
  } catch (...) {
    throw call_failed(core_.name(r) + ": input_bytes(" + to_string(consumer) + ")");
  }
}

// The consumer of a data message on this stage: the task of the producer's kind that takes its
// output here (activations forward, gradients back).
std::optional<TaskId> Stage::match(const Message& msg) const {
  const TaskId& p = msg.tag.producer;
  const WorkModel& m = core_.m();
  if (!m.valid(p) || p.kind == Kind::W) return std::nullopt;
  Deps c{};
  const int k = m.consumers(p, c);
  for (int i = 0; i < k; ++i)
    if (c[i].cross_stage && c[i].task.kind == p.kind && m.stage_of(c[i].task) == core_.stage())
      return c[i].task;
  return std::nullopt;
}

void Stage::route(Locked& lk, int r, Message&& msg, std::vector<Outgoing>& replies) {
  const MessageTag& tag = msg.tag;
  auto where = [&] {
    return core_.name(r) + ": message " + to_string(tag) + " from rank " + std::to_string(msg.src);
  };
  const int step = core_.step(lk);
  const WorkModel& m = core_.m();
  const int stage = core_.stage(), tp = core_.tp();
  if (tag.step != step) {
    // A faster peer may already be in the next step: keep its message for then. Before its
    // first step a stage does not know that step's number (a resumed run starts past 0), so it
    // keeps whatever comes; begin_step refuses what belongs to another step.
    if (tag.step == step + 1 || step < 0) {
      core_.rank(lk, r).early.push_back(std::move(msg));
      return;
    }
    throw ProtocolError(where() + " belongs to no step in progress (this stage is in step " +
                        std::to_string(step) + ")");
  }
  // The state machines' refusals (a second arrival, an acknowledgement without an offer, a
  // proposal from outside the group) name the input or round; the message's name goes first.
  auto refusing = [&](auto&& step) {
    try {
      step();
    } catch (const ProtocolError& e) {
      throw ProtocolError(where() + ": " + e.what());
    }
  };
  if (tag.ack) {
    refusing([&] { delivery_->on_ack(lk, r, msg); });
  } else if (tag.pull) {
    if (!m.valid(tag.producer) || m.stage_of(tag.producer) != stage)
      throw ProtocolError(where() + ": names no task of this stage");
    refusing([&] { delivery_->on_pull(lk, r, msg, replies); });
  } else if (tag.control != Control::None) {
    if (tag.control != Control::Choice && tag.control != Control::Proposal)
      throw ProtocolError(where() + ": unknown control message");
    const int from = msg.src - stage * tp;
    if (from < 0 || from >= tp || from == r)
      throw ProtocolError(where() + ": control messages come from this stage's own group");
    if (!m.valid(tag.producer) || m.stage_of(tag.producer) != stage)
      throw ProtocolError(where() + ": names no task of this stage");
    refusing([&] { coordinator_->on_control(lk, r, from, tag); });
    core_.notify(lk);
  } else {
    const auto consumer = match(msg);
    if (!consumer) throw ProtocolError(where() + " matches no task this stage expects");
    const int expected_src = m.stage_of(tag.producer) * tp + r;
    if (msg.src != expected_src)
      throw ProtocolError(where() + ": " + to_string(tag.producer) + " is computed by rank " +
                          std::to_string(expected_src));
    if (auto want = input_bytes(r, *consumer); want && !tag.offer && *want != msg.payload.size())
      throw ProtocolError(where() + " has " + std::to_string(msg.payload.size()) + " bytes; " +
                          to_string(*consumer) + " expects " + std::to_string(*want));
    if (tag.offer && !msg.payload.empty())
      throw ProtocolError(where() + ": an offer carries no payload");
    refusing([&] { delivery_->on_data(lk, r, *consumer, std::move(msg), replies); });
  }
  core_.failure().bump();
}

void Stage::wake() {
  Locked lk = core_.lock();
  core_.notify(lk);
}

bool Stage::waits_on_other_stages(int r) const {
  const Locked lk = core_.lock();
  const StageRank& rk = core_.rank(lk, r);
  // Held on a send, it waits for the receiver's acknowledgement (or its pull): another stage's.
  return rk.local() && core_.step(lk) >= 0 &&
         (rk.driver->held() || rk.driver->stuck().inputs->waits_on_other_stages());
}

std::vector<int> Stage::awaited_stages(int r) const {
  const Locked lk = core_.lock();
  const StageRank& rk = core_.rank(lk, r);
  std::vector<int> out;
  // A rank in a task waits on that task first: the chain of waits ends there.
  if (!rk.local() || core_.step(lk) < 0 || rk.running) return out;
  const Readiness& in = rk.driver->inputs();
  int total = 0;
  for (const TaskId& producer : in.expected(std::numeric_limits<int>::max(), total))
    if (const int s = in.model().stage_of(producer);
        std::find(out.begin(), out.end(), s) == out.end())
      out.push_back(s);
  return out;
}

std::string Stage::describe(std::int64_t now) const {
  const Locked lk = core_.lock();
  std::string out;
  for (int r = 0; r < core_.tp(); ++r) {
    const StageRank& rk = core_.rank(lk, r);
    if (!rk.local() || core_.step(lk) < 0) continue;
    std::string running;
    if (rk.running) {
      running = "running " + to_string(*rk.running) + " for " +
                std::to_string((now - rk.running_since) / 1'000'000) + " ms";
      if (const std::string wait = rk.program->waiting_for(); !wait.empty())
        running += " (waiting for " + wait + ")";
      // A rank waiting for its peers in its group's collective read as busy in its task: the
      // chase between processes ended at it, and a stopped peer of its group went unnamed.
      if (const std::int64_t since = rk.in_collective->load(); since >= 0) {
        std::string peers;
        for (int peer = 0; peer < core_.tp(); ++peer)
          if (peer != r)
            peers += (peers.empty() ? "" : ", ") + core_.peer(core_.stage() * core_.tp() + peer);
        running += ", " + std::to_string((now - since) / 1'000'000) +
                   " ms of it in its group's collective, with " + peers;
      }
    }
    const StuckRank view = rk.driver->stuck(running);
    out += (out.empty() ? "" : " | ") +
           rrfp::describe(view, [&](int s) { return core_.peer(s * core_.tp() + r); });
  }
  return out;
}

}  // namespace rrfp
