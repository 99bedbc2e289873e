#include "train/run.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>

#include "core/clock.hpp"
#include "core/error.hpp"
#include "dist/job.hpp"
#include "dist/step_merge.hpp"
#include "report/report.hpp"
#include "sim/metrics.hpp"
#include "sim/replay.hpp"
#include "sim/timeline.hpp"
#include "train/log_file.hpp"
#include "train/trainer.hpp"

namespace rrfp::train {

namespace {

// The output directory must exist (or be creatable) and be writable before training starts.
void prepare_out(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec || !std::filesystem::is_directory(dir) || access(dir.c_str(), W_OK) != 0)
    throw InputError("`out`: cannot write to directory '" + dir + "'" +
                     (ec ? ": " + ec.message() : std::string()));
}

// The runtime's view of a measured step, for the trace and the timeline.
ReportRun report_of(const StepResult& r, const WorkModel& m, const TrainOptions& o) {
  ReportRun out;
  out.policy = to_string(o.runtime.arbiter.policy);
  out.label = out.policy + " " + o.hint + " (measured training step)";
  out.hint = o.hint;
  out.comm = to_string(o.runtime.comm);
  out.cfg = m.config();
  out.result = r.run;
  out.metrics = compute_metrics(r.run, lower_bound(m, measured_work(m, r.run)));
  return out;
}

}  // namespace

TrainSummary run_training(const TrainRun& in) {
  const TrainOptions& t = in.train;
  // In a multi-process run rank 0 speaks for the job; validation needs every chunk in one
  // thread, which a TP or multi-process run does not have.
  const bool root = !t.job || t.job->rank() == 0;
  TrainRun o = in;
  o.quiet = in.quiet || !root;
  // Every option before anything is written: bad input leaves no trace.
  validate(t);
  if (o.eval_every < 0 || o.eval_batches < 1)
    throw InputError("`eval_every` and `eval_batches`: must be at least 0 and 1, got " +
                     std::to_string(o.eval_every) + " and " + std::to_string(o.eval_batches));
  const bool can_validate = !t.job && t.runtime.tp == 1;
  if (!can_validate) o.eval_every = 0;
  // Every process checks what bad input it could hit, so that all of them stop together: one
  // that stopped alone would leave the others waiting in a collective.
  prepare_out(o.out);
  if (o.save_every < 0)
    throw InputError("`save_every`: must not be negative, got " + std::to_string(o.save_every));
  if (t.job && (o.save_every > 0 || !o.resume.empty()))
    throw InputError(std::string(o.save_every > 0 ? "`save_every`" : "`resume`") +
                     ": checkpoints of a multi-process run are not supported yet");
  Trainer trainer(t);
  if (!o.resume.empty())
    for (const std::string& d : trainer.resume(o.resume))
      if (root && o.warn) o.warn(d + ": the run will not continue as that one would have");
  const int first_step = trainer.steps_done();
  const int steps = t.steps;
  if (first_step >= steps)
    throw InputError("`resume`: the checkpoint is already at step " + std::to_string(first_step) +
                     " of `steps` " + std::to_string(steps));
  const std::string ckpt = o.out + "/checkpoint.bin";
  const double h0 = trainer.data().unigram_entropy();
  const bool tty = isatty(STDOUT_FILENO);
  if (!o.quiet)
    std::cout << "rrfp train: P=" << t.pipe.pp << " V=" << t.pipe.vpp
              << " M=" << t.pipe.microbatches << " " << to_string(t.runtime.arbiter.policy) << " "
              << t.hint << (t.pipe.split_backward ? " (split backward)" : "")
              << ", GPT d=" << t.model.d_model << " layers=" << t.model.layers
              << " heads=" << t.model.heads << ", data " << (t.task == "text" ? t.data_dir : t.task)
              << " (" << trainer.data().describe() << "; byte-unigram entropy " << fmt("%.3f", h0)
              << " nats)" << (o.jitter.empty() ? "" : ", jitter " + o.jitter) << "\n";
  const std::string dir = o.out + "/";
  // Rank 0 keeps the log; a resumed run continues it. Each row is flushed as its step ends.
  std::unique_ptr<LogFile> log;
  if (root)
    log = std::make_unique<LogFile>(
        dir + "loss.csv",
        "step,loss,val_loss,lr,grad_norm,tokens,step_ms,pipeline_ms,bubble,gap_us_median",
        first_step > 0 ? first_step : -1);
  int done = steps, stopped_by = 0;
  PlotSeries train_curve{"train loss", "#4e79a7", {}}, val_curve{"validation loss", "#e15759", {}};
  TrainSummary sum;
  StepResult last;
  // durations.csv: the measured steps after the first two (start-up: allocator, first
  // touches), the last 100 at most, each with the messages seen from when their consumers
  // started (sim/timeline.hpp). Replaying every step predicts the run's mean; a mean of the
  // durations would not (it smooths away the variation that makes stages wait).
  constexpr int kSkipSteps = 2;
  constexpr size_t kKeptSteps = 100;
  const WorkModel& wm = trainer.model();
  std::vector<std::pair<int, RealizedWork>> measured_steps;
  double tokens = 0, seconds = 0, pipeline_s = 0, bubble = 0, gaps_ns = 0, busy_ns = 0;
  const std::int64_t t_start = now_ns();
  if (!o.quiet && first_step > 0)
    std::cout << "resumed from " << o.resume << " at step " << first_step << "\n";
  for (int s = first_step; s < steps; ++s) {
    const std::int64_t t0 = now_ns();
    StepReport r = trainer.step();
    // Every process measured its own ranks: rank 0 merges replica 0's into the step's record.
    if (t.job) merge_over_job(*t.job, r.run);
    const double step_s = static_cast<double>(now_ns() - t0) / 1e9;
    const RunMetrics met = compute_metrics(r.run.run, LowerBound{});
    pipeline_s += static_cast<double>(r.run.run.makespan) / 1e9;
    tokens += static_cast<double>(r.tokens);
    seconds += step_s;
    bubble += met.bubble_ratio;
    for (auto g : r.run.dispatch_gaps)
      gaps_ns += static_cast<double>(g);
    for (const auto& rs : r.run.run.ranks)
      busy_ns += static_cast<double>(rs.busy);
    if (s == first_step) sum.first_loss = r.loss;
    sum.last_loss = r.loss;
    std::string val;
    if (can_validate && ((o.eval_every > 0 && (s + 1) % o.eval_every == 0) || s + 1 == steps)) {
      sum.val_loss = trainer.validation_loss(o.eval_batches);
      val = fmt("%.4f", sum.val_loss);
      val_curve.points.push_back({s + 1.0, sum.val_loss});
    }
    train_curve.points.push_back({s + 1.0, r.loss});
    auto gaps = r.run.dispatch_gaps;
    double gap_med = 0;
    if (!gaps.empty()) {
      std::nth_element(gaps.begin(), gaps.begin() + gaps.size() / 2, gaps.end());
      gap_med = static_cast<double>(gaps[gaps.size() / 2]) / 1e3;
    }
    if (log)
      log->add(std::to_string(s + 1) + "," + fmt("%.5f", r.loss) + "," + val + "," +
               fmt("%.6g", r.lr) + "," + fmt("%.4f", r.grad_norm) + "," + std::to_string(r.tokens) +
               "," + fmt("%.2f", step_s * 1e3) + "," +
               fmt("%.2f", static_cast<double>(r.run.run.makespan) / 1e6) + "," +
               fmt("%.4f", met.bubble_ratio) + "," + fmt("%.1f", gap_med));
    // The checkpoint after the step's row, never before: a process killed between the two
    // must not leave a checkpoint past the log, whose resume would never write that row
    // (tests/train_signals.sh saw "1 2 3 4 5 7" after a kill -9). Killed after the row, the
    // resume from the checkpoint before drops the rows past it and logs them again.
    if (o.save_every > 0 && ((s + 1) % o.save_every == 0 || s + 1 == steps)) trainer.save(ckpt);
    if (!o.quiet && (tty || (s + 1) % 25 == 0 || s + 1 == steps || !val.empty())) {
      const double elapsed = static_cast<double>(now_ns() - t_start) / 1e9;
      const double eta = elapsed / (s + 1 - first_step) * (steps - s - 1);
      const int bar = 24 * (s + 1) / steps;
      std::cout << (tty ? "\r" : "") << "[" << std::string(bar, '#') << std::string(24 - bar, '.')
                << "] step " << s + 1 << "/" << steps << "  loss " << fmt("%.3f", r.loss)
                << (val.empty() ? "" : "  val " + val) << "  " << fmt("%.0f", tokens / seconds)
                << " tok/s  bubble " << fmt("%.1f%%", 100 * met.bubble_ratio) << "  ETA "
                << fmt("%.0fs", eta) << (tty && val.empty() ? "" : "\n") << std::flush;
    }
    if (root && s - first_step >= std::min(kSkipSteps, steps - first_step - 1)) {
      if (measured_steps.size() == kKeptSteps) measured_steps.erase(measured_steps.begin());
      measured_steps.emplace_back(
          s + 1, build_run(timeline_of(r.run.run), wm, r.run.run.tp, -1, "step").work);
    }
    last = std::move(r.run);
    // A signal asked to stop: this step is done and logged; keep a checkpoint and leave. Every
    // process of a job learns of it together, so none waits for another's next step.
    stopped_by = o.stop ? o.stop->load() : 0;
    if (t.job) stopped_by = static_cast<int>(max_over_job(*t.job, stopped_by));
    if (stopped_by && s + 1 < steps) {
      if (o.save_every > 0 && (s + 1) % o.save_every != 0) trainer.save(ckpt);
      done = s + 1;
      break;
    }
    stopped_by = 0;
  }
  if (!o.quiet && tty) std::cout << "\n";
  if (!root) return TrainSummary{.stopped_by = stopped_by};
  sum.stopped_by = stopped_by;
  sum.steps = done - first_step;
  sum.unigram_entropy = h0;
  sum.tokens_per_s = tokens / seconds;
  sum.mean_step_ms = seconds * 1e3 / sum.steps;
  sum.mean_bubble = bubble / sum.steps;
  // Runtime overhead: the dispatch gaps, against the ranks' summed compute.
  sum.overhead_share = busy_ns > 0 ? gaps_ns / (busy_ns + gaps_ns) : 0;
  sum.outside_pipeline_share = seconds > 0 ? 1 - pipeline_s / seconds : 0;

  write_text_file(dir + "loss.svg",
                  svg_line_plot("rrfp train: loss (nats per byte)", "step",
                                {train_curve, val_curve}, h0, "byte-unigram entropy"),
                  "`out`");
  ReportHeader h;
  h.workload = "train:" + (t.task == "text" ? t.data_dir : t.task);
  h.seed = t.data_seed;
  h.source = "measured";
  const std::vector<ReportRun> runs{report_of(last, trainer.model(), t)};
  write_chrome_trace(dir + "trace.json", runs);
  // The measured durations, replayable: rrfp simulate --replay DIR/durations.csv.
  if (!measured_steps.empty())
    write_text_file(dir + "durations.csv", replay_csv(wm, measured_steps), "`out`");
  write_svg(dir + "timeline.svg", h, runs);
  if (!o.quiet)
    std::cout << (stopped_by ? "stopped by signal " + std::to_string(stopped_by) + " after step " +
                                   std::to_string(done) + " of " + std::to_string(steps)
                             : "done: " + std::to_string(steps) + " steps")
              << (stopped_by && o.save_every > 0 ? " (checkpoint " + ckpt + ")" : "") << ", loss "
              << fmt("%.3f", sum.first_loss) << " -> " << fmt("%.3f", sum.last_loss)
              << ", validation "
              << (!val_curve.points.empty() ? fmt("%.3f", sum.val_loss) + " nats"
                  : can_validate            ? std::string("not reached")
                                            : std::string("skipped (TP or MPI)"))
              << " (byte-unigram entropy " << fmt("%.3f", h0) << " nats), "
              << fmt("%.0f", sum.tokens_per_s) << " tok/s, " << fmt("%.1f", sum.mean_step_ms)
              << " ms/step, bubble " << fmt("%.1f%%", 100 * sum.mean_bubble)
              << ", runtime overhead " << fmt("%.2f%%", 100 * sum.overhead_share)
              << ", outside the pipeline (optimizer, data) "
              << fmt("%.1f%%", 100 * sum.outside_pipeline_share) << "\n"
              << "wrote " << dir << "loss.csv, loss.svg, trace.json, timeline.svg, durations.csv\n";
  return sum;
}

}  // namespace rrfp::train
