#include "python/held_payload.hpp"

#include <cstdint>
#include <cstring>
#include <memory>

#include "python/tensor_payload.hpp"

namespace rrfp::py {
namespace {

constexpr std::uint32_t kHeldMagic = 0x48504652;  // "RFPH": held tensors, not bytes

// The payload's bytes: a magic number and the address of the object that holds the tensors. A
// payload of bytes would have to hold its own owner's address to pass for one.
struct Head {
  std::uint32_t magic, pad;
  const void* self;
};

struct Held {
  Head head;
  HeldTensors content;
};

at::Tensor held_copy(const at::Tensor& t) {
  if (t.is_cuda()) return t.detach();  // copied on the stage's stream (the header says why)
  // Through the CPU as a message of bytes would go (a meta tensor fails there, in the producer's
  // task).
  return copy_keeping_layout(t.is_cpu() ? t : t.to(at::kCPU));
}

}  // namespace

Payload hold_tensors(std::optional<std::string> structure, const std::vector<at::Tensor>& tensors,
                     const std::string& what) {
  auto held = std::make_shared<Held>();
  held->head = Head{kHeldMagic, 0, held.get()};
  held->content.structure = std::move(structure);
  held->content.tensors.reserve(tensors.size());
  for (const at::Tensor& t : tensors) {
    check_sendable(t, what);
    held->content.tensors.push_back(held_copy(t));
  }
  const auto* bytes = reinterpret_cast<const std::byte*>(&held->head);
  return Payload(std::shared_ptr<const void>(held), bytes, sizeof(Head));
}

const HeldTensors* held_of(const Payload& p) {
  if (p.size() != sizeof(Head)) return nullptr;
  Head h{};
  std::memcpy(&h, p.data(), sizeof h);
  if (h.magic != kHeldMagic || h.self != p.owner().get()) return nullptr;
  return &static_cast<const Held*>(p.owner().get())->content;
}

}  // namespace rrfp::py
