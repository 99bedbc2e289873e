#pragma once
// Streams on disjoint partitions of a GPU's multiprocessors (CUDA green contexts): what lets P
// stages on one GPU behave like P smaller GPUs sharing its memory, instead of every stage's
// kernels spreading over every SM (docs/gpu.md).
#include <c10/core/Stream.h>

#include <vector>

namespace rrfp::gpu {

// `parts` streams, stream i in a green context of its own holding an equal share of the
// device's SMs (a multiple of 8, as Hopper splits them; the few left over go unused).
// Throws std::runtime_error naming the driver call that refused. The contexts live as long
// as the process.
std::vector<c10::Stream> partition_streams(int device, int parts);

// The SMs each partition of `partition_streams(device, parts)` gets.
int partition_sms(int device, int parts);

}  // namespace rrfp::gpu
