#pragma once
// Division of a non-negative int by a divisor fixed at run time, as a multiply and a shift
// (Granlund and Montgomery's round-up method): the simulator turns a flat task index into
// (kind, chunk, microbatch) on every event, and two hardware divisions cost more than the rest
// of the conversion.
#include <bit>
#include <cstdint>

namespace rrfp {

class FastDivisor {
 public:
  FastDivisor() : FastDivisor(1) {}
  // 1 <= d < 2^31. With l = ceil(log2 d) and m = floor(2^(32+l) / d) + 1, m * d lies in
  // (2^(32+l), 2^(32+l) + 2^l], which makes (n * m) >> (32 + l) exact for every n < 2^32; here
  // n < 2^31 and m <= 2^33, so the product fits in 64 bits.
  explicit FastDivisor(std::uint32_t d)
      : shift_(32 + std::bit_width(d - 1)),
        magic_((std::uint64_t{1} << shift_) / d + 1) {}  // shift_ <= 63: d < 2^31
  // n / d for 0 <= n < 2^31.
  int divide(int n) const {
    return static_cast<int>((static_cast<std::uint64_t>(n) * magic_) >> shift_);
  }

 private:
  int shift_;
  std::uint64_t magic_;
};

}  // namespace rrfp
