#pragma once
// A step's record travels between processes: each process of a multi-process run measures the
// ranks it hosts; rank 0 merges them into one record for the reports. Times are per process
// since its step began, and every process begins after the same barrier.
#include <cstddef>
#include <span>
#include <vector>

#include "runtime/runtime.hpp"

namespace rrfp {

std::vector<std::byte> pack_step(const StepResult& r);
// Adds a packed record of other ranks of the same run to `into`. Throws Error on a record that
// does not fit (another shape, or truncated).
void merge_step(StepResult& into, std::span<const std::byte> packed);

}  // namespace rrfp
