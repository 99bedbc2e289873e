// Simulator throughput and arbiter decision cost. Run: ./build/bench_core
// (Release build; numbers and machine recorded in docs/results-sim.md).
#include <benchmark/benchmark.h>

#include "core/arbiter.hpp"
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

// One arbitration decision (peek) with 1,000 ready tasks on the stage.
void BM_Decision(benchmark::State& state, const char* hint_name) {
  PipelineConfig c;
  c.pp = 2;
  c.microbatches = 1000;
  WorkModel m(c);
  Hint hint = make_hint(hint_name, m);
  StageArbiter a(m, 0, hint, resolve_options({Policy::Ready, 1000, 0}, hint, m));
  for (int mb = 0; mb < 1000; ++mb)
    a.mark_ready({Kind::F, 0, mb});
  for (auto _ : state)
    benchmark::DoNotOptimize(a.peek());
}
BENCHMARK_CAPTURE(BM_Decision, rule_bf, "bf")->Repetitions(9)->ReportAggregatesOnly(true);
BENCHMARK_CAPTURE(BM_Decision, list_1f1b, "1f1b")->Repetitions(9)->ReportAggregatesOnly(true);

// A full dispatch cycle (peek + commit) while draining 1,000 ready tasks.
void BM_DecideAndCommit(benchmark::State& state) {
  PipelineConfig c;
  c.pp = 2;
  c.microbatches = 1000;
  WorkModel m(c);
  Hint hint = make_hint("bf", m);
  const ArbiterOptions opt = resolve_options({Policy::Ready, 1000, 0}, hint, m);
  for (auto _ : state) {
    state.PauseTiming();
    StageArbiter a(m, 0, hint, opt);
    for (int mb = 0; mb < 1000; ++mb)
      a.mark_ready({Kind::F, 0, mb});
    state.ResumeTiming();
    for (int i = 0; i < 1000; ++i)
      a.commit(*a.peek());
  }
  state.SetItemsProcessed(state.iterations() * 1000);
}
BENCHMARK(BM_DecideAndCommit);

}  // namespace
}  // namespace rrfp
