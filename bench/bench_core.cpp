// Simulator throughput and arbiter decision cost. Run: ./build/bench_core
// (Release build; numbers and machine recorded in docs/results-speed.md).
#include <benchmark/benchmark.h>

#include "core/arbiter.hpp"
#include "sim/rng.hpp"
#include "sim/simulator.hpp"
#include "sim/workload.hpp"

namespace rrfp {
namespace {

// Simulated tasks per second at P=64, V=2, M=512 on the multimodal preset.
void BM_SimulateMultimodal(benchmark::State& state, const char* hint_name, Policy policy) {
  PipelineConfig c;
  c.pp = 64;
  c.vpp = 2;
  c.microbatches = 512;
  WorkModel m(c);
  Hint hint = make_hint(hint_name, m);
  RealizedWork work = realize(workload_preset("multimodal"), m, 1, 1);
  SimOptions opt;
  opt.arbiter.policy = policy;
  opt.record = false;
  for (auto _ : state)
    benchmark::DoNotOptimize(simulate(m, hint, work, opt).makespan);
  state.SetItemsProcessed(state.iterations() * m.num_tasks());
  state.counters["tasks"] = m.num_tasks();
}
BENCHMARK_CAPTURE(BM_SimulateMultimodal, ready_bf, "bf", Policy::Ready)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_SimulateMultimodal, fixed_interleaved_1f1b, "interleaved-1f1b", Policy::Fixed)
    ->Unit(benchmark::kMillisecond);

// 1,000 ready forwards, each with a producer's cost (what the adaptive rule ranks by; the
// other hints ignore it).
void fill(StageArbiter& a) {
  for (int mb = 0; mb < 1000; ++mb) {
    a.note_cost({Kind::F, 0, mb}, static_cast<std::int64_t>(mix64(mb) % 1'000'000));
    a.mark_ready({Kind::F, 0, mb});
  }
}

// One arbitration decision (peek) with 1,000 ready tasks on the stage.
void BM_Decision(benchmark::State& state, const char* hint_name) {
  PipelineConfig c;
  c.pp = 2;
  c.microbatches = 1000;
  WorkModel m(c);
  Hint hint = make_hint(hint_name, m);
  StageArbiter a(m, 0, hint, resolve_options({Policy::Ready, 1000, 0}, hint, m));
  fill(a);
  for (auto _ : state)
    benchmark::DoNotOptimize(a.peek());
}
BENCHMARK_CAPTURE(BM_Decision, rule_bf, "bf")->Repetitions(9)->ReportAggregatesOnly(true);
BENCHMARK_CAPTURE(BM_Decision, rule_adaptive, "adaptive")
    ->Repetitions(9)
    ->ReportAggregatesOnly(true);
BENCHMARK_CAPTURE(BM_Decision, list_1f1b, "1f1b")->Repetitions(9)->ReportAggregatesOnly(true);

// A full dispatch cycle (peek + commit) while draining 1,000 ready tasks.
void BM_DecideAndCommit(benchmark::State& state, const char* hint_name) {
  PipelineConfig c;
  c.pp = 2;
  c.microbatches = 1000;
  WorkModel m(c);
  Hint hint = make_hint(hint_name, m);
  const ArbiterOptions opt = resolve_options({Policy::Ready, 1000, 0}, hint, m);
  for (auto _ : state) {
    state.PauseTiming();
    StageArbiter a(m, 0, hint, opt);
    fill(a);
    state.ResumeTiming();
    for (int i = 0; i < 1000; ++i)
      a.commit(*a.peek());
  }
  state.SetItemsProcessed(state.iterations() * 1000);
}
BENCHMARK_CAPTURE(BM_DecideAndCommit, bf, "bf");
BENCHMARK_CAPTURE(BM_DecideAndCommit, adaptive, "adaptive");

// Adaptive's entry order, computed once per step: 1,000 microbatch sizes to ranks.
void BM_EntryRanks(benchmark::State& state) {
  std::vector<std::int64_t> sizes(1000);
  for (int i = 0; i < 1000; ++i)
    sizes[i] = static_cast<std::int64_t>(hash_keys(1, 7, i) % 16384);
  for (auto _ : state)
    benchmark::DoNotOptimize(entry_ranks(sizes));
  state.SetItemsProcessed(state.iterations() * 1000);
}
BENCHMARK(BM_EntryRanks);

}  // namespace
}  // namespace rrfp
