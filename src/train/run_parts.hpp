#pragma once
// What a training run (train/run.cpp) needs besides the run itself: the checks before any
// step, the progress it prints, the step's record as a report run, and the small measures of
// its log and summary. Internal to rrfp_train.
#include <cstdint>
#include <string>
#include <vector>

#include "report/report.hpp"
#include "runtime/runtime.hpp"
#include "train/run.hpp"
#include "train/trainer.hpp"

namespace rrfp::train {

// durations.csv: the measured steps after the first two (start-up: allocator, first touches),
// the last 100 at most, each with the messages seen from when their consumers started
// (sim/timeline.hpp). Replaying every step predicts the run's mean; a mean of the durations
// would not (it smooths away the variation that makes stages wait).
inline constexpr int kSkipSteps = 2;
inline constexpr std::size_t kKeptSteps = 100;

// One run per output folder: a second one would interleave its rows with the first's in
// loss.csv (a resume then accepted the mix) and overwrite its checkpoint. The lock is the
// kernel's (flock on OUT/.rrfp-lock), so it goes with the process however it ends.
class OutLock {
 public:
  OutLock() = default;
  OutLock(const OutLock&) = delete;
  OutLock& operator=(const OutLock&) = delete;
  ~OutLock();
  // Throws InputError naming `out` when another run holds it, or the lock cannot be made.
  void lock(const std::string& out);

 private:
  int fd_ = -1;
};

// The progress a run prints: on a terminal a bar redrawn in place after every step; into a
// file a line every 25 steps, at each validation and at least every 30 s (steps of seconds
// left a log silent for minutes).
class Progress {
 public:
  explicit Progress(int steps);
  // The run's first step is `first` (a resume's); `quiet` prints nothing.
  void start(int first, bool quiet);
  // After step s (from 0): its loss, its validation loss ("" where it had none), the run's
  // tokens a second so far and the step's bubble.
  void step(int s, double loss, const std::string& val, double tokens_per_s, double bubble);
  // On a terminal, the bar says a validation of `batches` is under way after step s: a long
  // one left the last step's bar standing for as long, its ETA passed.
  void validating(int s, int batches) const;
  // `done` of the `batches` of that validation are done: into a file or a pipe, a line when 30 s
  // passed without one (a validation of 20,000 batches wrote nothing for 40 s).
  void validated(int s, int done, int batches);
  // Ends the bar's line on a terminal.
  void end() const;

 private:
  // "[#####...] step S/STEPS" after step s.
  std::string bar_of(int s) const;
  static constexpr std::int64_t kQuietNs = 30'000'000'000;
  const int steps_;
  int first_ = 0;
  bool quiet_ = true;
  const bool tty_;
  std::int64_t start_ns_ = 0, last_line_ns_ = 0;  // the run's start, the last line's time
  // On a terminal, whether the last line drawn is still open (no newline yet): end() closes
  // it, and only then (after a step's line with its validation, a second left a blank line).
  mutable bool open_ = false;
};

// CPU time of every thread of this process (the host's cost of a step).
std::int64_t process_cpu_ns();
// The runtime's view of a measured step, for the trace and the timeline.
ReportRun report_of(const StepResult& r, const WorkModel& m, const TrainOptions& o);
// Every option before anything is written: bad input leaves no trace. Every process checks
// what bad input it could hit, so that all of them stop together: one that stopped alone
// would leave the others waiting in a collective.
// Makes nothing: `out` is made by prepare_run_out, once the trainer has read its inputs (a
// bad `hint`, `data` or `resume` left an empty `out` behind).
void check_run(const TrainRun& o);
// Makes `out` and checks that every file the run writes there can be written; refuses an `out`
// that holds an earlier run's checkpoint unless it is resumed.
void prepare_run_out(const TrainRun& o);
// Empty unless the processes of `job` compute with other intra-op thread counts (a collective;
// train/intra_op.cpp); else a warning naming each: a step's last bits depend on the count, so
// such a job matches no one-process run.
std::string intra_op_threads_differ(Job& job);
// A fresh run into a folder an earlier run wrote: that run's loss.svg, trace.json,
// timeline.svg and durations.csv go (loss.csv is rewritten). They stayed beside the new log
// when the new run failed or stopped before writing its own, and `simulate --replay` of that
// durations.csv replayed the earlier run without a word. Throws Error where one cannot go.
void remove_earlier_outputs(const std::string& out);

// loss.csv's columns, and a step's row in them (train/run_totals.cpp): `step` counted from 1,
// `val` its validation loss ("" where it had none), the step's wall time, the process's CPU
// time in it and its bubble.
inline constexpr const char* kLossColumns =
    "step,loss,val_loss,lr,grad_norm,tokens,step_ms,pipeline_ms,bubble,gap_us_median,cpu_ms,"
    "gap_us_p99,wait_us_median,wait_ms";
std::string loss_row(int step, const StepReport& r, const std::string& val, double step_s,
                     double cpu_ms, double bubble);

// A run's totals over the steps it trained, for its summary.
class StepTotals {
 public:
  void add(const StepReport& r, double step_s, double bubble);
  double tokens_per_s() const { return tokens_ / seconds_; }
  // The summary's means and shares over its `steps` (none where it trained none).
  void summarize(TrainSummary& s) const;

 private:
  double tokens_ = 0, seconds_ = 0, pipeline_s_ = 0, bubble_ = 0, gaps_ns_ = 0, busy_ns_ = 0;
  int limit_ = 0;
  std::vector<int> peak_d_;  // per stage, the largest over the steps
};

}  // namespace rrfp::train
