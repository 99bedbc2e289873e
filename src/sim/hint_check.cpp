#include "sim/hint_check.hpp"

#include "core/error.hpp"
#include "sim/simulator.hpp"

namespace rrfp {

// One simulation with every task and message taking 1 ns tells every run, whatever its
// durations. Under `fixed` with blocking transfers nothing is chosen: a rank runs its list in
// order, posts its receives one at a time in that order, and each transfer has one sender and
// one receiver. So every event (a task's start, an offer's acceptance, a sender's release)
// waits for a fixed set of earlier events, all of them, never for one of several; a rank busy
// computing only delays an acceptance it will make (one waiting in its group's collective
// accepts: semantics.md §4). The events that ever happen are then
// exactly those that wait on no cycle of such waits, directly or through others: the same set
// for any positive durations, which only move when each happens. (Under `agree` a failed round
// retries once a ready set changes, which the same events cause.)
std::string fixed_blocking_deadlock(const WorkModel& m, const Hint& hint, int tp,
                                    TpProtocol protocol) {
  if (!hint.is_list()) throw InputError("`hint` " + hint.name + ": a rule hint has no fixed order");
  RealizedWork w;
  w.tp = tp;
  w.num_tasks = m.num_tasks();
  const std::size_t n = static_cast<std::size_t>(tp) * static_cast<std::size_t>(m.num_tasks());
  w.compute_ns.assign(n, 1);
  w.message_ns.assign(n, 1);
  w.message_bytes.assign(static_cast<std::size_t>(m.num_tasks()), 0);
  SimOptions o;
  o.arbiter.policy = Policy::Fixed;
  o.comm = CommMode::Blocking;
  o.tp_protocol = protocol;
  o.record = false;
  try {
    simulate(m, hint, w, o);
  } catch (const DeadlockError& e) {
    const std::string what = e.what();
    const std::size_t at = what.find(" ns: ");  // the time is the unit run's, not a real one
    return at == std::string::npos ? what : what.substr(at + 5);
  }
  return "";
}

void refuse_blocking_deadlock(const WorkModel& m, const Hint& hint, Policy policy, CommMode comm,
                              int tp, TpProtocol protocol) {
  static const std::string file = "file:";
  const bool from_file = hint.name.rfind(file, 0) == 0;
  // Of the generated lists, ZB-V alone is laid out for asynchronous sends (torch runs it so):
  // the others finish under the rendezvous on every shape (FixedBlockingCheck, the invariants).
  if (policy != Policy::Fixed || comm != CommMode::Blocking || !hint.is_list() ||
      (!from_file && hint.name != "zb-v"))
    return;
  const std::string stuck = fixed_blocking_deadlock(m, hint, tp, protocol);
  if (stuck.empty()) return;
  if (!from_file)  // where the generated order stops is no fault of the user's to mend
    throw InputError("`hint` " + hint.name +
                     ": laid out for asynchronous sends, its order deadlocks under `comm` "
                     "blocking with `policy` fixed at pp " +
                     std::to_string(m.pp()) + " with " + std::to_string(m.microbatches()) +
                     " microbatches (receives posted one at a time in list order); give `comm` "
                     "async, or `policy` ready");
  throw InputError("`hint` " + hint.name.substr(file.size()) +
                   ": its order deadlocks under `comm` blocking with `policy` fixed "
                   "(receives posted one at a time in list order; give `comm` async, or "
                   "`policy` ready): " +
                   stuck);
}

}  // namespace rrfp
