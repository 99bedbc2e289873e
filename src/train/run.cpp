#include "train/run.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <optional>

#include "core/clock.hpp"
#include "core/error.hpp"
#include "core/format.hpp"
#include "core/printable.hpp"
#include "dist/job.hpp"
#include "dist/step_merge.hpp"
#include "sim/metrics.hpp"
#include "sim/timeline.hpp"
#include "train/log_file.hpp"
#include "train/run_parts.hpp"
#include "train/trainer.hpp"
#include "train/training_run.hpp"

namespace rrfp::train {

namespace {

// A resume's difference `d` ("`name` is ...; the checkpoint's run had ...") with what it
// changes: the training, or only its validation (the loss and the parameters go on as they
// would have: it warned that the run would not continue); where a hint file's header set this
// run's microbatches (`microbatches_from_hint`), said beside this run's value (it blamed
// --microbatches, which was not given, and then sat beside the checkpoint's).
std::string resume_warning(std::string d, bool microbatches_from_hint) {
  if (microbatches_from_hint && d.starts_with("`microbatches` "))
    if (const size_t at = d.find(";"); at != std::string::npos)
      d.insert(at, " (set by the hint file's header: `microbatches` was not given)");
  if (d.starts_with("`eval_every` ") || d.starts_with("`eval_batches` "))
    return d + ": the training goes on as that run's would have; only its validation differs";
  return d + ": the run will not continue as that one would have";
}

}  // namespace

TrainingRun::TrainingRun(const TrainRun& in)
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
      o_.warn(resume_warning(d, o_.microbatches_from_hint));
  if (const std::string w = schedule_warning(t_); root_ && o_.warn && !w.empty() && !fill_in_only)
    o_.warn(w);
  // The interval is not in the checkpoint: a resume that left it out wrote none, and a stop
  // days later went back to the checkpoint it resumed from without a word.
  if (root_ && o_.warn && first_ > 0 && !fill_in_only && o_.save_every <= 0)
    o_.warn(
        "resumed without `save_every`: this run writes no checkpoint, so a stop goes back "
        "to step " +
        std::to_string(first_) + " (give `save_every` again to keep one)");
  // Resumed into a folder without the run's log: a validation cut short there stays so.
  if (root_ && o_.warn && first_ > 0 && !old_log_ && validates_after(first_))
    if (const std::string w = validation_left_behind(o_.resume, first_); !w.empty()) o_.warn(w);
  h0_ = trainer_.data().unigram_entropy();
}

TrainSummary TrainingRun::go() {
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
  if (root_ && !o_.quiet) ticker_.emplace("");
  // Stopped in the fill-in validation, or while a resume rewrote its log (13.5M rows take
  // 4-5 s): no step is trained, so the checkpoint and the log stay for the next resume (a
  // step trained after the fill-in checkpointed past its row; one trained after the rewrite
  // was logged with no checkpoint of it).
  const bool stopped_first = fill_cut_ || (first_ > 0 && agreed_signal() != 0);
  done_ = stopped_first ? first_ : t_.steps;
  for (int s = first_; s < done_; ++s)
    if (!step(s)) break;
  ticker_.reset();
  if (stopped_first) stopped_by_ = agreed_signal();
  progress_.end();
  if (!root_) return TrainSummary{.stopped_by = stopped_by_};
  return finish();
}

bool TrainingRun::log_in_out() const {
  std::error_code ec;
  double held = root_ && std::filesystem::exists(dir() + "loss.csv", ec) ? 1 : 0;
  if (t_.job) held = max_over_job(*t_.job, held);
  return held > 0;
}

void TrainingRun::refuse_at_the_end() const {
  throw InputError("`resume`: the checkpoint is already at step " + std::to_string(first_) +
                   " of `steps` " + std::to_string(t_.steps));
}

bool TrainingRun::step(int s) {
  const std::int64_t t0 = now_ns(), cpu0 = process_cpu_ns();
  if (ticker_) ticker_->status([this, s, t0] { return step_under_way(s, t0); });
  StepReport r = trainer_.step();
  if (ticker_) ticker_->idle();  // before the bar is drawn where its line was
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

std::string TrainingRun::step_under_way(int s, std::int64_t t0_ns) const {
  const std::int64_t ran = now_ns() - t0_ns;
  const Runtime::StepProgress p = trainer_.step_progress();
  if (ran < kQuietStepNs || p.total <= 0) return {};
  const double seconds = static_cast<double>(ran) / 1e9;
  const double share = static_cast<double>(p.ended) / static_cast<double>(p.total);
  std::string text = "rrfp train: step " + std::to_string(s + 1) + "/" + std::to_string(t_.steps) +
                     ": " + std::to_string(p.ended) + " of " + std::to_string(p.total) + " tasks" +
                     (t_.job ? " of rank 0" : "") + " (" + fmt("%.1f%%", 100 * share) + ") in " +
                     fmt("%.0f s", seconds);
  // The rest at the pace so far; a step's tasks are alike enough for a first guess.
  if (p.ended > 0)
    text += ", about " + format_duration(seconds / share * (1 - share)) + " more for this step";
  return text;
}

void TrainingRun::keep_measured(int s, const StepReport& r) {
  RealizedWork work;
  try {
    work = build_run(timeline_of(r.run.run), trainer_.model(), r.run.run.tp, -1, "step").work;
  } catch (const InputError& e) {
    if (t_.runtime.tp < 2 || t_.runtime.tp_protocol != TpProtocol::None) throw;
    std::string why = e.what();  // "step: stage 1: ...", after the line's own "step N:"
    if (why.starts_with("step: ")) why.erase(0, 6);
    if (!diverged_said_ && o_.warn)
      o_.warn("step " + std::to_string(s + 1) + ": the tensor-parallel ranks ran different " +
              "orders (`tp_protocol` none), so durations.csv keeps no such step: " + why);
    diverged_said_ = true;
    return;
  }
  if (measured_.size() == kKeptSteps) measured_.erase(measured_.begin());
  measured_.emplace_back(s + 1, std::move(work));
}

void TrainingRun::save(int step) {
  double bad = 0;
  for (const torch::Tensor& p : trainer_.parameters())
    if (!torch::isfinite(p).all().item<bool>()) bad = 1;
  if (t_.job) bad = max_over_job(*t_.job, bad);  // every process stops, or none
  if (bad != 0) throw diverged(step, "the parameters are no longer finite");
  trainer_.save(checkpoint());
  saved_ = step;
}

void TrainingRun::stop_if_diverged(int s, double loss, double grad_norm, double val_loss) const {
  const auto bad = [&](double v, const char* what) {
    if (!std::isfinite(v))
      throw diverged(s + 1, std::string(what) + (std::isnan(v) ? "not a number" : "infinite"));
  };
  bad(loss, "the loss is ");
  bad(grad_norm, "the gradient norm is ");
  bad(val_loss, "the validation loss is ");
}

JobError TrainingRun::diverged(int step, const std::string& what) const {
  const std::string kept = saved_ > 0   ? checkpoint() + " keeps step " + std::to_string(saved_)
                           : first_ > 0 ? "this run wrote no checkpoint; it resumed from " +
                                              o_.resume + " at step " + std::to_string(first_)
                                        : "no checkpoint was written";
  return JobError("step " + std::to_string(step) + ": " + what + "; training stops (" + kept +
                  "): lower `lr`, or check the data or the checkpoint resumed from");
}

int TrainingRun::agreed_signal() const {
  const int sig = o_.stop ? o_.stop->load() : 0;
  return t_.job ? static_cast<int>(max_over_job(*t_.job, sig)) : sig;
}

bool TrainingRun::stop_after(int s) {
  stopped_by_ = agreed_signal();
  if (stopped_by_ && (s + 1 < t_.steps || last_validation_cut_)) {
    if (o_.save_every > 0 && (s + 1) % o_.save_every != 0) save(s + 1);
    done_ = s + 1;
    return true;
  }
  stopped_by_ = 0;
  return false;
}

bool TrainingRun::due_when_written() const {
  const long long steps = trainer_.checkpoint_option("steps").value_or(t_.steps);
  const long long every = trainer_.checkpoint_option("eval_every").value_or(o_.eval_every);
  return first_ == steps || (every > 0 && first_ % every == 0);
}

bool TrainingRun::validation_cut_short() const {
  // A checkpoint of an older build says neither: any empty row is taken.
  const bool due = !trainer_.checkpoint_option("steps") || due_when_written();
  double empty = due && root_ && log_field_empty(old_log_, 2) ? 1 : 0;
  if (t_.job) empty = max_over_job(*t_.job, empty);
  return empty > 0;
}

std::optional<double> TrainingRun::validation_loss(int s) {
  progress_.validating(s, o_.eval_batches);
  return trainer_.validation_loss(o_.eval_batches, o_.stop,
                                  [&](int done) { progress_.validated(s, done, o_.eval_batches); });
}

RowFill TrainingRun::validation_left_out() {
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

TrainSummary run_training(const TrainRun& in) {
  return TrainingRun(in).go();
}

}  // namespace rrfp::train
