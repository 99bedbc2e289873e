#include "core/readiness.hpp"

#include <algorithm>
#include <array>

#include "core/error.hpp"

namespace rrfp {

const char* to_string(InputState s) {
  switch (s) {
    case InputState::Local:
      return "not a message";
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
  input_.assign(m.local_slots(), InputState::Local);
  // A task's inputs depend on its kind and chunk, not on its microbatch, but for the first
  // forward of a chunk when forwards are ordered (it has no forward before it): one row per pair.
  Deps d{};
  const int mbs = m.microbatches();
  for (int k = 0; k < m.num_kinds(); ++k)
    for (int c : m.chunks_of(stage)) {
      const TaskId first{static_cast<Kind>(k), c, 0};
      const int at = m.local_index(first);
      const int deps_first = m.deps(first, d);
      const int deps_rest = mbs > 1 ? m.deps({first.kind, c, 1}, d) : deps_first;
      missing_[at] = static_cast<std::int8_t>(deps_first);
      std::fill_n(missing_.begin() + at + 1, mbs - 1, static_cast<std::int8_t>(deps_rest));
      if (m.has_remote_input(first)) std::fill_n(input_.begin() + at, mbs, InputState::Missing);
      if (deps_first == 0) arb_.mark_ready(first);
      if (deps_rest == 0)
        for (int mb = 1; mb < mbs; ++mb)
          arb_.mark_ready({first.kind, c, mb});
    }
}

int Readiness::move(const TaskId& task, InputState from, InputState to, const char* what) {
  const int i = m_.local_index(task);
  if (input_[i] == from) {
    input_[i] = to;
    return i;
  }
  // A second arrival is what a duplicate looks like from here: the first one is in.
  if (from == InputState::Missing && input_[i] != InputState::Local)
    throw ProtocolError("the input of " + to_string(task) + " arrived twice");
  throw ProtocolError("the input of " + to_string(task) + " " + what + " but it is " +
                      to_string(input_[i]));
}

void Readiness::offer(const TaskId& task) {
  move(task, InputState::Missing, InputState::Offered, "was offered");
}

void Readiness::accept(const TaskId& task) {
  move(task, InputState::Offered, InputState::Accepted, "was accepted");
}

bool Readiness::deliver(const TaskId& task) {
  return satisfy_at(move(task, InputState::Accepted, InputState::Delivered, "was delivered"), task);
}

bool Readiness::waits_on_other_stages() const {
  // Only an input from another stage leaves Local (the constructor, by has_remote_input); one
  // not yet delivered (Missing, or Offered and Accepted in blocking mode's pull) is still to come.
  return std::any_of(input_.begin(), input_.end(), [](InputState s) {
    return s != InputState::Local && s != InputState::Delivered;
  });
}

std::vector<TaskId> Readiness::expected(int max, int& total) const {
  // Ordered by need, so a watchdog's first names point at the rank that holds the stage up:
  // the input of the fixed order's next task, then the oldest microbatch first (a stage's
  // canonical order would list every later forward before the backward it waits for).
  std::vector<TaskId> missing;
  for (const TaskId& t : m_.stage_tasks(stage_))
    if (input(t) == InputState::Missing) missing.push_back(t);
  const auto head = arb_.head();
  std::stable_sort(missing.begin(), missing.end(), [&](const TaskId& a, const TaskId& b) {
    const bool ha = head && a == *head, hb = head && b == *head;
    if (ha != hb) return ha;
    return a.mb < b.mb;
  });
  total = static_cast<int>(missing.size());
  if (static_cast<int>(missing.size()) > max) missing.resize(std::max(max, 0));
  for (TaskId& t : missing)
    t.chunk += t.kind == Kind::F ? -1 : 1;  // the producer
  return missing;
}

}  // namespace rrfp
