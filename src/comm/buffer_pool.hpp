#pragma once
// Receive buffers for large payloads, kept for reuse once the payload's last holder lets go:
// a fresh multi-megabyte allocation is a fresh mapping, and faulting its pages in cost much of
// the bandwidth (measured: docs/results-mpi.md). Sizes are rounded up to a power of
// two from 64 KiB, and a request takes a free buffer of its size or up to 4x larger, so
// activations of varying lengths share buffers.
//
// A pool keeps every buffer returned to it. A buffer of a size is mapped only when every one of
// that size is out, so it holds at most as many of a size as were out at once, which is what a
// step needs, and the steps after the first one that reached that peak map nothing. Its memory
// is bounded by that peak, summed over the sizes (a cap of 8
// buffers a size and 256 MiB in all freed buffers that the next step mapped again: a stage
// with 12 outputs of one size in flight, or messages of 32 MiB, never settled).
//
// What a step holds at once depends on its timing, so a later step may still pass the warm-up's
// peak. A caller that knows its bound maps that many ahead (reserve): then no step maps any.
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "comm/payload.hpp"

namespace rrfp {

class BufferPool : public std::enable_shared_from_this<BufferPool> {
 public:
  // A payload of `n` bytes whose memory returns to the pool when its last holder lets go (or
  // is freed, once the pool is gone). The pool must be held by a shared_ptr.
  // `fresh` (if given) says whether the memory is new (its pages not yet touched).
  Payload get(std::size_t n, bool* fresh = nullptr);

  // Buffers every pool of this process has mapped afresh so far. A step that maps one pays
  // its page faults (a fresh buffer takes far longer to fill than a reused one; measured:
  // docs/data/twin-history.md, "What the 32 MiB lean is not"), so a runtime reports the count
  // per step (StepResult::fresh_buffers) and `rrfp run` warms up until a step maps none.
  static std::uint64_t fresh_total();

  // Maps ahead, so that `count` requests of `n` bytes out at once map nothing: the pool then
  // holds at least `count` free buffers of their size. `touch`: their pages are written now, so
  // that a step writing them takes no page fault either. Not counted by fresh_total(), which
  // counts the mappings made within steps, but by reserved_total(). Stops at the first
  // allocation that fails (address space or memory ran out): the steps then map the rest.
  void reserve(std::size_t n, int count, bool touch);

  // Bytes every pool of this process has mapped ahead so far.
  static std::uint64_t reserved_total();

  // The size of the buffer that a request of `n` bytes takes when one of its own size is free.
  static std::size_t capacity_of(std::size_t n);

  // Bytes held for reuse now.
  std::size_t held_bytes();

 private:
  static constexpr int kUpSizes = 2;  // a request may take a buffer up to 4x its size
  void put(std::byte* p, std::size_t cap);

  std::mutex mu_;
  std::map<std::size_t, std::vector<std::unique_ptr<std::byte[]>>> free_;  // by capacity
};

}  // namespace rrfp
