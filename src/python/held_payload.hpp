#pragma once
// Payloads that hold tensors rather than their bytes. Where every stage is a thread of one
// process (`transport` inproc), a message never leaves the process, so it can carry a tensor:
// no encoding into a buffer of host memory, and on a GPU no round trip through it (a device-to-
// host and a host-to-device copy and a host synchronisation per message). It carries a copy of
// the producer's tensor, made as the producer's task ends: a producer may write its next
// microbatch's output into the same memory (a static output buffer, a CUDA graph's), and a
// hook that changes a received gradient in place would change the sender's tensors; with its
// own copy the consumer sees what a plain loop's next module sees, as a message of bytes
// between processes gives it (tensor_payload.hpp).
#include <ATen/ATen.h>

#include <optional>
#include <string>
#include <vector>

#include "comm/payload.hpp"

namespace rrfp::py {

// What a held payload carries: one tensor, or a structure's bytes and its tensors (a tree).
struct HeldTensors {
  std::optional<std::string> structure;  // set for a tree
  std::vector<at::Tensor> tensors;       // copies, without the producer's autograd graph
};

// `structure` set: a tree of `tensors`; otherwise one tensor. A tensor on the CPU (or on a
// device other than a GPU, through the CPU) is copied here (copy_keeping_layout); one on a GPU
// is taken as it is: the stage's runner copied it on its stream before the task's completion
// (rrfp/_device.py, StageDevice.hand_off). The refusals are encode_tensor's, naming `what`, so
// that a model refused across processes is refused in one.
Payload hold_tensors(std::optional<std::string> structure, const std::vector<at::Tensor>& tensors,
                     const std::string& what);
// What `p` carries when hold_tensors made it, else nullptr (a payload of bytes).
const HeldTensors* held_of(const Payload& p);

}  // namespace rrfp::py
