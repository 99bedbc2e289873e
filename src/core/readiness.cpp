#include "core/readiness.hpp"

#include <array>

#include "core/error.hpp"

namespace rrfp {

const char* to_string(InputState s) {
  switch (s) {
    case InputState::Missing:
      return "missing";
    case InputState::Offered:
      return "offered";
    case InputState::Accepted:
      return "in transfer";
    case InputState::Delivered:
      return "delivered";
  }
  return "?";
}

Readiness::Readiness(const WorkModel& m, int stage, StageArbiter& arbiter)
    : m_(m), stage_(stage), arb_(arbiter) {
  missing_.assign(m.local_slots(), 0);
  input_.assign(m.local_slots(), InputState::Missing);
  std::array<Dep, 2> d{};
  for (const TaskId& t : m.stage_tasks(stage)) {
    const int k = m.deps(t, d);
    missing_[m.local_index(t)] = static_cast<std::int8_t>(k);
    if (k == 0) arb_.mark_ready(t);
  }
}

void Readiness::move(const TaskId& task, InputState from, InputState to, const char* what) {
  InputState& st = input_[m_.local_index(task)];
  if (st != from || !m_.has_remote_input(task))
    throw ProtocolError("the input of " + to_string(task) + " " + what + " but it is " +
                        (m_.has_remote_input(task) ? to_string(st) : std::string("not a message")));
  st = to;
}

bool Readiness::arrive(const TaskId& task) {
  // "arrived twice" is what a duplicate looks like from here: the first one is in.
  if (input(task) != InputState::Missing && m_.has_remote_input(task))
    throw ProtocolError("the input of " + to_string(task) + " arrived twice");
  move(task, InputState::Missing, InputState::Delivered, "arrived");
  return satisfy(task);
}

void Readiness::offer(const TaskId& task) {
  if (input(task) != InputState::Missing && m_.has_remote_input(task))
    throw ProtocolError("the input of " + to_string(task) + " arrived twice");
  move(task, InputState::Missing, InputState::Offered, "was offered");
}

void Readiness::accept(const TaskId& task) {
  move(task, InputState::Offered, InputState::Accepted, "was accepted");
}

bool Readiness::deliver(const TaskId& task) {
  move(task, InputState::Accepted, InputState::Delivered, "was delivered");
  return satisfy(task);
}

std::vector<TaskId> Readiness::expected(int max, int& total) const {
  std::vector<TaskId> out;
  total = 0;
  for (const TaskId& t : m_.stage_tasks(stage_)) {
    if (!m_.has_remote_input(t) || input(t) != InputState::Missing) continue;
    if (total++ < max)
      out.push_back(TaskId{t.kind, t.kind == Kind::F ? t.chunk - 1 : t.chunk + 1, t.mb});
  }
  return out;
}

}  // namespace rrfp
