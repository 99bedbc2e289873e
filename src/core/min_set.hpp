#pragma once
// A set of small integers with O(log64 n) insert, erase and minimum: a hierarchy of 64-bit
// occupancy words. Arbitration asks it for the best-ranked ready task without scanning.
#include <bit>
#include <cstdint>
#include <vector>

namespace rrfp {

class MinSet {
 public:
  explicit MinSet(int n = 0) { reset(n); }

  void reset(int n) {
    levels_.clear();
    size_ = 0;
    int words = std::max(1, (n + 63) / 64);
    for (;;) {
      levels_.emplace_back(words, 0);
      if (words == 1) break;
      words = (words + 63) / 64;
    }
  }

  bool empty() const { return size_ == 0; }
  int size() const { return size_; }

  bool contains(int k) const { return (levels_[0][k >> 6] >> (k & 63)) & 1U; }

  void insert(int k) {
    if (contains(k)) return;
    ++size_;
    for (auto& level : levels_) {
      std::uint64_t& w = level[k >> 6];
      const bool was_empty = w == 0;
      w |= std::uint64_t{1} << (k & 63);
      if (!was_empty) break;
      k >>= 6;
    }
  }

  void erase(int k) {
    if (!contains(k)) return;
    --size_;
    for (auto& level : levels_) {
      std::uint64_t& w = level[k >> 6];
      w &= ~(std::uint64_t{1} << (k & 63));
      if (w != 0) break;
      k >>= 6;
    }
  }

  // Smallest member, or -1 when empty.
  int min() const {
    if (size_ == 0) return -1;
    int k = 0;
    for (int l = static_cast<int>(levels_.size()) - 1; l >= 0; --l)
      k = (k << 6) | std::countr_zero(levels_[l][k]);
    return k;
  }

 private:
  std::vector<std::vector<std::uint64_t>> levels_;
  int size_ = 0;
};

}  // namespace rrfp
