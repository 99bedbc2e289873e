#pragma once
// A step's record travels between processes: each process of a multi-process run measures the
// ranks it hosts; they are merged into one record for the reports (on rank 0, or on every
// process in Python's closing exchange). Each process times its step from its own start
// (StepResult::origin_ns), and processes leave the collective before a step up to milliseconds
// apart: merged, the records count from the earliest start on rank 0's clock
// (Job::clock_offset), so a message's consumer never seems to start before its producer ended.
#include <cstddef>
#include <exception>
#include <span>
#include <vector>

#include "dist/job.hpp"
#include "runtime/runtime.hpp"

namespace rrfp {

std::vector<std::byte> pack_step(const StepResult& r);
// Adds a packed record of other ranks of the same run to `into`, both with their origins on one
// clock. Throws Error on a record that does not fit (another shape, or truncated).
void merge_step(StepResult& into, std::span<const std::byte> packed);

// After a step, on every process of `job` (a collective): rank 0's `r` becomes the step of
// replica 0, merged over that replica's processes; the other processes keep their own. Another
// data-parallel replica runs the same tasks again: merged in, each task would appear once per
// replica and the ranks' busy time would count twice.
void merge_over_job(Job& job, StepResult& r);
// After every step of Python's pipelines, on every process of `job` that can say how its step
// ended (`error`: how it failed here, null if it completed), in one all-gather over the job:
// the processes agree on it, and then `error` is null only when the step completed on every one
// of them, and otherwise a PeerFailure naming the job ranks where it failed (a process that had
// done its part, or another data-parallel replica, would otherwise train on from a step the
// others dropped). On success every process's `r` becomes replica 0's merged record, and the
// result holds every job rank's `carried` bytes, by job rank (Python's loss: no collective of
// its own); after a failure it is empty. A process whose step ended in a way that may mean a
// lost peer (the watchdog's stall, a transport's error) takes no part, since the collective
// could not complete; the others then fail in it at the job's timeout.
std::vector<std::vector<std::byte>> finish_step_over_job(Job& job, int step, StepResult& r,
                                                         std::exception_ptr& error,
                                                         std::span<const std::byte> carried = {});

}  // namespace rrfp
