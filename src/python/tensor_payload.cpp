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

namespace {

// A tensor checked and made contiguous on the CPU, with where its bytes go in its encoding.
struct Prepared {
  at::Tensor c;
  std::uint8_t code;
  std::size_t offset, bytes;
  std::size_t size() const { return offset + bytes; }
};

Prepared prepare(const at::Tensor& t, const std::string& what) {
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
  Prepared p{t.detach().to(at::kCPU).contiguous(), static_cast<std::uint8_t>(code), 0, 0};
  p.offset = data_offset(static_cast<int>(p.c.dim()));
  p.bytes = static_cast<std::size_t>(p.c.numel()) * p.c.element_size();
  return p;
}

void write(std::byte* out, const Prepared& p) {
  const Header h{kMagic, p.code, static_cast<std::uint8_t>(p.c.dim()), {}};
  std::memset(out, 0, p.offset);
  std::memcpy(out, &h, sizeof h);
  for (int d = 0; d < p.c.dim(); ++d) {
    const std::int64_t n = p.c.size(d);
    std::memcpy(out + sizeof h + sizeof n * static_cast<std::size_t>(d), &n, sizeof n);
  }
  if (p.bytes) std::memcpy(out + p.offset, p.c.data_ptr(), p.bytes);
}

constexpr std::uint32_t kTreeMagic = 0x53504652;  // "RFPS": a structure and its tensors

struct TreeHeader {
  std::uint32_t magic, count;
  std::uint64_t structure;  // bytes
};

std::size_t aligned(std::size_t n) {
  return (n + kAlign - 1) / kAlign * kAlign;
}

}  // namespace

Payload encode_tensor(const at::Tensor& t, const std::string& what) {
  const Prepared p = prepare(t, what);
  Payload out = Payload::allocate(p.size());
  write(const_cast<std::byte*>(out.data()), p);
  return out;
}

// Layout: the header, each tensor's encoded size, the structure, then each encoded tensor, every
// one starting on a cache line.
Payload encode_tree(std::string_view structure, const std::vector<at::Tensor>& leaves,
                    const std::string& what) {
  std::vector<Prepared> ps;
  for (const at::Tensor& t : leaves)
    ps.push_back(prepare(t, what));
  std::size_t at =
      aligned(sizeof(TreeHeader) + sizeof(std::uint64_t) * ps.size() + structure.size());
  const std::size_t first = at;
  for (const Prepared& p : ps)
    at += aligned(p.size());
  Payload out = Payload::allocate(at);
  auto* o = const_cast<std::byte*>(out.data());
  std::memset(o, 0, first);
  const TreeHeader h{kTreeMagic, static_cast<std::uint32_t>(ps.size()), structure.size()};
  std::memcpy(o, &h, sizeof h);
  for (std::size_t i = 0; i < ps.size(); ++i) {
    const std::uint64_t n = ps[i].size();
    std::memcpy(o + sizeof h + sizeof n * i, &n, sizeof n);
  }
  std::memcpy(o + sizeof h + sizeof(std::uint64_t) * ps.size(), structure.data(), structure.size());
  at = first;
  for (const Prepared& p : ps) {
    write(o + at, p);
    at += aligned(p.size());
  }
  return out;
}

bool is_tree(const Payload& p) {
  std::uint32_t magic = 0;
  if (p.size() < sizeof magic) return false;
  std::memcpy(&magic, p.data(), sizeof magic);
  return magic == kTreeMagic;
}

DecodedTree decode_tree(const Payload& p, const std::string& what) {
  auto bad = [&](const std::string& why) {
    return ProtocolError(what + ": the message is not a structure of tensors: " + why);
  };
  TreeHeader h{};
  if (p.size() < sizeof h) throw bad(std::to_string(p.size()) + " bytes");
  std::memcpy(&h, p.data(), sizeof h);
  if (h.magic != kTreeMagic) throw bad("wrong magic number");
  const std::size_t table = sizeof h + sizeof(std::uint64_t) * std::size_t{h.count};
  if (h.count > p.size() / sizeof(std::uint64_t) || h.structure > p.size() ||
      table + h.structure > p.size())
    throw bad("a header larger than its " + std::to_string(p.size()) + " bytes");
  DecodedTree out;
  out.structure.assign(reinterpret_cast<const char*>(p.data() + table), h.structure);
  std::size_t at = aligned(table + h.structure);
  for (std::uint32_t i = 0; i < h.count; ++i) {
    std::uint64_t n = 0;
    std::memcpy(&n, p.data() + sizeof h + sizeof n * i, sizeof n);
    if (at > p.size() || n > p.size() - at)
      throw bad("tensor " + std::to_string(i) + " overruns it");
    out.leaves.push_back(decode_tensor(Payload(p.owner(), p.data() + at, n), what));
    at += aligned(n);
  }
  return out;
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
