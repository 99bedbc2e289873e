#pragma once
// The data-parallel gradient sum: every replica's values added in replica order, in each
// value's own type, so that every replica holds the same bits. One copy serves the C++ trainer
// (float32) and rrfp.Pipeline (float32, float64, float16 and bfloat16 gradients side by side).
#include <cstddef>
#include <cstdint>
#include <span>

#include "dist/job.hpp"

namespace rrfp {

// The element types the sum adds. float16 and bfloat16 add through float32 and round to the
// nearest even, as torch's CPU kernels add them; float32 and float64 add in their own type.
enum class NumKind : std::uint8_t { f32 = 0, f64 = 1, f16 = 2, bf16 = 3 };

// A run of values of one kind, summed in place.
struct NumSpan {
  NumKind kind;
  std::span<std::byte> bytes;
};

// Replaces every part by its sum over the data-parallel replicas, added in replica order, in
// one collective. Replicas whose parts differ in number, kind or size are refused with
// InputError on every replica alike, naming what each holds. Throws InputError for a part
// whose size is not a whole number of its values.
void dp_sum(Job& job, std::span<const NumSpan> parts);

// One float32 part.
void dp_sum(Job& job, std::span<float> values);

// a + b in the kind's arithmetic, as bits (exposed for tests).
std::uint16_t add_f16(std::uint16_t a, std::uint16_t b);
std::uint16_t add_bf16(std::uint16_t a, std::uint16_t b);

}  // namespace rrfp
