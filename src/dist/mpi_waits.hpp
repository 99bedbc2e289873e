#pragma once
// How the job's MPI calls wait and move bytes (dist/mpi_world.cpp, dist/mpi_arrivals.cpp; it
// includes mpi.h, so only their sources include it). Waits test nonblocking requests with
// growing naps (up to 200 us) instead of a blocking call: Open MPI's blocking calls poll a core
// flat out, and a rank that reaches one early (a stage done with its step, waiting to gather)
// would take a core from the ranks still computing and copying messages (4 processes on 2
// cores: measured in docs/results-twin.md). 200 us is far below a step and the deadlines.
#include <mpi.h>

#include <cstddef>
#include <functional>
#include <span>
#include <vector>

namespace rrfp {

// Until every request of `reqs` is done; `done(i)`, where given, as request i completes.
// `what`: the call named where MPI fails.
void wait_napping(std::span<MPI_Request> reqs, const char* what,
                  const std::function<void(int)>& done = {});

// Posts post(at, n, request) for each piece of `size` bytes, in order, into `reqs`: bytes go in
// pieces an int counts (an int-counted call ends at 2 GiB, which a gradient sum passes).
template <typename Post>
void post_pieces(std::size_t size, std::vector<MPI_Request>& reqs, Post&& post) {
  constexpr std::size_t kPiece = std::size_t{1} << 30;
  for (std::size_t at = 0; at < size; at += kPiece) {
    reqs.emplace_back();
    post(at, static_cast<int>(size - at < kPiece ? size - at : kPiece), &reqs.back());
  }
}

}  // namespace rrfp
