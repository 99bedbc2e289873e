#pragma once
// An opaque, immutable, reference-counted byte buffer: what a task hands to its consumers.
// The runtime never looks inside. In one process a payload moves by reference (zero copy); a
// transport between processes sends its bytes. `owner` keeps whatever backs the bytes alive
// (a vector, a tensor's storage), so training code can wrap its tensors without a copy.
#include <cstddef>
#include <memory>
#include <span>

namespace rrfp {

class Payload {
 public:
  Payload() = default;
  Payload(std::shared_ptr<const void> owner, const std::byte* data, std::size_t size)
      : owner_(std::move(owner)), data_(data), size_(size) {}

  // `size` bytes, left uninitialized: modelled activations cost no memset, and large blocks
  // come from untouched pages.
  static Payload allocate(std::size_t size);
  static Payload copy_of(std::span<const std::byte> bytes);

  const std::byte* data() const { return data_; }
  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  std::span<const std::byte> bytes() const { return {data_, size_}; }
  const std::shared_ptr<const void>& owner() const { return owner_; }

 private:
  std::shared_ptr<const void> owner_;
  const std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace rrfp
