#pragma once
// A transport's ping-pong for the transport benchmarks (bench_mpi, bench_c10d): rank 0 sends
// `bytes`, rank 1's receive handler sends each message straight back, `iters` round trips.
// `barrier` lines the two processes up before and after. Seconds per round trip.
#include <condition_variable>
#include <functional>
#include <mutex>

#include "comm/transport.hpp"
#include "core/clock.hpp"

namespace rrfp {

inline double transport_round_trip(Transport& t, std::size_t bytes, int iters,
                                   const std::function<void()>& barrier) {
  std::mutex mu;
  std::condition_variable cv;
  int left = iters;
  std::int64_t t0 = 0, t1 = 0;
  const int rank = t.rank(), peer = 1 - rank;
  t.set_receiver([&](Message&& m) {
    if (rank == 1) {
      t.send(peer, m.tag, std::move(m.payload));
      if (m.tag.round == iters - 1) {
        std::lock_guard lk(mu);
        left = 0;
        cv.notify_all();
      }
      return;
    }
    std::lock_guard lk(mu);
    if (--left == 0) {
      t1 = now_ns();
      cv.notify_all();
      return;
    }
    MessageTag tag = m.tag;
    ++tag.round;
    t.send(peer, tag, std::move(m.payload));
  });
  barrier();
  if (rank == 0) {
    t0 = now_ns();
    t.send(peer, MessageTag{}, Payload::allocate(bytes));
  }
  {
    std::unique_lock lk(mu);
    cv.wait(lk, [&] { return left == 0; });
  }
  barrier();
  return static_cast<double>(t1 - t0) / 1e9 / iters;
}

}  // namespace rrfp
