#pragma once
// A step's record travels between processes: each process of a multi-process run measures the
// ranks it hosts; rank 0 merges them into one record for the reports. Each process times its
// step from its own start (StepResult::origin_ns), and processes leave the step's barrier up to
// milliseconds apart: merged, the records count from the earliest start on rank 0's clock
// (Job::clock_offset), so a message's consumer never seems to start before its producer ended.
#include <cstddef>
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
// The same, and then every process's `r` becomes rank 0's merged record (Python's pipelines
// give the step's record on every process).
void share_over_job(Job& job, StepResult& r);

}  // namespace rrfp
