#include "comm/payload.hpp"

#include <cstring>

namespace rrfp {

Payload Payload::allocate(std::size_t size) {
  if (size == 0) return {};
  std::shared_ptr<std::byte[]> block(new std::byte[size]);
  const std::byte* data = block.get();
  return Payload(std::shared_ptr<const void>(block, data), data, size);
}

Payload Payload::copy_of(std::span<const std::byte> bytes) {
  if (bytes.empty()) return {};
  std::shared_ptr<std::byte[]> block(new std::byte[bytes.size()]);
  std::memcpy(block.get(), bytes.data(), bytes.size());
  const std::byte* data = block.get();
  return Payload(std::shared_ptr<const void>(block, data), data, bytes.size());
}

}  // namespace rrfp
