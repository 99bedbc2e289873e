#include "dist/replica_sum.hpp"

#include <bit>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.hpp"

namespace rrfp {
namespace {

constexpr const char* kNames[] = {"float32", "float64", "float16", "bfloat16"};
constexpr std::size_t kSizes[] = {4, 8, 2, 2};

std::size_t size_of(NumKind k) {
  return kSizes[static_cast<int>(k)];
}

float f16_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (m << 13));  // inf, NaN
  if (e == 0) {  // zero or subnormal: m units of 2^-24, exact in a float
    const float v = std::ldexp(static_cast<float>(m), -24);
    return sign ? -v : v;
  }
  return std::bit_cast<float>(sign | ((e + 112) << 23) | (m << 13));
}

// Drops the low `shift` bits of `m`, rounding to the nearest and ties to even.
std::uint32_t round_off(std::uint32_t m, int shift) {
  const std::uint32_t kept = m >> shift, rest = m & ((1u << shift) - 1), half = 1u << (shift - 1);
  return kept + ((rest > half || (rest == half && (kept & 1u))) ? 1u : 0u);
}

std::uint16_t float_to_f16(float f) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  const auto sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
  const std::uint32_t a = x & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7e00u;   // NaN
  if (a >= 0x47800000u) return sign | 0x7c00u;  // 2^16 and up (inf too): inf
  if (a < 0x33000000u) return sign;             // below 2^-25: zero (2^-25 itself ties to it)
  const int e = static_cast<int>(a >> 23) - 127;
  const std::uint32_t m = (a & 0x7fffffu) | 0x800000u;  // 24 significant bits
  if (e < -14)  // a subnormal half: units of 2^-24; rounding up to 0x400 gives the least normal
    return sign | static_cast<std::uint16_t>(round_off(m, -e - 1));
  // 11 significant bits; a carry out of them raises the exponent (to inf above 65504).
  return sign |
         static_cast<std::uint16_t>((static_cast<std::uint32_t>(e + 14) << 10) + round_off(m, 13));
}

float bf16_to_float(std::uint16_t b) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16);
}

std::uint16_t float_to_bf16(float f) {
  if (std::isnan(f)) return 0x7fc0u;  // torch's NaN, whatever the sign
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  return static_cast<std::uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

template <typename T, typename Add>
void add_into(std::byte* out, const std::byte* in, std::size_t bytes, Add add) {
  for (std::size_t i = 0; i < bytes; i += sizeof(T)) {
    T a, b;
    std::memcpy(&a, out + i, sizeof(T));
    std::memcpy(&b, in + i, sizeof(T));
    const T s = add(a, b);
    std::memcpy(out + i, &s, sizeof(T));
  }
}

void add_part(NumKind k, std::byte* out, const std::byte* in, std::size_t bytes) {
  switch (k) {
    case NumKind::f32:
      return add_into<float>(out, in, bytes, [](float a, float b) { return a + b; });
    case NumKind::f64:
      return add_into<double>(out, in, bytes, [](double a, double b) { return a + b; });
    case NumKind::f16:
      return add_into<std::uint16_t>(out, in, bytes, add_f16);
    case NumKind::bf16:
      return add_into<std::uint16_t>(out, in, bytes, add_bf16);
  }
}

// What a replica sends: the count of parts, each part's kind and byte size, then their bytes.
std::vector<std::byte> packed(std::span<const NumSpan> parts) {
  std::vector<std::uint64_t> head = {parts.size()};
  std::size_t data = 0;
  for (const auto& p : parts) {
    if (static_cast<int>(p.kind) > 3)
      throw InputError("dp sum: unknown value kind " + std::to_string(static_cast<int>(p.kind)));
    if (p.bytes.size() % size_of(p.kind) != 0)
      throw InputError(std::string("dp sum: ") + std::to_string(p.bytes.size()) +
                       " bytes are not a whole number of " + kNames[static_cast<int>(p.kind)] +
                       " values");
    head.push_back(static_cast<std::uint64_t>(p.kind));
    head.push_back(p.bytes.size());
    data += p.bytes.size();
  }
  std::vector<std::byte> out(head.size() * sizeof(std::uint64_t) + data);
  std::memcpy(out.data(), head.data(), head.size() * sizeof(std::uint64_t));
  std::byte* at = out.data() + head.size() * sizeof(std::uint64_t);
  for (const auto& p : parts) {
    if (!p.bytes.empty()) std::memcpy(at, p.bytes.data(), p.bytes.size());
    at += p.bytes.size();
  }
  return out;
}

// A replica's header (count, then kind and size a part), read from what it sent.
std::vector<std::uint64_t> header_of(const std::vector<std::byte>& b) {
  std::uint64_t n = 0;
  if (b.size() >= sizeof n) std::memcpy(&n, b.data(), sizeof n);
  const std::size_t words = 1 + 2 * static_cast<std::size_t>(n);
  if (b.size() < words * sizeof n) throw Error("dp sum: a replica sent a truncated header");
  std::vector<std::uint64_t> h(words);
  std::memcpy(h.data(), b.data(), words * sizeof n);
  return h;
}

// "120 float32 and 3 float64 values" (or "no values").
std::string described(const std::vector<std::uint64_t>& h) {
  std::string s;
  for (std::size_t i = 1; i + 1 < h.size(); i += 2) {
    if (!s.empty()) s += " and ";
    const auto k = static_cast<std::size_t>(h[i] < 4 ? h[i] : 0);
    s += std::to_string(h[i + 1] / kSizes[k]) + " " + kNames[k];
  }
  return (s.empty() ? "no" : s) + " values";
}

}  // namespace

std::uint16_t add_f16(std::uint16_t a, std::uint16_t b) {
  return float_to_f16(f16_to_float(a) + f16_to_float(b));
}

std::uint16_t add_bf16(std::uint16_t a, std::uint16_t b) {
  return float_to_bf16(bf16_to_float(a) + bf16_to_float(b));
}

void dp_sum(Job& job, std::span<const NumSpan> parts) {
  const auto all = job.dp_all_gather(packed(parts));
  // Every replica gets the same list, so a mismatch fails on all of them alike; summing the
  // overlap would leave each replica other bits (which parameters train is the replicas' to
  // agree on, and a frozen parameter on one of them is easily missed).
  const auto head = header_of(all[0]);
  for (std::size_t r = 1; r < all.size(); ++r)
    if (const auto h = header_of(all[r]); h != head)
      throw InputError("`dp`: the replicas' gradients differ (replica 0: " + described(head) +
                       "; replica " + std::to_string(r) + ": " + described(h) +
                       "): every replica must train the same parameters");
  std::size_t at = head.size() * sizeof(std::uint64_t);
  for (const auto& p : parts) {
    if (!p.bytes.empty()) std::memcpy(p.bytes.data(), all[0].data() + at, p.bytes.size());
    for (std::size_t r = 1; r < all.size(); ++r)
      add_part(p.kind, p.bytes.data(), all[r].data() + at, p.bytes.size());
    at += p.bytes.size();
  }
}

void dp_sum(Job& job, std::span<float> values) {
  const NumSpan part{NumKind::f32, std::as_writable_bytes(values)};
  dp_sum(job, std::span<const NumSpan>(&part, 1));
}

}  // namespace rrfp
