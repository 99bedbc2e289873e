#pragma once
// Messages for the tests of the MPI transport and collective (test_mpi_transport.cpp,
// test_mpi_tp_group.cpp): payloads whose bytes say who sent them, and an inbox with a deadline.
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <vector>

#include "comm/transport.hpp"

namespace rrfp::test {

// Collects arrivals; wait_for() gives up after a deadline instead of hanging the job.
struct Inbox {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<Message> got;
  void operator()(Message&& m) {
    std::lock_guard lk(mu);
    got.push_back(std::move(m));
    cv.notify_all();
  }
  bool wait_for(std::size_t n) {
    std::unique_lock lk(mu);
    return cv.wait_for(lk, std::chrono::seconds(30), [&] { return got.size() >= n; });
  }
};

// Byte i of a message (src, id) of `size` bytes.
inline std::byte pattern(int src, int id, std::size_t i) {
  return static_cast<std::byte>((src * 131 + id * 31 + i * 7) & 0xff);
}

inline Payload make_payload(int src, int id, std::size_t size) {
  Payload p = Payload::allocate(size);
  auto* d = const_cast<std::byte*>(p.data());
  for (std::size_t i = 0; i < size; ++i)
    d[i] = pattern(src, id, i);
  return p;
}

inline bool intact(const Message& m) {
  for (std::size_t i = 0; i < m.payload.size(); ++i)
    if (m.payload.data()[i] != pattern(m.src, m.tag.producer.mb, i)) return false;
  return true;
}

}  // namespace rrfp::test
