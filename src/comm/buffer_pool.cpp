#include "comm/buffer_pool.hpp"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstring>
#include <limits>
#include <new>

namespace rrfp {

namespace {
std::atomic<std::uint64_t> fresh_buffers{0};
std::atomic<std::uint64_t> reserved_bytes{0};
}  // namespace

std::uint64_t BufferPool::fresh_total() {
  return fresh_buffers.load(std::memory_order_relaxed);
}

std::size_t BufferPool::capacity_of(std::size_t n) {
  // No power of two above 2^63 fits: bit_ceil's result there is undefined (it read 0, and a
  // payload of that size came on a buffer of 64 KiB). No allocation of that size succeeds.
  if (n > (std::numeric_limits<std::size_t>::max() >> 1) + 1) throw std::bad_alloc();
  return std::max<std::size_t>(std::bit_ceil(n), 64 * 1024);
}

Payload BufferPool::get(std::size_t n, bool* fresh) {
  const std::size_t cap = capacity_of(n);
  std::unique_ptr<std::byte[]> b;
  std::size_t got = cap;
  {
    // The smallest free buffer of this size or up to kUpSizes sizes larger: payloads whose
    // sizes vary (a multimodal microbatch's) then share buffers instead of each size needing
    // its own peak's worth. A buffer goes back under its own size.
    std::lock_guard lk(mu_);
    for (auto it = free_.lower_bound(cap); it != free_.end() && it->first <= (cap << kUpSizes);
         ++it)
      if (!it->second.empty()) {
        b = std::move(it->second.back());
        it->second.pop_back();
        got = it->first;
        break;
      }
  }
  if (fresh) *fresh = !b;
  if (!b) {
    b.reset(new std::byte[cap]);
    fresh_buffers.fetch_add(1, std::memory_order_relaxed);
  }
  std::byte* raw = b.release();
  std::weak_ptr<BufferPool> pool = weak_from_this();
  std::shared_ptr<const void> owner(raw, [pool, got](const void* p) {
    auto* q = static_cast<std::byte*>(const_cast<void*>(p));
    if (auto live = pool.lock())
      live->put(q, got);
    else
      delete[] q;
  });
  return Payload(std::move(owner), raw, n);
}

// Kept whatever the count: the buffers of a size, out or free, never outnumber the most of that
// size that were out at once (one is mapped only when all of its size are out).
void BufferPool::put(std::byte* p, std::size_t cap) {
  std::lock_guard lk(mu_);
  free_[cap].emplace_back(p);
}

void BufferPool::reserve(std::size_t n, int count, bool touch) {
  const std::size_t cap = capacity_of(n);
  std::size_t have = 0;
  {
    std::lock_guard lk(mu_);
    have = free_[cap].size();
  }
  // Mapped and written outside the lock: writing a large reservation takes a while.
  std::vector<std::unique_ptr<std::byte[]>> fresh;
  try {
    for (std::size_t i = have; i < static_cast<std::size_t>(std::max(count, 0)); ++i) {
      std::unique_ptr<std::byte[]> b(new std::byte[cap]);
      if (touch) std::memset(b.get(), 0, cap);
      fresh.push_back(std::move(b));  // on failure b still owns it
    }
  } catch (const std::bad_alloc&) {
    // Best effort: what could not be mapped ahead is mapped by the step that needs it.
  }
  reserved_bytes.fetch_add(fresh.size() * cap, std::memory_order_relaxed);
  std::lock_guard lk(mu_);
  for (auto& b : fresh)
    free_[cap].push_back(std::move(b));
}

std::uint64_t BufferPool::reserved_total() {
  return reserved_bytes.load(std::memory_order_relaxed);
}

std::size_t BufferPool::held_bytes() {
  std::lock_guard lk(mu_);
  std::size_t bytes = 0;
  for (const auto& [cap, v] : free_)
    bytes += cap * v.size();
  return bytes;
}

}  // namespace rrfp
