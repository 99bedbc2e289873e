#pragma once
// Tensors as payloads: a small header (dtype, shape) followed by the tensor's bytes, in one
// contiguous buffer any transport can send. Activations of user modules change shape from one
// microbatch to the next, so every message describes itself. Decoding wraps the received
// buffer without a copy; the tensor keeps the buffer alive.
#include <ATen/ATen.h>

#include <string>

#include "comm/payload.hpp"

namespace rrfp::py {

// Copies `t` (any device, any layout) to a contiguous CPU buffer behind a header. Throws
// InputError naming `what` for a dtype no transport carries (complex, quantized) or more than
// kMaxDims dimensions.
Payload encode_tensor(const at::Tensor& t, const std::string& what);
// The tensor a payload carries. Throws ProtocolError naming `what` when the bytes are not an
// encoded tensor (bad magic, dtype, rank, or a size that does not match the shape).
at::Tensor decode_tensor(const Payload& p, const std::string& what);

inline constexpr int kMaxDims = 16;

}  // namespace rrfp::py
