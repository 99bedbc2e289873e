#include "train/run.hpp"

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <optional>
#include <sstream>

#include "core/clock.hpp"
#include "core/error.hpp"
#include "core/format.hpp"
#include "core/output_file.hpp"
#include "core/printable.hpp"
#include "dist/job.hpp"
#include "dist/step_merge.hpp"
#include "report/report.hpp"
#include "sim/metrics.hpp"
#include "sim/replay.hpp"
#include "sim/timeline.hpp"
#include "train/log_file.hpp"
#include "train/run_parts.hpp"
#include "train/trainer.hpp"

namespace rrfp::train {

namespace {

// One training run from its first step to its outputs. Rank 0 of a multi-process run speaks
// for the job (the log, the outputs, the progress); every process takes part in validation.
class Run {
 public:
  // Every process checks its own folder and files: a refusal on any is every process's
  // (agree_on_input), and rank 0's checks of the lock and the log are so too.
  explicit Run(const TrainRun& in)
      : o_(in),
        t_(o_.train),
        root_(!t_.job || t_.job->rank() == 0),
        trainer_((agree_on_input(in.train.job, [&] { check_run(in); }), t_)) {
    o_.quiet = in.quiet || !root_;
    std::vector<std::string> differences;
    // The validation's settings, with the log's val_loss column: a resume under others wrote
    // its rows beside the earlier ones without a word.
    trainer_.record_option("eval_every", o_.eval_every);
    trainer_.record_option("eval_batches", o_.eval_batches);
    // Read before `out` is made: a checkpoint refused (corrupt, another task's) left a new
    // `out` behind, holding the lock file alone.
    if (!o_.resume.empty()) differences = trainer_.resume(o_.resume);
    first_ = trainer_.steps_done();
    // Past `steps`, or at it with no log in `out` to hold a validation cut short: refused before
    // `out` is made (a new one was left holding the lock file alone).
    if (first_ > t_.steps || (first_ == t_.steps && !log_in_out())) refuse_at_the_end();
    agree_on_input(t_.job, [&] {
      prepare_run_out(in);
      if (root_) lock_.lock(o_.out);
    });
    agree_on_input(t_.job, [&] {  // a resume's log, read once for its checks and continuation
      if (!root_ || first_ == 0) return;
      old_log_ = read_log(dir() + "loss.csv", first_);
      refuse_other_columns(old_log_, kLossColumns);
      if (const auto loss = trainer_.last_loss())
        refuse_another_runs_log(dir() + "loss.csv", old_log_, first_, *loss);
    });
    // Refused in one line: the warnings below would only add to it. A checkpoint of the last
    // step is taken only where a signal cut that step's due validation short: the resume
    // validates it, and only that.
    if (first_ == t_.steps && !validation_cut_short()) refuse_at_the_end();
    if (t_.job)  // a collective: every process
      if (const std::string w = intra_op_threads_differ(*t_.job); root_ && o_.warn && !w.empty())
        o_.warn(w);
    // At its last step a resume only fills in a validation: no step continues or is scheduled.
    const bool fill_in_only = first_ == t_.steps;
    for (const std::string& d : differences)
      if (root_ && o_.warn && !(fill_in_only && d.starts_with("`steps` ")))
        o_.warn(d + ": the run will not continue as that one would have");
    if (const std::string w = schedule_warning(t_); root_ && o_.warn && !w.empty() && !fill_in_only)
      o_.warn(w);
    // Resumed into a folder without the run's log: a validation cut short there stays so.
    if (root_ && o_.warn && first_ > 0 && !old_log_ && validates_after(first_))
      if (const std::string w = validation_left_behind(o_.resume, first_); !w.empty()) o_.warn(w);
    h0_ = trainer_.data().unigram_entropy();
  }

  TrainSummary go() {
    if (o_.work_begins) o_.work_begins();
    print_banner();
    // Said before the validation a resume may owe its last step (it said nothing meanwhile).
    if (!o_.quiet && first_ > 0)
      std::cout << "resumed from " << visible(o_.resume) << " at step " << first_ << std::endl;
    if (root_ && o_.resume.empty()) remove_earlier_outputs(o_.out);
    progress_.start(first_, o_.quiet);  // that validation's progress, as a step's
    const RowFill fill = validation_left_out();
    // Rank 0 keeps the log; a resumed run continues it. Each row is flushed as its step ends.
    if (root_)
      log_ = std::make_unique<LogFile>(
          dir() + "loss.csv", kLossColumns, first_ > 0 ? first_ : -1, old_log_, fill,
          [&](const std::string& row) { plot_row(row, train_curve_, val_curve_); });
    old_log_.reset();
    progress_.start(first_, o_.quiet);  // again: the steps' ETA counts from here
    // Stopped in the fill-in validation, or while a resume rewrote its log (13.5M rows take
    // 4-5 s): no step is trained, so the checkpoint and the log stay for the next resume (a
    // step trained after the fill-in checkpointed past its row; one trained after the rewrite
    // was logged with no checkpoint of it).
    const bool stopped_first = fill_cut_ || (first_ > 0 && agreed_signal() != 0);
    done_ = stopped_first ? first_ : t_.steps;
    for (int s = first_; s < done_; ++s)
      if (!step(s)) break;
    if (stopped_first) stopped_by_ = agreed_signal();
    progress_.end();
    if (!root_) return TrainSummary{.stopped_by = stopped_by_};
    return finish();
  }

 private:
  // `out` "/" (its trailing slashes are cut down to the root's own) printed "wrote //loss.csv".
  std::string dir() const { return o_.out.ends_with('/') ? o_.out : o_.out + "/"; }
  // Whether the run validates once `steps` steps are done: at its last, and every `eval_every`.
  bool validates_after(int steps) const {
    return steps == t_.steps || (o_.eval_every > 0 && steps % o_.eval_every == 0);
  }
  std::string checkpoint() const { return o_.out + "/checkpoint.bin"; }
  // Whether rank 0's `out` holds a log (agreed over a job: rank 0 alone reads it).
  bool log_in_out() const {
    std::error_code ec;
    double held = root_ && std::filesystem::exists(dir() + "loss.csv", ec) ? 1 : 0;
    if (t_.job) held = max_over_job(*t_.job, held);
    return held > 0;
  }
  [[noreturn]] void refuse_at_the_end() const {
    throw InputError("`resume`: the checkpoint is already at step " + std::to_string(first_) +
                     " of `steps` " + std::to_string(t_.steps));
  }

  void print_banner() const {
    if (o_.quiet) return;
    std::cout << "rrfp train: P=" << t_.pipe.pp << " V=" << t_.pipe.vpp
              << " M=" << t_.pipe.microbatches
              << (t_.runtime.tp > 1 ? " TP=" + std::to_string(t_.runtime.tp) + " (" +
                                          to_string(t_.runtime.tp_protocol) + ")"
                                    : std::string())
              << (t_.dp > 1 ? " DP=" + std::to_string(t_.dp) : std::string()) << " "
              << to_string(t_.runtime.arbiter.policy) << " " << visible(t_.hint)
              << (t_.pipe.split_backward ? " (split backward)" : "")
              << ", GPT d=" << t_.model.d_model << " layers=" << t_.model.layers
              << " heads=" << t_.model.heads << ", data "
              << visible(t_.task == "text" ? t_.data_dir : t_.task) << " ("
              << trainer_.data().describe() << "; byte-unigram entropy " << fmt("%.3f", h0_)
              << " nats)" << (o_.jitter.empty() ? "" : ", jitter " + o_.jitter)
              << (t_.device == "cpu" ? "" : ", on " + t_.device + " in " + t_.dtype)
              << std::endl;  // into a file it waited for the first step's line (30 s and more)
  }

  // Step s; false when a signal asked the run to stop after it.
  bool step(int s) {
    const std::int64_t t0 = now_ns(), cpu0 = process_cpu_ns();
    StepReport r = trainer_.step();
    const double cpu_ms = static_cast<double>(process_cpu_ns() - cpu0) / 1e6;
    // Every process measured its own ranks: rank 0 merges replica 0's into the step's record.
    if (t_.job) merge_over_job(*t_.job, r.run);
    const double step_s = static_cast<double>(now_ns() - t0) / 1e9;
    const RunMetrics met = compute_metrics(r.run.run, LowerBound{});
    totals_.add(r, step_s, met.bubble_ratio);
    if (s == first_) sum_.first_loss = r.loss;
    sum_.last_loss = r.loss;
    std::string val;
    double val_loss = 0;  // finite where the step validates not
    if (validates_after(s + 1)) {
      if (const auto v = validation_loss(s)) {
        sum_.val_loss = val_loss = *v;
        validated_ = true;
        val = fmt("%.4f", *v);
        val_curve_.add(s + 1.0, *v);
      } else {  // a signal asked to stop: the step stands without it, and the run stops after
        last_validation_cut_ = s + 1 == t_.steps;
      }
    }
    train_curve_.add(s + 1.0, r.loss);
    if (log_) log_->add(loss_row(s + 1, r, val, step_s, cpu_ms, met.bubble_ratio));
    // The checkpoint after the step's row, never before: a process killed between the two
    // must not leave a checkpoint past the log, whose resume would never write that row
    // (tests/train_signals.sh saw "1 2 3 4 5 7" after a kill -9). Killed after the row, the
    // resume from the checkpoint before drops the rows past it and logs them again.
    stop_if_diverged(s, r.loss, r.grad_norm, val_loss);
    if (o_.save_every > 0 && ((s + 1) % o_.save_every == 0 || s + 1 == t_.steps)) save(s + 1);
    progress_.step(s, r.loss, val, totals_.tokens_per_s(), met.bubble_ratio);
    if (root_ && s - first_ >= std::min(kSkipSteps, t_.steps - first_ - 1)) keep_measured(s, r);
    last_ = std::move(r.run);
    return !stop_after(s);
  }

  // The step's measured durations, for durations.csv (the twin's replay). Without
  // coordination (`tp_protocol` none) a stage's TP ranks may run different orders, which no
  // replay can take: said once, and such steps are left out, where the run ended there with
  // an error about a trace read with the wrong `tp` (its steps had trained as they should).
  void keep_measured(int s, const StepReport& r) {
    RealizedWork work;
    try {
      work = build_run(timeline_of(r.run.run), trainer_.model(), r.run.run.tp, -1, "step").work;
    } catch (const InputError& e) {
      if (t_.runtime.tp < 2 || t_.runtime.tp_protocol != TpProtocol::None) throw;
      if (!diverged_said_ && o_.warn)
        o_.warn("step " + std::to_string(s + 1) + ": the tensor-parallel ranks ran different " +
                "orders (`tp_protocol` none), so durations.csv keeps no such step: " + e.what());
      diverged_said_ = true;
      return;
    }
    if (measured_.size() == kKeptSteps) measured_.erase(measured_.begin());
    measured_.emplace_back(s + 1, std::move(work));
  }

  // The checkpoint of `step`, never of parameters that are not finite (a step that overflowed
  // without its loss showing it yet): the last checkpoint stays the last good one.
  void save(int step) {
    double bad = 0;
    for (const torch::Tensor& p : trainer_.parameters())
      if (!torch::isfinite(p).all().item<bool>()) bad = 1;
    if (t_.job) bad = max_over_job(*t_.job, bad);  // every process stops, or none
    if (bad != 0) throw diverged(step, "the parameters are no longer finite");
    trainer_.save(checkpoint());
    saved_ = step;
  }

  // A loss, gradient norm or validation loss that is not finite ends the run with an error,
  // the step's row logged, before a checkpoint could take the parameters its update made (a
  // validation loss of NaN from finite but huge parameters was checkpointed over the last good
  // one, and the run ended "done"). Every process of a job knows all three (they are reduced
  // over the job), so all stop together.
  void stop_if_diverged(int s, double loss, double grad_norm, double val_loss) const {
    const auto bad = [&](double v, const char* what) {
      if (!std::isfinite(v))
        throw diverged(s + 1, std::string(what) + (std::isnan(v) ? "not a number" : "infinite"));
    };
    bad(loss, "the loss is ");
    bad(grad_norm, "the gradient norm is ");
    bad(val_loss, "the validation loss is ");
  }

  // Names the checkpoint to go back to: this run's last, else the one it resumed from (which
  // "no checkpoint was written" hid).
  JobError diverged(int step, const std::string& what) const {
    const std::string kept = saved_ > 0   ? checkpoint() + " keeps step " + std::to_string(saved_)
                             : first_ > 0 ? "this run wrote no checkpoint; it resumed from " +
                                                o_.resume + " at step " + std::to_string(first_)
                                          : "no checkpoint was written";
    return JobError("step " + std::to_string(step) + ": " + what + "; training stops (" + kept +
                    "): lower `lr`, or check the data or the checkpoint resumed from");
  }

  // The signal that asked to stop (0: none), the same on every process of a job.
  int agreed_signal() const {
    const int sig = o_.stop ? o_.stop->load() : 0;
    return t_.job ? static_cast<int>(max_over_job(*t_.job, sig)) : sig;
  }

  // A signal asked to stop: step s is done and logged; keep a checkpoint and leave. Every
  // process of a job learns of it together, so none waits for another's next step. In the last
  // step, the run is whole unless the signal cut its validation short: then it reports the stop
  // (exit 128 + the signal), and a resume from its checkpoint validates that step (it exited 0,
  // and the resume was refused as already at the last step: the validation was lost for good).
  bool stop_after(int s) {
    stopped_by_ = agreed_signal();
    if (stopped_by_ && (s + 1 < t_.steps || last_validation_cut_)) {
      if (o_.save_every > 0 && (s + 1) % o_.save_every != 0) save(s + 1);
      done_ = s + 1;
      return true;
    }
    stopped_by_ = 0;
    return false;
  }

  // Whether the run that wrote the checkpoint had a validation due at its step: its last, or
  // one its `eval_every` falls on. This run's options stand in where an older checkpoint does
  // not say. A resume under another `eval_every` took its own: it "filled in" a validation the
  // checkpoint's run never had due, and said a signal had cut it short.
  bool due_when_written() const {
    const long long steps = trainer_.checkpoint_option("steps").value_or(t_.steps);
    const long long every = trainer_.checkpoint_option("eval_every").value_or(o_.eval_every);
    return first_ == steps || (every > 0 && first_ % every == 0);
  }

  // The checkpoint's step had a validation due in the run that wrote it and its row has no
  // val_loss (agreed over a job). Any empty row was taken: a mid-run checkpoint of an
  // `eval_every` 0 run resumed at its step "filled in" a validation no signal had cut short,
  // where it is already at `steps`.
  bool validation_cut_short() const {
    // A checkpoint of an older build says neither: any empty row is taken.
    const bool due = !trainer_.checkpoint_option("steps") || due_when_written();
    double empty = due && root_ && log_field_empty(old_log_, 2) ? 1 : 0;
    if (t_.job) empty = max_over_job(*t_.job, empty);
    return empty > 0;
  }

  // The validation after step s, its progress shown (nullopt: a signal stopped it).
  std::optional<double> validation_loss(int s) {
    progress_.validating(s, o_.eval_batches);
    return trainer_.validation_loss(
        o_.eval_batches, o_.stop, [&](int done) { progress_.validated(s, done, o_.eval_batches); });
  }

  // A stop during the validation of the step a checkpoint holds left that step's row without
  // its val_loss, which the resume never did again: a resumed run validates that step first,
  // on every process, as the run would have (the same model and held-out batches).
  RowFill validation_left_out() {
    if (first_ == 0 || !due_when_written()) return {};
    double empty = root_ && log_field_empty(old_log_, 2) ? 1 : 0;
    if (t_.job) empty = max_over_job(*t_.job, empty);
    if (empty == 0) return {};
    const auto v = validation_loss(first_ - 1);
    fill_cut_ = !v;
    if (!v) return {};                       // stopped again: the row stays as it was
    stop_if_diverged(first_ - 1, 0, 0, *v);  // as in a step: "nan" was filled in, and "done"
    sum_.val_loss = *v;
    validated_ = true;
    return {first_, 2, fmt("%.4f", *v)};
  }

  TrainSummary finish() {
    sum_.stopped_by = stopped_by_;
    sum_.steps = done_ - first_;
    sum_.unigram_entropy = h0_;
    if (sum_.steps == 0) return finish_validation();
    totals_.summarize(sum_);
    write_outputs();
    if (!o_.quiet) print_summary();
    return sum_;
  }

  // A resume that only validated the last step (stop_after): the plot gains its point; the
  // trace, timeline and durations of the steps run before stay as they were.
  TrainSummary finish_validation() {
    write_loss_plot();
    if (o_.quiet) return sum_;
    if (validated_)
      std::cout << "done: step " << first_ << "'s validation, which a signal had cut short, is "
                << "filled in: " << fmt("%.3f", sum_.val_loss) << " nats (byte-unigram entropy "
                << fmt("%.3f", h0_) << " nats)\nwrote " << visible(dir()) << "loss.csv, loss.svg\n";
    else if (fill_cut_)
      said("stopped by " + signal_name(stopped_by_) + " before step " + std::to_string(first_) +
           "'s validation was filled in\n");
    else
      said("stopped by " + signal_name(stopped_by_) + " before step " + std::to_string(first_ + 1) +
           ": no step trained; the checkpoint is as it was, and loss.csv holds the steps up to "
           "it\n");
    return sum_;
  }

  void said(const std::string& line) const {
    std::cout << line << std::flush;
    said_if_piped(line);
  }

  void write_loss_plot() const {
    write_out_file("loss.svg", svg_line_plot("rrfp train: loss (nats per byte)", "step",
                                             {train_curve_.series(), val_curve_.series()}, h0_,
                                             "byte-unigram entropy"));
  }

  // A file of `out`, written whole. Checked before the first step, so a refusal now (a
  // directory put in its place during the run) is the run's failure, exit 1, as a checkpoint's
  // is: it was bad input, exit 2, naming `trace` or `svg`, flags `train` does not have.
  void write_out_file(const std::string& name, const std::string& text) const {
    const std::string path = dir() + name;
    try {
      replace_file(path, text, "`out`: '" + path + "'");
    } catch (const InputError& e) {
      throw Error(e.what());
    }
  }

  void write_outputs() const {
    write_loss_plot();
    ReportHeader h;
    h.workload = "train:" + (t_.task == "text" ? t_.data_dir : t_.task);
    h.seed = t_.data_seed;
    h.source = "measured";
    const std::vector<ReportRun> runs{report_of(last_, trainer_.model(), t_)};
    write_out_file("trace.json", chrome_trace(runs));
    // The measured durations, replayable: rrfp simulate --replay DIR/durations.csv.
    if (!measured_.empty())
      write_out_file("durations.csv", replay_csv(trainer_.model(), measured_));
    write_out_file("timeline.svg", svg_timeline(h, runs));
  }

  // A resume stopped within its first two steps writes no durations.csv: the run's before it,
  // of earlier steps than trace.json's, stays, said (it stood beside the new trace unsaid).
  std::string earlier_durations_kept() const {
    std::error_code ec;
    if (!measured_.empty() || first_ == 0 || !std::filesystem::exists(dir() + "durations.csv", ec))
      return {};
    return "; durations.csv, of steps before " + std::to_string(first_ + 1) +
           ", is the resumed run's, kept: this one kept none of its own";
  }

  // One write: under mpirun the other processes' lines share the stream (a "SIGTERM taken"
  // line once landed inside this one, written piece by piece).
  void print_summary() const {
    const bool stopped = stopped_by_ != 0;
    std::ostringstream os;
    os << (stopped ? "stopped by " + signal_name(stopped_by_) + " after step " +
                         std::to_string(done_) + " of " + std::to_string(t_.steps)
           : first_ > 0
               ? "done: steps " + std::to_string(first_ + 1) + " to " + std::to_string(t_.steps) +
                     " of " + std::to_string(t_.steps)  // the loss span's too
               : "done: " + std::to_string(t_.steps) + (t_.steps == 1 ? " step" : " steps"))
       << (stopped && o_.save_every > 0 ? " (checkpoint " + checkpoint() + ")" : "") << ", loss "
       << fmt("%.3f", sum_.first_loss) << " -> " << fmt("%.3f", sum_.last_loss) << ", validation "
       << (validated_ ? fmt("%.3f", sum_.val_loss) + " nats" : std::string("not reached"))
       << " (byte-unigram entropy " << fmt("%.3f", h0_) << " nats), "
       << fmt("%.0f", sum_.tokens_per_s) << " tok/s, " << fmt("%.1f", sum_.mean_step_ms)
       << " ms/step, bubble " << fmt("%.1f%%", 100 * sum_.mean_bubble) << ", runtime overhead "
       << fmt("%.2f%%", 100 * sum_.overhead_share) << ", outside the pipeline (optimizer, data) "
       << fmt("%.1f%%", 100 * sum_.outside_pipeline_share) << "\n"
       << "wrote " << visible(dir())
       << "loss.csv, loss.svg, trace.json, timeline.svg"
       // durations.csv holds the steps after the first two: a run stopped before has none
       << (measured_.empty() ? "" : ", durations.csv") << earlier_durations_kept() << "\n";
    std::cout << os.str() << std::flush;
    said_if_piped(os.str());
  }

  // Stopped because its standard output's reader went (`| head`): what it printed there went
  // nowhere, and the run's stop (exit 141) was without a word: its first line on stderr too.
  void said_if_piped(const std::string& printed) const {
    if (stopped_by_ == SIGPIPE)
      std::cerr << "rrfp train: " << printed.substr(0, printed.find('\n')) << std::endl;
  }

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
};

}  // namespace

TrainSummary run_training(const TrainRun& in) {
  return Run(in).go();
}

}  // namespace rrfp::train
