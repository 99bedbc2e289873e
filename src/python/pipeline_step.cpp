// PipelineCore::run_step: one step of the runtime on a thread of its own while the caller's
// thread looks for Python's signals, then the step's closing exchange and its record.
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <system_error>
#include <thread>

#include "core/error.hpp"
#include "core/format.hpp"
#include "dist/step_merge.hpp"
#include "python/byte_tensors.hpp"
#include "python/pipeline_core.hpp"
#include "runtime/errors.hpp"
#include "sim/metrics.hpp"

namespace rrfp::py {
namespace pyb = pybind11;

namespace {

// A step cancelled from Python (a signal handler raised): the runtime rethrows this, and
// run_step raises the Python exception instead.
struct Interrupted : Error {
  Interrupted() : Error("interrupted") {}
};

// `closing()` (Python's, with the GIL): the bytes this process carries into the step's closing
// exchange. Its failure fails this process's step as a task's would, so that every process
// drops it.
// `closing()` is the first Python the main thread runs once the step's tasks are done, so a
// signal's handler that came late runs in it: its KeyboardInterrupt (or a handler's SystemExit)
// is `signal`, raised as it is. Made a failed step, it came out as a StageError, which loops
// that skip a failed batch went past: Ctrl-C did not stop them.
std::vector<std::byte> carried_bytes(const pyb::object& closing, std::exception_ptr& error,
                                     std::optional<pyb::error_already_set>& signal) {
  pyb::gil_scoped_acquire gil;
  try {
    const auto t = closing().cast<at::Tensor>();
    const std::span<const std::byte> bytes = byte_span(t, "`closing()`'s result");
    return {bytes.begin(), bytes.end()};
  } catch (pyb::error_already_set& e) {
    if (!e.matches(PyExc_Exception)) {
      signal.emplace(std::move(e));
      return {};
    }
    error = std::make_exception_ptr(
        TaskError("joining the step's microbatch losses: " + first_line(e.what())));
    return {};
  } catch (const std::exception& e) {
    error = std::make_exception_ptr(
        TaskError("joining the step's microbatch losses: " + first_line(e.what())));
    return {};
  }
}

// How long a failed step waits for its running tasks before saying so.
constexpr auto kSayStuckAfter = std::chrono::seconds(5);

// Says, on Python's sys.stderr, that the failed step `step` waits for its threads, most likely
// for a task still running: Python code cannot be interrupted, so a timeout or Ctrl-C ends the
// step only when that task returns, and one that never does (a forward waiting for a lock the
// caller holds) hung without a word, its timeout's report never shown.
void say_stuck(int step, const std::exception_ptr& why) {
  std::string what = "interrupted";
  try {
    std::rethrow_exception(why);
  } catch (const std::exception& e) {
    what = first_line(e.what());
  } catch (...) {
  }
  pyb::gil_scoped_acquire gil;
  try {
    pyb::object err = pyb::module_::import("sys").attr("stderr");
    err.attr("write")("rrfp: step " + std::to_string(step) + " failed (" + what +
                      ") and waits for its threads to end, a task still running? Python code "
                      "cannot be interrupted, so the step ends when that task returns (a chunk "
                      "waiting for something the calling thread holds never does)\n");
    err.attr("flush")();
  } catch (pyb::error_already_set&) {
    // No stderr to write to (closed, or replaced by an object without write): nothing to say.
  }
}

// Runs `step` on a thread of its own while this one, without the GIL, looks for Python's
// signals: Python runs its handlers only on the main thread, between bytecodes, so it looks
// every 50 ms, and Ctrl-C ends a step in about that time plus the running task's. A handler's
// exception is `signal`, the step cancelled; the step's own failure is `error`. A step that
// failed and still waits after kSayStuckAfter says so (say_stuck).
StepResult run_watching_signals(Runtime& rt, int step, std::exception_ptr& error,
                                std::optional<pyb::error_already_set>& signal) {
  StepResult result;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::thread worker;
  try {
    worker = std::thread([&] {
      try {
        result = rt.run_step(step);
      } catch (...) {
        error = std::current_exception();
      }
      std::lock_guard lk(mu);
      done = true;
      cv.notify_all();
    });
  } catch (const std::system_error& e) {  // it said "Resource temporarily unavailable" alone
    throw thread_refused("the step's thread", e.what());
  }
  std::unique_lock lk(mu);
  std::optional<std::chrono::steady_clock::time_point> failed_at;
  bool said = false;
  while (!cv.wait_for(lk, std::chrono::milliseconds(50), [&] { return done; })) {
    if (!said) {
      if (!failed_at && rt.failure()) failed_at = std::chrono::steady_clock::now();
      if (failed_at && std::chrono::steady_clock::now() - *failed_at > kSayStuckAfter) {
        said = true;
        lk.unlock();
        say_stuck(step, rt.failure());
        lk.lock();
        continue;
      }
    }
    if (signal) continue;
    lk.unlock();
    {
      pyb::gil_scoped_acquire gil;
      if (PyErr_CheckSignals() != 0) signal.emplace();
    }
    if (signal) rt.cancel(std::make_exception_ptr(Interrupted()));
    lk.lock();
  }
  lk.unlock();
  worker.join();
  return result;
}

// The step's record as Python's StepRecord holds it.
StepRecordPy record_of(StepResult result, const WorkModel& m, const RuntimeOptions& ro,
                       const std::string& hint) {
  StepRecordPy rec;
  rec.header.workload = "measured (python)";
  rec.header.source = "measured";
  rec.header.tp_protocol = to_string(ro.tp_protocol);
  rec.run.policy = to_string(ro.arbiter.policy);
  rec.run.hint = hint;
  rec.run.comm = to_string(ro.comm);
  rec.run.label = rec.run.policy + " " + hint + " (" + rec.run.comm + ")";
  rec.run.cfg = m.config();
  rec.run.result = std::move(result.run);
  rec.run.metrics =
      compute_metrics(rec.run.result, lower_bound(m, measured_work(m, rec.run.result)));
  rec.run.dispatch_gaps = std::move(result.dispatch_gaps);
  return rec;
}

}  // namespace

std::pair<StepRecordPy, std::vector<at::Tensor>> PipelineCore::run_step(
    int step, std::vector<std::int64_t> sizes, const pyb::object& closing) {
  if (closed_) throw Error(kShutDown);
  if (runners_.empty()) throw Error("rrfp: the pipeline has no stage runners");
  if (!sizes.empty() && static_cast<int>(sizes.size()) != model_->microbatches())
    throw InputError("rrfp: " + std::to_string(sizes.size()) + " microbatch sizes for " +
                     std::to_string(model_->microbatches()) + " microbatches");
  // close() from another thread (the interpreter exiting while a daemon thread steps) cancels
  // the step and waits for this to end.
  struct Stepping {
    PipelineCore& c;
    explicit Stepping(PipelineCore& core) : c(core) {
      std::lock_guard lk(c.step_mu_);
      c.step_pid_ = static_cast<int>(::getpid());
      c.stepping_ = true;
    }
    ~Stepping() {
      std::lock_guard lk(c.step_mu_);
      c.stepping_ = false;
      c.step_cv_.notify_all();
    }
  } stepping(*this);
  sizes_ = std::move(sizes);  // read by the programs once the step's thread has started
  // The caller's torch state, for the stages' threads, let go of as the step ends.
  caller_.emplace();
  struct Forget {
    std::optional<at::ThreadLocalState>& s;
    ~Forget() { s.reset(); }
  } forget{caller_};
  if (!rt_) build_runtime();
  if (closed_) throw Error(kShutDown);  // while the runtime was built
  Runtime* const rt = rt_.get();        // close() may let go of rt_ past its wait: see there
  StepResult result;
  std::exception_ptr error;
  std::optional<pyb::error_already_set> signal;
  std::vector<std::vector<std::byte>> carried;
  {
    pyb::gil_scoped_release nogil;
    result = run_watching_signals(*rt, step, error, signal);
    // A peer's report of the same Ctrl-C (a PeerCancelled) may have ended the step first. Only
    // then: a process with a task's failure must not skip the exchange its peers enter below.
    if (error && !signal && (holds<PeerCancelled>(error) || holds<StallError>(error))) {
      pyb::gil_scoped_acquire gil;
      if (PyErr_CheckSignals() != 0) signal.emplace();
    }
    std::vector<std::byte> mine;
    std::optional<pyb::error_already_set> late;  // a signal's, raised in closing()
    if (!error && !signal && !closing.is_none()) mine = carried_bytes(closing, error, late);
    if (late) error = std::make_exception_ptr(Interrupted());  // dropped on every process too
    // A step that failed on any process is dropped on all (Ctrl-C: this process is leaving);
    // on success every process gets the step's whole record of replica 0, and everyone's bytes.
    if (job_ && !signal)
      carried = finish_step_over_job(*job_, step, result, error, mine);
    else if (!error && !signal)
      carried.push_back(std::move(mine));
    if (late) signal = std::move(late);
    if (error || signal) drop_runtime();  // a failed runtime refuses further steps
  }
  if (signal) throw std::move(*signal);
  if (error) std::rethrow_exception(error);
  return {record_of(std::move(result), *model_, runtime_, opt_.hint),
          byte_tensors(std::move(carried))};
}

}  // namespace rrfp::py
