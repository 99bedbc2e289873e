#pragma once
// The design's jitter injection (semantics.md §5) applied to real compute: after an F or a B
// (never a W), with probability p, the rank stalls for alpha * max(floor, the task's measured
// duration) * (0.5 + U), with the draws a pure function of (seed, task, the runtime's pass
// number): the same whichever stage runs the task (`pp`, the pipeline's stages, places a chunk
// as the loop placement does, for the draw alone); an evaluation pass
// (StageProgram::evaluating) is not disturbed.
#include <cstdint>
#include <memory>

#include "runtime/program.hpp"
#include "sim/workload.hpp"

namespace rrfp {

std::unique_ptr<StageProgram> with_jitter(std::unique_ptr<StageProgram> inner, JitterLevel level,
                                          int pp, std::uint64_t seed);

}  // namespace rrfp
