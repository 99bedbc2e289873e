#pragma once
// Bytes between the runtime's exchanges and Python's uint8 tensors (pipeline_exchange.cpp).
#include <ATen/ATen.h>

#include <cstddef>
#include <span>
#include <string>
#include <vector>

namespace rrfp::py {

// `t`'s bytes; InputError naming `what` unless it is a contiguous one-dimensional uint8 CPU
// tensor.
std::span<const std::byte> byte_span(const at::Tensor& t, const std::string& what);

// Each member's bytes as a uint8 tensor, whose storage they become as they are, not copied once
// more (a tied embedding's gradient is 154 MB); the tensor frees them.
std::vector<at::Tensor> byte_tensors(std::vector<std::vector<std::byte>> all);

}  // namespace rrfp::py
