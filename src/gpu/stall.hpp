#pragma once
// What only a CUDA build has (RRFP_CUDA=ON; docs/gpu.md): a kernel that holds a stream for a
// given time, for the tests' planted never-ending task and for stalls on the device.
#include <cstdint>

namespace rrfp::gpu {

// Enqueues on the calling thread's current CUDA stream one kernel that spins for about `ns`
// nanoseconds of the device's clock, and returns at once.
void stall_current_stream(std::int64_t ns);

}  // namespace rrfp::gpu
