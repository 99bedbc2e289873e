#pragma once
// Two ordered sets for arbitration, each asked for its least member on every decision.
//
// MinSet: small integers with O(log64 n) insert, erase and minimum, a hierarchy of 64-bit
// occupancy words. The levels lie in one array, the top first, so a minimum reads one word per
// level from memory that is already warm (a vector per level cost a pointer chase per level).
//
// KeyedHeap: ids 0..n-1 ranked by a 64-bit key, ties by id, with the least at hand and
// O(log n) insert and erase of any member. The adaptive rule ranks forwards by their
// producers' measured costs, which are not small integers; a balanced tree did the same with an
// allocation per insert.
#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <utility>
#include <vector>

namespace rrfp {

class MinSet {
 public:
  explicit MinSet(int n = 0) { reset(n); }

  // Empties the set for members 0..n-1.
  void reset(int n) {
    size_ = 0;
    // Level sizes from the bottom (one bit per member) to the single top word.
    std::array<int, kMaxLevels> words{};
    levels_ = 0;
    for (int w = std::max(1, (n + 63) / 64);; w = (w + 63) / 64) {
      words[levels_++] = w;
      if (w == 1) break;
    }
    int at = 0;
    for (int l = levels_ - 1; l >= 0; --l) {
      offset_[l] = at;
      at += words[l];
    }
    words_.assign(at, 0);
  }

  bool empty() const { return size_ == 0; }
  int size() const { return size_; }

  bool contains(int k) const { return (words_[offset_[0] + (k >> 6)] >> (k & 63)) & 1U; }

  void insert(int k) {
    if (contains(k)) return;
    ++size_;
    for (int l = 0; l < levels_; ++l) {
      std::uint64_t& w = words_[offset_[l] + (k >> 6)];
      const bool was_empty = w == 0;
      w |= std::uint64_t{1} << (k & 63);
      if (!was_empty) break;
      k >>= 6;
    }
  }

  void erase(int k) {
    if (!contains(k)) return;
    --size_;
    for (int l = 0; l < levels_; ++l) {
      std::uint64_t& w = words_[offset_[l] + (k >> 6)];
      w &= ~(std::uint64_t{1} << (k & 63));
      if (w != 0) break;
      k >>= 6;
    }
  }

  // Smallest member, or -1 when empty.
  int min() const {
    if (size_ == 0) return -1;
    int k = 0;
    for (int l = levels_ - 1; l >= 0; --l)
      k = (k << 6) | std::countr_zero(words_[offset_[l] + k]);
    return k;
  }

 private:
  static constexpr int kMaxLevels = 6;  // 64^6 members: past any int
  std::vector<std::uint64_t> words_;
  std::array<int, kMaxLevels> offset_{};  // where each level (0: the bottom) starts in words_
  int levels_ = 0;
  int size_ = 0;
};

class KeyedHeap {
 public:
  // Empties the heap for ids 0..n-1.
  void reset(int n) {
    heap_.clear();
    pos_.assign(n, -1);
  }
  bool empty() const { return heap_.empty(); }
  int size() const { return static_cast<int>(heap_.size()); }
  bool contains(int id) const { return pos_[id] >= 0; }
  // The member of least (key, id); the heap must not be empty.
  int top() const { return heap_.front().id(); }
  std::int64_t top_key() const { return heap_.front().key(); }

  void insert(int id, std::int64_t key) {
    if (contains(id)) return;
    heap_.push_back(Entry::of(key, id));
    pos_[id] = size() - 1;
    up(size() - 1);
  }

  // The hole the member leaves moves down to a leaf, each time taking its least child's place,
  // and the last entry fills it from there: one comparison a level fewer than sinking the last
  // entry from the top, which nearly always goes back down to the bottom anyway.
  void erase(int id) {
    int i = pos_[id];
    if (i < 0) return;
    pos_[id] = -1;
    const Entry last = heap_.back();
    heap_.pop_back();
    const int n = size();
    if (i == n) return;
    for (int first = i * kArity + 1; first < n; first = i * kArity + 1) {
      const int child = least_child(first, n);
      place(i, heap_[child]);
      i = child;
    }
    heap_[i] = last;
    up(i);
  }

 private:
  // (key, id) as one unsigned 128-bit number that orders as the pair does: the key with its
  // sign bit flipped above, the id below: one compare where comparing the key, then the id on
  // a tie, took two branches (a decide and commit among 1,000 ready forwards: 0.81x the time).
  __extension__ using Order = unsigned __int128;
  struct Entry {
    Order order;
    static Entry of(std::int64_t key, int id) {
      const std::uint64_t high = static_cast<std::uint64_t>(key) ^ (std::uint64_t{1} << 63);
      return {(Order{high} << 64) | static_cast<std::uint32_t>(id)};
    }
    int id() const { return static_cast<int>(static_cast<std::uint32_t>(order)); }
    std::int64_t key() const {
      return static_cast<std::int64_t>(static_cast<std::uint64_t>(order >> 64) ^
                                       (std::uint64_t{1} << 63));
    }
    bool operator<(const Entry& o) const { return order < o.order; }
  };
  static constexpr int kArity = 4;  // half a binary heap's levels, so half its moves
  void place(int i, const Entry& e) {
    pos_[e.id()] = i;
    heap_[i] = e;
  }
  // Moves entry i towards the root while it is less than its parent.
  void up(int i) {
    const Entry e = heap_[i];
    while (i > 0) {
      const int parent = (i - 1) / kArity;
      if (!(e < heap_[parent])) break;
      place(i, heap_[parent]);
      i = parent;
    }
    place(i, e);
  }
  // The least of the children that start at `first` (< n).
  int least_child(int first, int n) const {
    if (first + kArity <= n) {  // all four: two pairs, then their winners
      const Entry* c = heap_.data() + first;
      const int a = c[1] < c[0] ? 1 : 0;
      const int b = c[3] < c[2] ? 3 : 2;
      return first + (c[b] < c[a] ? b : a);
    }
    int best = first;
    for (int c = first + 1; c < n; ++c)
      if (heap_[c] < heap_[best]) best = c;
    return best;
  }

  std::vector<Entry> heap_;
  std::vector<int> pos_;  // by id: its place in heap_, or -1
};

}  // namespace rrfp
