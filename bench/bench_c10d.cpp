// The c10d transport against a raw c10d/Gloo ping-pong, two processes on this machine (a
// fork; they meet through a TCPStore on 127.0.0.1). docs/results-python.md; compare with
// bench_mpi. Usage: bench_c10d [small_iters=2000] [large_iters=50] [port=29640]
#include <sys/wait.h>
#include <unistd.h>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "bench_args.hpp"

#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

#include "comm/c10d_transport.hpp"
#include "comm/ping_pong.hpp"
#include "core/clock.hpp"

namespace rrfp {
namespace {

using Group = c10::intrusive_ptr<c10d::ProcessGroup>;

void barrier(const Group& pg) {
  pg->barrier()->wait();
}

// Past every transport channel's tags (channel << 24, channels 0..126): an aborted receive
// stays posted in Gloo for its tag, so a tag a transport used takes no other message after it.
constexpr int kRawTag = 127 << 24;

// Seconds per round trip of blocking send/recv pairs.
double raw_ping_pong(const Group& pg, std::size_t bytes, int iters) {
  std::vector<at::Tensor> buf{at::zeros({static_cast<std::int64_t>(bytes)}, at::kByte)};
  const int peer = 1 - pg->getRank();
  barrier(pg);
  const std::int64_t t0 = now_ns();
  for (int i = 0; i < iters; ++i) {
    if (pg->getRank() == 0) {
      pg->send(buf, peer, kRawTag)->wait();
      pg->recv(buf, peer, kRawTag)->wait();
    } else {
      pg->recv(buf, peer, kRawTag)->wait();
      pg->send(buf, peer, kRawTag)->wait();
    }
  }
  const double per = static_cast<double>(now_ns() - t0) / 1e9 / iters;
  barrier(pg);
  return per;
}

// Seconds per round trip through the transport (a new channel each time).
double transport_ping_pong(const Group& pg, int channel, std::size_t bytes, int iters) {
  C10dTransport tr(pg, channel);
  PingPongOptions p;
  p.peer = 1 - tr.rank();
  p.initiator = tr.rank() == 0;
  p.bytes = bytes;
  p.iters = iters;
  p.reply_in_handler = true;  // the transport alone
  return PingPong(tr).round(p, [&] { barrier(pg); });
}

int run(int rank, int small_iters, int large_iters, int port) {
  c10d::TCPStoreOptions so;
  so.port = static_cast<std::uint16_t>(port);
  so.isServer = rank == 0;
  so.numWorkers = 2;
  auto store = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", so);
  auto opt = c10d::ProcessGroupGloo::Options::create(std::chrono::seconds(60));
  opt->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  Group pg = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, 2, opt);
  if (rank == 0)
    std::printf(
        "bytes,raw_latency_us,transport_latency_us,latency_ratio,raw_gbps,"
        "transport_gbps,bandwidth_share\n");
  int channel = 0;
  for (std::size_t bytes : {std::size_t{8}, std::size_t{256}, std::size_t{4096},
                            std::size_t{1} << 20, std::size_t{4} << 20, std::size_t{16} << 20}) {
    const int iters = bytes >= (1u << 20) ? large_iters : small_iters;
    raw_ping_pong(pg, bytes, iters / 10 + 1);
    transport_ping_pong(pg, channel++, bytes, iters / 10 + 1);
    double raw = 1e9, ours = 1e9;
    for (int rep = 0; rep < 5; ++rep) {  // the best of five, alternating
      raw = std::min(raw, raw_ping_pong(pg, bytes, iters));
      ours = std::min(ours, transport_ping_pong(pg, channel++, bytes, iters));
    }
    if (rank == 0)
      std::printf("%zu,%.2f,%.2f,%.2f,%.3f,%.3f,%.1f%%\n", bytes, raw / 2 * 1e6, ours / 2 * 1e6,
                  ours / raw, bytes / (raw / 2) / 1e9, bytes / (ours / 2) / 1e9, 100 * raw / ours);
    std::fflush(stdout);
  }
  return 0;
}

// run(), a failure said in one line (a port taken ended the process in std::terminate, with
// the library's stack trace).
int run_said(int rank, int small_iters, int large_iters, int port) {
  try {
    return run(rank, small_iters, large_iters, port);
  } catch (const std::exception& e) {
    const std::string what = e.what();
    std::fprintf(stderr,
                 "bench_c10d: process %d failed: %s (port %d in use? give another as "
                 "the third argument)\n",
                 rank, what.substr(0, what.find('\n')).c_str(), port);
    return 1;
  }
}

}  // namespace
}  // namespace rrfp

int main(int argc, char** argv) {
  using rrfp::bench::positional;
  constexpr const char* usage = "bench_c10d [small_iters=2000] [large_iters=50] [port=29640]";
  const int small_iters = positional(argc, argv, 1, "small_iters", 2000, 1, 100'000'000, usage);
  const int large_iters = positional(argc, argv, 2, "large_iters", 50, 1, 1'000'000, usage);
  const int port = positional(argc, argv, 3, "port", 29640, 1, 65535, usage);
  const pid_t child = fork();
  if (child < 0) return 1;
  const int rc = rrfp::run_said(child == 0 ? 1 : 0, small_iters, large_iters, port);
  if (child == 0) std::_Exit(rc);
  if (rc != 0) kill(child, SIGKILL);  // it would wait for this process's store until its timeout
  int status = 0;
  waitpid(child, &status, 0);
  return rc != 0 ? rc : (WIFEXITED(status) ? WEXITSTATUS(status) : 1);
}
