// The MPI transport against a raw Open MPI ping-pong in the same job (docs/results-mpi.md).
// Ranks 0 and 1 bounce a message `iters` times, first with blocking MPI_Send/MPI_Recv, then
// through two MpiTransport endpoints whose receive handlers (on the progress threads) send the
// message straight back, then through the transport with each message handed to a waiting
// thread that replies (what a stage's compute thread sees), first parked on its condition
// variable, then spinning up to `handoff-spin-us` before it parks (SpinPark). Prints one row per
// size: one-way latency (half a round trip) and bandwidth (bytes / one-way time) for the first
// two and their ratios, then each hand-off's latency and its ratio to raw MPI.
// Usage: tests/mpirun.sh 2 build/bench_mpi [iters-small] [iters-large] [progress-spin-us]
//        [handoff-spin-us]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <mpi.h>

#include "bench_args.hpp"
#include "comm/ping_pong.hpp"
#include "core/clock.hpp"
#include "dist/mpi_world.hpp"

using namespace rrfp;

namespace {

MpiPollOptions g_poll;

// The baseline: `iters` round trips of `bytes` between world ranks 0 and 1 with plain blocking
// MPI_Send/MPI_Recv on MPI_COMM_WORLD; seconds per round trip.
double raw_ping_pong(MpiWorld& world, std::size_t bytes, int iters) {
  std::vector<std::byte> buf(bytes);
  const int n = static_cast<int>(bytes), rank = world.rank();
  world.barrier();
  const double t0 = MPI_Wtime();
  for (int i = 0; i < iters; ++i) {
    if (rank == 0) {
      MPI_Send(buf.data(), n, MPI_BYTE, 1, 9, MPI_COMM_WORLD);
      MPI_Recv(buf.data(), n, MPI_BYTE, 1, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else {
      MPI_Recv(buf.data(), n, MPI_BYTE, 0, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      MPI_Send(buf.data(), n, MPI_BYTE, 0, 9, MPI_COMM_WORLD);
    }
  }
  const double per = (MPI_Wtime() - t0) / iters;
  world.barrier();
  return per;
}

// Seconds per round trip through the transport. `handoff`: each message is handed from the
// progress thread to the thread waiting in round(), which sends the reply, as a stage's
// receive handler hands an input to its compute thread; else the handler replies itself (the
// transport alone). `spin_us`: how long the waiting thread spins before it parks.
double transport_ping_pong(MpiWorld& world, std::size_t bytes, int iters, bool handoff,
                           int spin_us = 0) {
  auto tr = world.make_transport(g_poll);
  PingPongOptions p;
  p.peer = 1 - tr->rank();
  p.initiator = tr->rank() == 0;
  p.bytes = bytes;
  p.iters = iters;
  p.reply_in_handler = !handoff;
  p.spin_us = spin_us;
  return PingPong(*tr).round(p, [&] { world.barrier(); });
}

}  // namespace

int main(int argc, char** argv) {
  MpiWorld world;
  if (world.size() != 2) {
    if (world.rank() == 0) std::fprintf(stderr, "bench_mpi: run with mpirun -np 2\n");
    return 2;
  }
  using rrfp::bench::positional;
  constexpr const char* usage =
      "tests/mpirun.sh 2 build/bench_mpi [iters-small=20000] [iters-large=200] "
      "[progress-spin-us] [handoff-spin-us=50]";
  const int small_iters = positional(argc, argv, 1, "iters-small", 20000, 1, 100'000'000, usage);
  const int large_iters = positional(argc, argv, 2, "iters-large", 200, 1, 1'000'000, usage);
  g_poll.spin_us =
      positional(argc, argv, 3, "progress-spin-us", g_poll.spin_us, 0, 1'000'000, usage);
  const int handoff_spin_us = positional(argc, argv, 4, "handoff-spin-us", 50, 0, 1'000'000, usage);
  if (world.rank() == 0)
    std::printf(
        "bytes,raw_latency_us,transport_latency_us,latency_ratio,raw_gbps,transport_gbps,"
        "bandwidth_share,handoff_latency_us,handoff_ratio,spin_handoff_latency_us,"
        "spin_handoff_ratio\n");
  for (std::size_t bytes : {std::size_t{8}, std::size_t{256}, std::size_t{4096},
                            std::size_t{1} << 20, std::size_t{4} << 20, std::size_t{16} << 20}) {
    const int iters = bytes >= (1u << 20) ? large_iters : small_iters;
    // Warm both paths, then measure each nine times, alternating; the best run of each counts
    // (the VM's noise only ever adds time).
    // A hand-off wakes a thread per message, milliseconds each on a loaded machine: a tenth of
    // the round trips keeps its rounds within the ping-pong's deadline there.
    const int handoff_iters = std::max(iters / 10, 20);
    raw_ping_pong(world, bytes, iters / 10 + 1);
    transport_ping_pong(world, bytes, iters / 10 + 1, false);
    transport_ping_pong(world, bytes, handoff_iters / 10 + 1, true);
    transport_ping_pong(world, bytes, handoff_iters / 10 + 1, true, handoff_spin_us);
    double raw = 1e9, ours = 1e9, handoff = 1e9, spun = 1e9;
    for (int rep = 0; rep < 9; ++rep) {
      raw = std::min(raw, raw_ping_pong(world, bytes, iters));
      ours = std::min(ours, transport_ping_pong(world, bytes, iters, false));
      handoff = std::min(handoff, transport_ping_pong(world, bytes, handoff_iters, true));
      spun =
          std::min(spun, transport_ping_pong(world, bytes, handoff_iters, true, handoff_spin_us));
    }
    if (world.rank() == 0)
      std::printf("%zu,%.2f,%.2f,%.2f,%.3f,%.3f,%.1f%%,%.2f,%.2f,%.2f,%.2f\n", bytes, raw / 2 * 1e6,
                  ours / 2 * 1e6, ours / raw, bytes / (raw / 2) / 1e9, bytes / (ours / 2) / 1e9,
                  100 * raw / ours, handoff / 2 * 1e6, handoff / raw, spun / 2 * 1e6, spun / raw);
  }
  return 0;
}
