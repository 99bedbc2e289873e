#pragma once
// One `rrfp train` run from its first step to its outputs, as run_training() runs it: its steps,
// checkpoints, validations and signals are defined in run.cpp, what it prints and writes at the
// end in run_outputs.cpp. The training layer's own header, for those two files.
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/progress_ticker.hpp"
#include "dist/job.hpp"
#include "sim/workload.hpp"
#include "train/log_file.hpp"
#include "train/run.hpp"
#include "train/run_parts.hpp"
#include "train/trainer.hpp"

namespace rrfp::train {

// Rank 0 of a multi-process run speaks for the job (the log, the outputs, the progress); every
// process takes part in validation.
class TrainingRun {
 public:
  // Every process checks its own folder and files: a refusal on any is every process's
  // (agree_on_input), and rank 0's checks of the lock and the log are so too.
  explicit TrainingRun(const TrainRun& in);

  TrainSummary go();

 private:
  // `out` "/" (its trailing slashes are cut down to the root's own) printed "wrote //loss.csv".
  std::string dir() const { return o_.out.ends_with('/') ? o_.out : o_.out + "/"; }
  // Whether the run validates once `steps` steps are done: at its last, and every `eval_every`.
  bool validates_after(int steps) const {
    return steps == t_.steps || (o_.eval_every > 0 && steps % o_.eval_every == 0);
  }
  std::string checkpoint() const { return o_.out + "/checkpoint.bin"; }
  // Whether rank 0's `out` holds a log (agreed over a job: rank 0 alone reads it).
  bool log_in_out() const;
  [[noreturn]] void refuse_at_the_end() const;

  void print_banner() const;
  std::string coordination() const;  // the banner's word on TP coordination

  // Step s; false when a signal asked the run to stop after it.
  bool step(int s);
  // What the ticker shows of step s, begun at `t0_ns`: nothing in its first kQuietStepNs, then
  // its tasks ended so far and the rest's estimate. A step of 45 minutes (M = 100,000) showed
  // the banner and nothing more until it ended; `timeout` stopped it, and it went on.
  std::string step_under_way(int s, std::int64_t t0_ns) const;
  static constexpr std::int64_t kQuietStepNs = 10'000'000'000;

  // The step's measured durations, for durations.csv (the twin's replay). Without
  // coordination (`tp_protocol` none) a stage's TP ranks may run different orders, which no
  // replay can take: said once, and such steps are left out, where the run ended there with
  // an error about a trace read with the wrong `tp` (its steps had trained as they should).
  void keep_measured(int s, const StepReport& r);

  // The checkpoint of `step`, never of parameters that are not finite (a step that overflowed
  // without its loss showing it yet): the last checkpoint stays the last good one.
  void save(int step);

  // A loss, gradient norm or validation loss that is not finite ends the run with an error,
  // the step's row logged, before a checkpoint could take the parameters its update made (a
  // validation loss of NaN from finite but huge parameters was checkpointed over the last good
  // one, and the run ended "done"). Every process of a job knows all three (they are reduced
  // over the job), so all stop together.
  void stop_if_diverged(int s, double loss, double grad_norm, double val_loss) const;

  // Names the checkpoint to go back to: this run's last, else the one it resumed from (which
  // "no checkpoint was written" hid).
  JobError diverged(int step, const std::string& what) const;

  // The signal that asked to stop (0: none), the same on every process of a job.
  int agreed_signal() const;

  // A signal asked to stop: step s is done and logged; keep a checkpoint and leave. Every
  // process of a job learns of it together, so none waits for another's next step. In the last
  // step, the run is whole unless the signal cut its validation short: then it reports the stop
  // (exit 128 + the signal), and a resume from its checkpoint validates that step (it exited 0,
  // and the resume was refused as already at the last step: the validation was lost for good).
  bool stop_after(int s);

  // Whether the run that wrote the checkpoint had a validation due at its step: its last, or
  // one its `eval_every` falls on. This run's options stand in where an older checkpoint does
  // not say. A resume under another `eval_every` took its own: it "filled in" a validation the
  // checkpoint's run never had due, and said a signal had cut it short.
  bool due_when_written() const;

  // The checkpoint's step had a validation due in the run that wrote it and its row has no
  // val_loss (agreed over a job). Any empty row was taken: a mid-run checkpoint of an
  // `eval_every` 0 run resumed at its step "filled in" a validation no signal had cut short,
  // where it is already at `steps`.
  bool validation_cut_short() const;

  // The validation after step s, its progress shown (nullopt: a signal stopped it).
  std::optional<double> validation_loss(int s);

  // A stop during the validation of the step a checkpoint holds left that step's row without
  // its val_loss, which the resume never did again: a resumed run validates that step first,
  // on every process, as the run would have (the same model and held-out batches).
  RowFill validation_left_out();

  TrainSummary finish();

  // A resume that only validated the last step (stop_after): the plot gains its point; the
  // trace, timeline and durations of the steps run before stay as they were.
  TrainSummary finish_validation();

  // A line of the run's end on stdout (on stderr too where stdout's reader went).
  void said(const std::string& line) const;

  void write_loss_plot() const;

  // A file of `out`, written whole. Checked before the first step, so a refusal now (a
  // directory put in its place during the run) is the run's failure, exit 1, as a checkpoint's
  // is: it was bad input, exit 2, naming `trace` or `svg`, flags `train` does not have.
  void write_out_file(const std::string& name, const std::string& text) const;

  void write_outputs() const;

  // A resume stopped within its first two steps writes no durations.csv: the run's before it,
  // of earlier steps than trace.json's, stays, said (it stood beside the new trace unsaid).
  std::string earlier_durations_kept() const;

  // One write: under mpirun the other processes' lines share the stream (a "SIGTERM taken"
  // line once landed inside this one, written piece by piece).
  void print_summary() const;
  std::string memory_said() const;

  // Stopped because its standard output's reader went (`| head`): what it printed there went
  // nowhere, and the run's stop (exit 141) was without a word: its first line on stderr too.
  void said_if_piped(const std::string& printed) const;

  TrainRun o_;
  const TrainOptions& t_;
  const bool root_;
  Trainer trainer_;
  int first_ = 0, done_ = 0, stopped_by_ = 0;
  bool last_validation_cut_ = false;
  bool fill_cut_ = false;  // a signal stopped the validation this resume fills in
  int saved_ = 0;          // the step of the last checkpoint this run wrote (0: none)
  OutLock lock_;
  double h0_ = 0;
  std::unique_ptr<LogFile> log_;
  std::optional<EarlierLog> old_log_;  // rank 0, resumed: the log it continues, until then
  Progress progress_{t_.steps};
  // This run validated (its plot may hold an earlier run's points: loss.svg after a resume).
  bool validated_ = false;
  Curve train_curve_{"train loss", "#4e79a7"}, val_curve_{"validation loss", "#e15759"};
  TrainSummary sum_;
  StepResult last_;
  std::vector<std::pair<int, RealizedWork>> measured_;
  bool diverged_said_ = false;  // keep_measured's note, once
  StepTotals totals_;
  // Rank 0's, unless quiet: a long step's progress on stderr (made in go(), gone before
  // trainer_, whose steps it reads).
  std::optional<ProgressTicker> ticker_;
};

}  // namespace rrfp::train
