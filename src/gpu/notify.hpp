#pragma once
// Host callbacks on a stream: what `--completion callback` wakes a stage's thread with, where
// the default polls the task's event (docs/gpu.md compares the two).
#include <c10/core/Stream.h>

#include <functional>

namespace rrfp::gpu {

// Enqueues on `stream` (a CUDA stream) a host function that calls `done` once the work
// enqueued on it so far has completed (cudaLaunchHostFunc: the driver's thread runs it, and the
// stream waits for it to return). Throws std::runtime_error naming the call that refused.
void notify_when_done(const c10::Stream& stream, std::function<void()> done);

}  // namespace rrfp::gpu
