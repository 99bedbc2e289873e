// Inproc transport hand-off cost and the runtime's dispatch overhead.
// Run: ./build/bench_runtime (Release build; results in docs/results-runtime.md).
#include <benchmark/benchmark.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "comm/inproc.hpp"
#include "core/clock.hpp"
#include "emulate/emulated.hpp"
#include "runtime/runtime.hpp"

namespace rrfp {
namespace {

// The send call alone: tag, route, hand the payload to the receiver's handler.
void BM_InprocSend(benchmark::State& state) {
  auto eps = make_inproc_transports(2);
  std::size_t seen = 0;
  eps[1]->set_receiver([&](Message&& m) { seen += m.payload.size(); });
  const Payload p = Payload::allocate(static_cast<std::size_t>(state.range(0)));
  int mb = 0;
  for (auto _ : state)
    eps[0]->send(1, MessageTag{0, TaskId{Kind::F, 0, mb++}}, p);
  benchmark::DoNotOptimize(seen);
}
BENCHMARK(BM_InprocSend)->Arg(64)->Arg(32 << 20);

// One-way hand-off latency as the runtime sees it: a message lands in a mailbox guarded by a
// mutex and wakes a thread sleeping on a condition variable, which answers the same way.
// Reported time is per round trip; half of it is the one-way latency.
void BM_InprocPingPong(benchmark::State& state) {
  auto eps = make_inproc_transports(2);
  struct Box {
    std::mutex mu;
    std::condition_variable cv;
    int count = 0;
  } box[2];
  for (int r = 0; r < 2; ++r)
    eps[r]->set_receiver([&b = box[r]](Message&&) {
      std::lock_guard lk(b.mu);
      ++b.count;
      b.cv.notify_one();
    });
  std::atomic<bool> stop{false};
  auto wait_for = [](Box& b, int n) {
    std::unique_lock lk(b.mu);
    b.cv.wait(lk, [&] { return b.count >= n; });
  };
  const Payload p = Payload::allocate(64);
  std::thread echo([&] {
    for (int n = 1; !stop.load(); ++n) {
      wait_for(box[1], n);
      if (stop.load()) break;
      eps[1]->send(0, MessageTag{}, p);
    }
  });
  int n = 0;
  for (auto _ : state) {
    eps[0]->send(1, MessageTag{}, p);
    wait_for(box[0], ++n);
  }
  stop = true;
  eps[0]->send(1, MessageTag{}, p);
  echo.join();
  state.counters["one_way_us"] =
      benchmark::Counter(static_cast<double>(state.iterations()) * 2,
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_InprocPingPong)->UseRealTime()->Unit(benchmark::kMicrosecond);

// The floor under the ping-pong above: the same two threads waking each other through a
// mutex and condition variable, with no transport. The difference is what inproc adds.
void BM_CondvarPingPong(benchmark::State& state) {
  struct Box {
    std::mutex mu;
    std::condition_variable cv;
    int count = 0;
  } box[2];
  auto post = [](Box& b) {
    std::lock_guard lk(b.mu);
    ++b.count;
    b.cv.notify_one();
  };
  auto wait_for = [](Box& b, int n) {
    std::unique_lock lk(b.mu);
    b.cv.wait(lk, [&] { return b.count >= n; });
  };
  std::atomic<bool> stop{false};
  std::thread echo([&] {
    for (int n = 1; !stop.load(); ++n) {
      wait_for(box[1], n);
      if (stop.load()) break;
      post(box[0]);
    }
  });
  int n = 0;
  for (auto _ : state) {
    post(box[1]);
    wait_for(box[0], ++n);
  }
  stop = true;
  post(box[1]);
  echo.join();
  state.counters["one_way_us"] =
      benchmark::Counter(static_cast<double>(state.iterations()) * 2,
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_CondvarPingPong)->UseRealTime()->Unit(benchmark::kMicrosecond);

// A whole step with zero-duration tasks: pure runtime cost (threads, arbitration, routing,
// wake-ups) per task, P=4, M=64.
void BM_EmptyStep(benchmark::State& state, const char* hint_name) {
  PipelineConfig c;
  c.pp = 4;
  c.microbatches = 64;
  c.split_backward = std::string(hint_name) == "bfw";
  WorkModel m(c);
  Hint hint = make_hint(hint_name, m);
  RealizedWork w;
  w.num_tasks = m.num_tasks();
  w.compute_ns.assign(w.num_tasks, 0);
  w.message_ns.assign(w.num_tasks, 0);
  w.message_bytes.assign(w.num_tasks, 64);
  RuntimeOptions ro;
  Runtime rt(m, hint, emulated_programs(m, w), ro);
  int step = 0;
  for (auto _ : state)
    benchmark::DoNotOptimize(rt.run_step(step++).run.makespan);
  state.SetItemsProcessed(state.iterations() * m.num_tasks());
}
BENCHMARK_CAPTURE(BM_EmptyStep, bf, "bf")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_EmptyStep, bfw, "bfw")->UseRealTime()->Unit(benchmark::kMillisecond);

// What a dispatch gap costs after a long task, with no runtime at all: busy-wait `range(0)` µs
// (as a task would run), then time a read and write of 256 cache lines spread over 1 MiB
// (about the runtime's own footprint between two tasks). On a machine whose caches stay
// warm, the time does not depend on the wait; on a shared VM it grows with it, and so does
// the dispatch gap of `rrfp run` (docs/results-speed.md, "The dispatch gap").
void BM_TouchAfterBusy(benchmark::State& state) {
  std::vector<unsigned char> buf(std::size_t{1} << 20);
  const std::int64_t busy_ns = state.range(0) * 1000;
  unsigned sum = 0;
  for (auto _ : state) {
    spin_until_ns(now_ns() + busy_ns);
    const std::int64_t t0 = now_ns();
    for (std::size_t i = 0; i < 256; ++i)
      sum += buf[(i * 4099) % buf.size()]++;  // 4099: a prime stride, a new line each time
    state.SetIterationTime(static_cast<double>(now_ns() - t0) * 1e-9);
  }
  benchmark::DoNotOptimize(sum);
}
BENCHMARK(BM_TouchAfterBusy)
    ->Arg(20)
    ->Arg(200)
    ->Arg(1000)
    ->Arg(5000)
    ->Iterations(200)  // the timed part is microseconds: the default minimum time would not end
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace rrfp

BENCHMARK_MAIN();
