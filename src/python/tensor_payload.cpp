#include "python/tensor_payload.hpp"

#include <array>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "core/error.hpp"

namespace rrfp::py {
namespace {

constexpr std::uint32_t kMagic = 0x54504652;  // "RFPT"
constexpr std::size_t kAlign = 64;            // data starts on a cache line

// The dtypes a payload may carry, by a code of our own (c10's enum is not a wire format).
constexpr std::array<at::ScalarType, 10> kTypes = {
    at::kFloat, at::kDouble, at::kHalf, at::kBFloat16, at::kLong,
    at::kInt,   at::kShort,  at::kChar, at::kByte,     at::kBool};

struct Header {
  std::uint32_t magic;
  std::uint8_t dtype, ndim, pad[2];
};

std::size_t data_offset(int ndim) {
  const std::size_t h = sizeof(Header) + sizeof(std::int64_t) * static_cast<std::size_t>(ndim);
  return (h + kAlign - 1) / kAlign * kAlign;
}

}  // namespace

Payload encode_tensor(const at::Tensor& t, const std::string& what) {
  std::size_t code = 0;
  while (code < kTypes.size() && kTypes[code] != t.scalar_type())
    ++code;
  if (code == kTypes.size())
    throw InputError(what + ": tensors of dtype " + std::string(c10::toString(t.scalar_type())) +
                     " cannot be sent between stages");
  if (t.dim() > kMaxDims)
    throw InputError(what + ": a tensor of " + std::to_string(t.dim()) +
                     " dimensions cannot be sent between stages (at most " +
                     std::to_string(kMaxDims) + ")");
  const at::Tensor c = t.detach().to(at::kCPU).contiguous();
  const std::size_t offset = data_offset(static_cast<int>(c.dim()));
  const std::size_t bytes = static_cast<std::size_t>(c.numel()) * c.element_size();
  Payload p = Payload::allocate(offset + bytes);
  auto* out = const_cast<std::byte*>(p.data());
  const Header h{kMagic, static_cast<std::uint8_t>(code), static_cast<std::uint8_t>(c.dim()), {}};
  std::memset(out, 0, offset);
  std::memcpy(out, &h, sizeof h);
  for (int d = 0; d < c.dim(); ++d) {
    const std::int64_t n = c.size(d);
    std::memcpy(out + sizeof h + sizeof n * static_cast<std::size_t>(d), &n, sizeof n);
  }
  if (bytes) std::memcpy(out + offset, c.data_ptr(), bytes);
  return p;
}

at::Tensor decode_tensor(const Payload& p, const std::string& what) {
  auto bad = [&](const std::string& why) {
    return ProtocolError(what + ": the message is not a tensor: " + why);
  };
  Header h{};
  if (p.size() < sizeof h) throw bad(std::to_string(p.size()) + " bytes");
  std::memcpy(&h, p.data(), sizeof h);
  if (h.magic != kMagic) throw bad("wrong magic number");
  if (h.dtype >= kTypes.size()) throw bad("dtype code " + std::to_string(h.dtype));
  if (h.ndim > kMaxDims) throw bad(std::to_string(h.ndim) + " dimensions");
  const std::size_t offset = data_offset(h.ndim);
  if (p.size() < offset) throw bad("a header of " + std::to_string(p.size()) + " bytes");
  std::vector<std::int64_t> shape(h.ndim);
  std::uint64_t numel = 1;
  for (int d = 0; d < h.ndim; ++d) {
    std::memcpy(&shape[d], p.data() + sizeof h + sizeof(std::int64_t) * d, sizeof(std::int64_t));
    if (shape[d] < 0) throw bad("a negative size");
    const auto n = static_cast<std::uint64_t>(shape[d]);
    if (n && numel > std::numeric_limits<std::uint64_t>::max() / 16 / n)
      throw bad("a shape too large");
    numel *= n;
  }
  const at::ScalarType type = kTypes[h.dtype];
  const std::uint64_t bytes = numel * c10::elementSize(type);
  if (p.size() - offset != bytes)
    throw bad(std::to_string(p.size() - offset) + " data bytes for " + std::to_string(bytes));
  // The tensor owns a reference to the buffer: no copy, and the buffer lives as long as it.
  auto keep = std::make_unique<std::shared_ptr<const void>>(p.owner());
  auto* raw = keep.get();
  at::Tensor t = at::from_blob(
      const_cast<std::byte*>(p.data() + offset), shape, [raw](void*) { delete raw; },
      at::TensorOptions().dtype(type));
  (void)keep.release();  // the tensor's deleter owns it now
  return t;
}

}  // namespace rrfp::py
