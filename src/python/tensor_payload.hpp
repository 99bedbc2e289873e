#pragma once
// Tensors as payloads: a small header (dtype, shape, and the strides of a layout other than
// contiguous) followed by the tensor's bytes, in one contiguous buffer any transport can send.
// Activations of user modules change shape from one microbatch to the next, so every message
// describes itself. Decoding wraps the received buffer without a copy (but for a view with gaps
// between its elements, written into its strides); the tensor keeps the buffer alive.
#include <ATen/ATen.h>

#include <string>
#include <string_view>
#include <vector>

#include "comm/payload.hpp"

namespace rrfp::py {

// Copies `t` (any device, any strides, a lazy negation resolved) to a CPU buffer behind a header;
// the decoded tensor has t's strides, but for an expanded tensor's (elements sharing memory),
// decoded contiguous. Throws InputError naming `what` for a dtype no transport carries (complex,
// quantized), a layout other than strided (sparse) or more than kMaxDims dimensions.
Payload encode_tensor(const at::Tensor& t, const std::string& what);
// The refusals of encode_tensor, without the encoding: for a payload that holds the tensor
// (held_payload.hpp), so that one process and many refuse alike.
void check_sendable(const at::Tensor& t, const std::string& what);
// A copy of `t` as a decoded message of it would be (its strides unless elements share memory,
// a lazy negation resolved), on t's device and, on a GPU, on the current stream.
at::Tensor copy_keeping_layout(const at::Tensor& t);
// The tensor a payload carries. Throws ProtocolError naming `what` when the bytes are not an
// encoded tensor (bad magic, dtype, rank, or a size that does not match the shape).
at::Tensor decode_tensor(const Payload& p, const std::string& what);

inline constexpr int kMaxDims = 16;

// A nest of tuples, lists and dicts between chunks (a pytree): its tensors, each encoded as
// above, and its structure, bytes the Python side writes and reads back (rrfp/_stage.py), in one
// buffer. Decoding wraps each tensor without a copy.
struct DecodedTree {
  std::string structure;
  std::vector<at::Tensor> leaves;
};
Payload encode_tree(std::string_view structure, const std::vector<at::Tensor>& leaves,
                    const std::string& what);
bool is_tree(const Payload& p);  // a tree's magic number, not a tensor's
// Throws ProtocolError naming `what` when the bytes are not an encoded tree.
DecodedTree decode_tree(const Payload& p, const std::string& what);

}  // namespace rrfp::py
