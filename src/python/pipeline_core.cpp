#include "python/pipeline_core.hpp"

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "core/error.hpp"
#include "dist/step_merge.hpp"
#include "python/py_program.hpp"
#include "report/experiment.hpp"
#include "sim/metrics.hpp"

namespace rrfp::py {
namespace pyb = pybind11;

namespace {

// A step cancelled from Python (a signal handler raised): the runtime rethrows this, and
// run_step raises the Python exception instead.
struct Interrupted : Error {
  Interrupted() : Error("interrupted") {}
};

}  // namespace

PipelineCore::PipelineCore(const CoreOptions& o) : opt_(o) {
  if (o.transport != "inproc")
    throw InputError("`transport`: expected inproc, got '" + o.transport + "'");
  model_ = std::make_unique<WorkModel>(
      make_config(o.pp, o.vpp, o.microbatches, o.placement, o.split_backward, o.hint));
  hint_ = std::make_unique<Hint>(make_hint(o.hint, *model_));
  runtime_.arbiter.policy = parse_policy(o.policy);
  runtime_.arbiter.limit = o.limit;
  runtime_.arbiter.max_pending_w = o.max_pending_w;
  runtime_.comm = parse_comm(o.comm);
  if (!(o.timeout_s >= 0 && o.timeout_s <= 86'400))
    throw InputError("`timeout`: must be between 0 and 86400 seconds, got " +
                     std::to_string(o.timeout_s));
  runtime_.timeout_ms = static_cast<std::int64_t>(o.timeout_s * 1000 + 0.5);
  validate(runtime_);
  resolve_options(runtime_.arbiter, *hint_, *model_);  // a bad limit fails here, not mid-step
}

PipelineCore::~PipelineCore() {
  // The runtime's threads are idle between steps; its programs drop their Python references
  // under the GIL, which this thread must not hold meanwhile.
  pyb::gil_scoped_release nogil;
  rt_.reset();
}

std::vector<int> PipelineCore::local_stages() const {
  std::vector<int> s(model_->pp());
  for (int i = 0; i < model_->pp(); ++i)
    s[i] = i;
  return s;
}

void PipelineCore::set_runners(const std::vector<pyb::object>& runners) {
  if (runners.size() != local_stages().size())
    throw InputError("`runners`: expected " + std::to_string(local_stages().size()) + ", got " +
                     std::to_string(runners.size()));
  runners_ = runners;
  {
    pyb::gil_scoped_release nogil;
    rt_.reset();
  }
  build_runtime();
}

void PipelineCore::build_runtime() {
  ProgramFactory programs = [this](int stage, int) -> std::unique_ptr<StageProgram> {
    pyb::gil_scoped_acquire gil;
    return std::make_unique<PyStageProgram>(runners_.at(stage));
  };
  pyb::gil_scoped_release nogil;
  rt_ = std::make_unique<Runtime>(*model_, *hint_, programs, runtime_);
}

StepRecordPy PipelineCore::run_step(int step) {
  if (runners_.empty()) throw Error("rrfp: the pipeline has no stage runners");
  if (!rt_) build_runtime();
  StepResult result;
  std::exception_ptr error;
  std::optional<pyb::error_already_set> signal;
  {
    pyb::gil_scoped_release nogil;
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    std::thread worker([&] {
      try {
        result = rt_->run_step(step);
      } catch (...) {
        error = std::current_exception();
      }
      std::lock_guard lk(mu);
      done = true;
      cv.notify_all();
    });
    // Python runs its signal handlers only on the main thread, between bytecodes: look every
    // 50 ms, so Ctrl-C ends a step in about that time plus the running task's.
    std::unique_lock lk(mu);
    while (!cv.wait_for(lk, std::chrono::milliseconds(50), [&] { return done; })) {
      if (signal) continue;
      lk.unlock();
      {
        pyb::gil_scoped_acquire gil;
        if (PyErr_CheckSignals() != 0) signal.emplace();
      }
      if (signal) rt_->cancel(std::make_exception_ptr(Interrupted()));
      lk.lock();
    }
    lk.unlock();
    worker.join();
    if (error || signal) rt_.reset();  // a failed runtime refuses further steps
  }
  if (signal) throw std::move(*signal);
  if (error) std::rethrow_exception(error);
  StepRecordPy rec;
  rec.header.workload = "measured (python)";
  rec.header.source = "measured";
  rec.run.policy = to_string(runtime_.arbiter.policy);
  rec.run.hint = opt_.hint;
  rec.run.comm = to_string(runtime_.comm);
  rec.run.label = rec.run.policy + " " + opt_.hint + " (" + rec.run.comm + ")";
  rec.run.cfg = model_->config();
  rec.run.result = std::move(result.run);
  rec.run.metrics =
      compute_metrics(rec.run.result, lower_bound(*model_, measured_work(*model_, rec.run.result)));
  rec.dispatch_gaps = std::move(result.dispatch_gaps);
  return rec;
}

}  // namespace rrfp::py
