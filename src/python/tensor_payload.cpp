#include "python/tensor_payload.hpp"

#include <c10/util/strides.h>
#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/Layout.h>

#include <algorithm>
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

// How the data bytes lie. A plain loop's consumer gets the producer's tensor itself, and
// torch's kernels follow its strides (the order of a reduction's additions among them), so a
// layout other than contiguous travels with the tensor: a transposed view, channels last.
enum Layout : std::uint8_t {
  kContiguous = 0,
  kDense = 1,    // strides follow the shape; the bytes are the tensor's memory, in order
  kScatter = 2,  // strides follow; the bytes are contiguous, written into those strides
  // Strides follow, and elements share memory (an expanded or unfolded tensor): the bytes are
  // the memory the strides reach from the first element, viewed with them. It went contiguous,
  // and a reduction over it added in another order than over the producer's tensor.
  kSpan = 3,
};

struct Header {
  std::uint32_t magic;
  std::uint8_t dtype, ndim, layout, pad;
};

std::size_t data_offset(int ndim, std::uint8_t layout) {
  const std::size_t dims = static_cast<std::size_t>(ndim) * (layout == kContiguous ? 1 : 2);
  const std::size_t h = sizeof(Header) + sizeof(std::int64_t) * dims;
  return (h + kAlign - 1) / kAlign * kAlign;
}

}  // namespace

namespace {

// A tensor checked and brought to the CPU, with its layout and where its bytes go in its
// encoding.
struct Prepared {
  at::Tensor c;     // its sizes, and its strides unless contiguous, are the receiver's
  at::Tensor data;  // the bytes sent: `c`'s memory (contiguous or dense), or a contiguous copy
  std::uint8_t code, layout;
  std::size_t offset, bytes;
  std::size_t size() const { return offset + bytes; }
};

// Whether no two elements of `c` share memory: by increasing stride, each dimension steps past
// all that the smaller ones reach. (at::has_internal_overlap answers "too hard" for a view with
// gaps between its rows, which then went contiguous.)
bool without_overlap(const at::Tensor& c) {
  std::vector<std::pair<std::int64_t, std::int64_t>> dims;  // (stride, size)
  for (int d = 0; d < c.dim(); ++d)
    if (c.size(d) > 1) dims.emplace_back(c.stride(d), c.size(d));
  std::sort(dims.begin(), dims.end());
  std::int64_t reach = 0;  // the farthest element of the dimensions so far
  for (const auto& [stride, size] : dims) {
    if (stride <= reach) return false;
    reach += (size - 1) * stride;
  }
  return true;
}

// The elements from a tensor's first to the farthest its strides reach (0 when it has none).
std::int64_t span_of(const at::Tensor& c) {
  if (c.numel() == 0) return 0;
  std::int64_t last = 0;
  for (int d = 0; d < c.dim(); ++d)
    last += (c.size(d) - 1) * c.stride(d);
  return last + 1;
}

// A tensor sharing memory travels as the span it reaches while that is at most this many times
// its elements (an unfold's windows, a broadcast row); past it, contiguous, its reductions then
// adding in another order than the producer's tensor: a slice of a large activation, expanded
// (h[:, :1].expand(...)), reached 96x its elements.
constexpr std::int64_t kMostSpanPerElement = 4;

// Whether `c`'s strides are the ones a contiguous tensor of its shape is made with. torch calls
// a tensor contiguous whatever the strides of its size-1 dimensions: a one-channel image whose
// strides say channels-last, (H*W, 1, W, 1), is both, and the next convolution follows those
// strides (its output channels-last). Sent as contiguous, it arrived (H*W, H*W, W, 1): the
// convolution's output came out NCHW, and every reduction after it added in another order.
bool default_strides(const at::Tensor& c) {
  return c.strides() == c10::IntArrayRef(c10::contiguous_strides(c.sizes()));
}

std::uint8_t layout_of(const at::Tensor& c) {
  if (c.is_contiguous() && default_strides(c)) return kContiguous;
  if (!without_overlap(c))
    return span_of(c) <= kMostSpanPerElement * std::max<std::int64_t>(1, c.numel()) ? kSpan
                                                                                    : kContiguous;
  return c.is_non_overlapping_and_dense() ? kDense : kScatter;
}

// That memory as a one-dimensional tensor (a view: the bytes a kSpan message carries).
at::Tensor span_view(const at::Tensor& c) {
  return c.as_strided({span_of(c)}, {1}, c.storage_offset());
}

// torch's Python name of a layout ("torch.sparse_coo"), from torch's own table, for the refusal.
std::string layout_name(at::Layout layout) {
  return torch::getTHPLayout(layout)->name;
}

}  // namespace

namespace {

// The dtype's code in kTypes, or kTypes.size() for one no message carries.
std::size_t dtype_code(const at::Tensor& t) {
  return static_cast<std::size_t>(std::find(kTypes.begin(), kTypes.end(), t.scalar_type()) -
                                  kTypes.begin());
}

}  // namespace

void check_sendable(const at::Tensor& t, const std::string& what) {
  // Only a strided tensor's memory is its values: a sparse one (a graph's adjacency) has none
  // to take, and failed in data_ptr() with c10's own error and stack.
  if (t.layout() != at::kStrided) {
    const bool sparse = t.is_sparse() || t.is_sparse_csr();
    throw InputError(what + ": tensors of layout " + layout_name(t.layout()) +
                     " cannot be sent between stages (only strided ones travel): " +
                     (sparse ? "send its indices() and values() and rebuild it in the next "
                               "chunk, or hold it in each chunk that needs it"
                             : "send it as a strided tensor (to_dense()) and convert it back "
                               "in the next chunk"));
  }
  // A nested tensor says strided (torch 1.13) and a meta one holds no values: both failed in
  // the copy with c10's own error.
  if (t.is_nested())
    throw InputError(what +
                     ": nested tensors cannot be sent between stages: send its "
                     "components (unbind()) or a padded tensor (to_padded_tensor()) and rebuild "
                     "it in the next chunk");
  if (t.is_meta())
    throw InputError(what +
                     ": a tensor on the meta device holds no values to send between "
                     "stages; materialize it (to_empty() on a device) first");
  if (dtype_code(t) == kTypes.size())
    throw InputError(what + ": tensors of dtype " + std::string(c10::toString(t.scalar_type())) +
                     " cannot be sent between stages");
  if (t.dim() > kMaxDims)
    throw InputError(what + ": a tensor of " + std::to_string(t.dim()) +
                     " dimensions cannot be sent between stages (at most " +
                     std::to_string(kMaxDims) + ")");
}

at::Tensor copy_keeping_layout(const at::Tensor& t) {
  at::Tensor c = t.detach();
  if (c.is_neg()) return c.resolve_neg();  // a copy, as the message's values
  const std::uint8_t layout = layout_of(c);
  if (layout == kContiguous) return c.clone(at::MemoryFormat::Contiguous);
  // Sharing memory: a copy of the memory, viewed with the same strides (as a decoded message).
  if (layout == kSpan) return span_view(c).clone().as_strided(c.sizes(), c.strides(), 0);
  // Dense or with gaps: the same strides, over the span they reach (as a decoded message).
  at::Tensor out = at::empty_strided(c.sizes(), c.strides(), c.options());
  out.copy_(c);
  return out;
}

namespace {

Prepared prepare(const at::Tensor& t, const std::string& what) {
  check_sendable(t, what);
  Prepared p{t.detach(), {}, static_cast<std::uint8_t>(dtype_code(t)), 0, 0, 0};
  // A lazy negation (the imaginary part of a conjugate view, z.conj().imag) is a flag beside
  // the memory, which is what travels: unresolved, its sign was dropped. (A lazy conjugation
  // lives on complex tensors only, refused above.)
  if (p.c.is_neg()) p.c = p.c.resolve_neg();
  // The layout is the tensor's where it is: brought to the CPU first, a GPU's tensor sharing
  // memory or with gaps went contiguous (to() keeps only a dense one's strides).
  p.layout = layout_of(p.c);
  if (p.layout == kContiguous) p.c = p.c.contiguous();
  // A dense tensor's memory is its numel() elements from data_ptr(), whatever their order
  // (to() keeps it so).
  p.data = (p.layout == kScatter ? p.c.contiguous()
            : p.layout == kSpan  ? span_view(p.c)
                                 : p.c)
               .to(at::kCPU);
  p.offset = data_offset(static_cast<int>(p.c.dim()), p.layout);
  p.bytes = static_cast<std::size_t>(p.data.numel()) * p.c.element_size();
  return p;
}

void write(std::byte* out, const Prepared& p) {
  const int ndim = static_cast<int>(p.c.dim());
  const Header h{kMagic, p.code, static_cast<std::uint8_t>(ndim), p.layout, 0};
  std::memset(out, 0, p.offset);
  std::memcpy(out, &h, sizeof h);
  auto* dims = out + sizeof h;
  for (int d = 0; d < ndim; ++d) {
    const std::int64_t n = p.c.size(d), stride = p.c.stride(d);
    std::memcpy(dims + sizeof n * static_cast<std::size_t>(d), &n, sizeof n);
    if (p.layout != kContiguous)
      std::memcpy(dims + sizeof n * static_cast<std::size_t>(ndim + d), &stride, sizeof stride);
  }
  if (p.bytes) std::memcpy(out + p.offset, p.data.data_ptr(), p.bytes);
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

namespace {

// The strides a header carries after the shape (none for a contiguous tensor), checked: a dense
// tensor's elements must lie within its numel(), a scattered or shared one's within 2^40
// elements (its receiver allocates the span they reach: a slice of a large tensor costs the
// whole span). `span`: the elements from the first to the farthest (0 for none).
template <typename Bad>
std::vector<std::int64_t> strides_of(const Payload& p, const Header& h,
                                     const std::vector<std::int64_t>& shape, std::uint64_t numel,
                                     std::uint64_t& span, const Bad& bad) {
  span = numel;
  if (h.layout == kContiguous) return {};
  constexpr std::uint64_t kFarthest = std::uint64_t{1} << 40;
  std::vector<std::int64_t> strides(h.ndim);
  std::uint64_t last = 0;  // the farthest element's offset
  for (int d = 0; d < h.ndim; ++d) {
    std::memcpy(&strides[d], p.data() + sizeof h + sizeof(std::int64_t) * (h.ndim + d),
                sizeof(std::int64_t));
    if (strides[d] < 0 || static_cast<std::uint64_t>(strides[d]) > kFarthest)
      throw bad("a stride out of range");
    if (shape[d] <= 1 || strides[d] == 0) continue;
    const auto steps = static_cast<std::uint64_t>(shape[d] - 1);
    const auto stride = static_cast<std::uint64_t>(strides[d]);
    if (steps > (kFarthest - last) / stride) throw bad("strides reaching too far");
    last += steps * stride;
  }
  if (h.layout == kDense && numel > 0 && last >= numel) throw bad("strides outside the data");
  if (h.layout == kSpan) span = numel > 0 ? last + 1 : 0;
  return strides;
}

}  // namespace

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
  if (h.layout > kSpan) throw bad("layout code " + std::to_string(h.layout));
  const std::size_t offset = data_offset(h.ndim, h.layout);
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
  std::uint64_t span = numel;  // the elements the data bytes hold
  const std::vector<std::int64_t> strides = strides_of(p, h, shape, numel, span, bad);
  const std::uint64_t bytes = span * c10::elementSize(type);
  if (p.size() - offset != bytes)
    throw bad(std::to_string(p.size() - offset) + " data bytes for " + std::to_string(bytes));
  // The tensor owns a reference to the buffer: no copy, and the buffer lives as long as it.
  auto keep = std::make_unique<std::shared_ptr<const void>>(p.owner());
  auto* raw = keep.get();
  auto* data = const_cast<std::byte*>(p.data() + offset);
  auto deleter = [raw](void*) { delete raw; };
  const auto options = at::TensorOptions().dtype(type);
  at::Tensor t = h.layout == kDense || h.layout == kSpan
                     ? at::from_blob(data, shape, strides, deleter, options)
                     : at::from_blob(data, shape, deleter, options);
  (void)keep.release();  // the tensor's deleter owns it now
  if (h.layout != kScatter) return t;
  at::Tensor out = at::empty_strided(shape, strides, options);
  out.copy_(t);
  return out;
}

}  // namespace rrfp::py
