#pragma once
// After a step of a job of several processes: how the step ended, agreed by all of them. A
// process whose own task failed tells its pipeline's peers at once (runtime/peer_failure.cpp),
// but a peer may have done its whole part before that (the failure came in the step's last
// tasks), and another replica's processes hear nothing: left alone, they would train on from a
// step the others dropped, and the processes would no longer hold the same weights.
#include <exception>

#include "dist/job.hpp"

namespace rrfp {

// Every process of `job` that can say how `step` ended says so (`error`: how it failed here,
// null if it completed); afterwards `error` is null only when the step completed on every one
// of them, and otherwise a PeerFailure naming the job ranks where it failed. A process whose
// step ended in a way that may mean a lost peer (the watchdog's stall, a transport's error)
// takes no part, since the round could not complete: the others then fail in it at the job's
// timeout. Call it on every process after every step.
void agree_on_step(Job& job, int step, std::exception_ptr& error);

}  // namespace rrfp
