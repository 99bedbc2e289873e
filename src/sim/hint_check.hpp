#pragma once
// Whether a list hint finishes under `fixed` with blocking transfers (semantics.md §3): its
// dependencies may allow its order (core/hint_validate.cpp) while the rendezvous does not, as
// when a stage lists F m1 before F m0, posts its receive for m1 first, and its sender waits for
// the receive of m0 before it runs m1. The check is the simulator itself, whose every protocol
// decision is the core's (RankDriver, Rendezvous): there is no second copy of the rules.
#include <string>

#include "core/arbiter.hpp"
#include "core/hint.hpp"
#include "core/modes.hpp"

namespace rrfp {

// Empty when `hint` (a list) finishes under the fixed policy with blocking transfers, with
// groups of `tp` under `protocol`; else what the stuck ranks hold and wait for (the
// simulator's deadlock report, one line).
std::string fixed_blocking_deadlock(const WorkModel& m, const Hint& hint, int tp = 1,
                                    TpProtocol protocol = TpProtocol::Leader);

// Refuses (InputError naming `hint`) a hint file or ZB-V whose order deadlocks under `policy`
// fixed with `comm` blocking: before a simulation fails on it, or a run or a training step
// stalls until its watchdog. ZB-V is laid out for asynchronous sends and deadlocks there once
// there are more microbatches than stages. Every other case passes unchecked: a rule has no fixed
// order, and the other generated lists are the schedules blocking pipelines run, which a check
// would simulate (each huge one twice) for nothing. simulate and run (check_spec), train and
// Python's Pipeline call it.
void refuse_blocking_deadlock(const WorkModel& m, const Hint& hint, Policy policy, CommMode comm,
                              int tp = 1, TpProtocol protocol = TpProtocol::Leader);

}  // namespace rrfp
