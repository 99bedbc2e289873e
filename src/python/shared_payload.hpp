#pragma once
// Payloads that carry the tensors themselves. Where every stage is a thread of one process
// (`transport` inproc), a message never leaves the process, so an activation or a gradient can
// travel as the tensor rather than its bytes: no copy into a buffer and none out of it, and on a
// GPU no round trip through host memory (two copies over PCIe and a host synchronisation per
// message). The consumer gets the producer's memory, as the next module of a plain loop does.
// Across processes payloads stay bytes (tensor_payload.hpp).
#include <ATen/ATen.h>

#include <optional>
#include <string>
#include <vector>

#include "comm/payload.hpp"

namespace rrfp::py {

// What a shared payload holds: one tensor, or a structure's bytes and its tensors (a tree).
struct SharedTensors {
  std::optional<std::string> structure;  // set for a tree
  std::vector<at::Tensor> tensors;       // detached: the autograd graph stays the producer's
};

// `structure` set: a tree of `tensors`; otherwise one tensor. The refusals are encode_tensor's
// (check_sendable), naming `what`, so that a model refused across processes is refused here too.
Payload share_tensors(std::optional<std::string> structure, const std::vector<at::Tensor>& tensors,
                      const std::string& what);
// What `p` holds when share_tensors made it, else nullptr (a payload of bytes).
const SharedTensors* shared_of(const Payload& p);

}  // namespace rrfp::py
