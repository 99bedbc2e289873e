#pragma once
// The threaded, message-driven runtime: one compute thread per (stage, tensor-parallel rank),
// each dispatching through the shared StageArbiter, with outputs moved by a Transport. A step
// returns the same record a simulated step does (SimResult), with real timestamps, so every
// report, trace and invariant check works on both.
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "comm/transport.hpp"
#include "runtime/stage.hpp"

namespace rrfp {

struct RuntimeOptions {
  ArbiterOptions arbiter;  // resolved by the runtime against the hint
  TpProtocol tp_protocol = TpProtocol::Leader;
  CommMode comm = CommMode::Async;  // blocking: rendezvous transfers (the baseline)
  int tp = 1;
  // Watchdog: when no task starts or ends and no message arrives for this long, the step ends
  // with a StallError describing every stage. 0 disables it. It must exceed the longest task.
  std::int64_t timeout_ms = 60'000;
  LatencyFn latency;  // emulated message latency; empty: messages leave at once
};

struct StepResult {
  SimResult run;                            // measured: times in ns since the step began
  std::vector<std::int64_t> dispatch_gaps;  // ns from a task's end to the next dispatch
};

class Runtime {
 public:
  // `endpoints`: P * T transports, endpoint i serving stage i / T, rank i % T; empty means
  // in-process transports. The hint must outlive the runtime.
  Runtime(const WorkModel& m, const Hint& hint, const ProgramFactory& programs, RuntimeOptions opt,
          std::vector<std::unique_ptr<Transport>> endpoints = {});
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  // Runs one step to completion on every stage. Rethrows the first error (TaskError,
  // StallError, ProtocolError, CollectiveMismatchError) after every thread has been joined;
  // a runtime whose step failed refuses further steps.
  StepResult run_step(int step);
  const ArbiterOptions& arbiter() const { return opt_.arbiter; }

 private:
  void watch(int workers);
  StepResult collect() const;

  const WorkModel& m_;
  RuntimeOptions opt_;
  FailureState failure_;
  std::unique_ptr<DelayLine> delay_;
  std::vector<std::unique_ptr<Transport>> endpoints_;
  std::vector<std::unique_ptr<TpGroup>> groups_;
  std::vector<std::unique_ptr<Stage>> stages_;
  bool broken_ = false;
};

}  // namespace rrfp
