// What a training run prints and writes: its banner, its summary and its files in `out`
// (loss.svg, trace.json, timeline.svg, durations.csv; the log is written as the steps go).
#include <csignal>
#include <functional>
#include <iostream>
#include <sstream>

#include "core/error.hpp"
#include "core/format.hpp"
#include "core/output_file.hpp"
#include "core/printable.hpp"
#include "report/report.hpp"
#include "sim/replay.hpp"
#include "sim/timeline.hpp"
#include "train/training_run.hpp"

namespace rrfp::train {

// A fixed list's ranks each follow it and run no protocol (DispatchOptions::coordinated), so
// the banner does not name the one given: it said "TP=2 (agree) fixed 1f1b".
std::string TrainingRun::coordination() const {
  if (t_.runtime.arbiter.policy == Policy::Fixed) return "fixed list: no coordination";
  return to_string(t_.runtime.tp_protocol);
}

void TrainingRun::print_banner() const {
  if (o_.quiet) return;
  // The placement, as simulate's header says it: a V-shape taken from a hint file went unsaid.
  std::cout << "rrfp train: P=" << t_.pipe.pp << " V=" << t_.pipe.vpp << " ("
            << to_string(t_.pipe.placement) << ")"
            << " M=" << t_.pipe.microbatches
            << (t_.runtime.tp > 1
                    ? " TP=" + std::to_string(t_.runtime.tp) + " (" + coordination() + ")"
                    : std::string())
            << (t_.dp > 1 ? " DP=" + std::to_string(t_.dp) : std::string()) << " "
            << to_string(t_.runtime.arbiter.policy) << " " << visible(t_.hint)
            << (t_.pipe.split_backward ? " (split backward)" : "") << ", GPT d=" << t_.model.d_model
            << " layers=" << t_.model.layers << " heads=" << t_.model.heads << ", data "
            << visible(t_.task == "text" ? t_.data_dir : t_.task) << " ("
            << trainer_.data().describe() << "; byte-unigram entropy " << fmt("%.3f", h0_)
            << " nats)" << (o_.jitter.empty() ? "" : ", jitter " + o_.jitter)
            << (t_.device == "cpu" ? "" : ", on " + t_.device + " in " + t_.dtype)
            << std::endl;  // into a file it waited for the first step's line (30 s and more)
}

TrainSummary TrainingRun::finish() {
  sum_.stopped_by = stopped_by_;
  sum_.steps = done_ - first_;
  sum_.unigram_entropy = h0_;
  if (sum_.steps == 0) return finish_validation();
  totals_.summarize(sum_);
  write_outputs();
  if (!o_.quiet) print_summary();
  return sum_;
}

TrainSummary TrainingRun::finish_validation() {
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

void TrainingRun::said(const std::string& line) const {
  std::cout << line << std::flush;
  said_if_piped(line);
}

void TrainingRun::write_loss_plot() const {
  write_out_file("loss.svg", svg_line_plot("rrfp train: loss (nats per byte)", "step",
                                           {train_curve_.series(), val_curve_.series()}, h0_,
                                           "byte-unigram entropy"));
}

void TrainingRun::write_out_file(const std::string& name, const std::string& text) const {
  const std::string path = dir() + name;
  try {
    replace_file(path, text, "`out`: '" + path + "'");
  } catch (const InputError& e) {
    throw Error(e.what());
  }
}

void TrainingRun::write_outputs() const {
  // A file that fails names those written before it, which stay, as the other commands' do
  // (a full disk at durations.csv said nothing of loss.svg and trace.json, written and kept).
  std::string written = "loss.csv";  // written as the steps went
  const auto out = [&](const std::string& name, const std::function<void()>& write) {
    try {
      write();
    } catch (const Error& e) {
      throw Error(written_before(e.what(), written));
    }
    written += ", " + name;
  };
  out("loss.svg", [&] { write_loss_plot(); });
  ReportHeader h;
  h.workload = "train:" + (t_.task == "text" ? t_.data_dir : t_.task);
  h.seed = t_.data_seed;
  h.source = "measured";
  const std::vector<ReportRun> runs{report_of(last_, trainer_.model(), t_)};
  out("trace.json", [&] { write_out_file("trace.json", chrome_trace(runs)); });
  // The measured durations, replayable: rrfp simulate --replay DIR/durations.csv.
  if (!measured_.empty())
    out("durations.csv",
        [&] { write_out_file("durations.csv", replay_csv(trainer_.model(), measured_)); });
  out("timeline.svg", [&] { write_out_file("timeline.svg", svg_timeline(h, runs)); });
}

std::string TrainingRun::earlier_durations_kept() const {
  std::error_code ec;
  if (!measured_.empty() || first_ == 0 || !std::filesystem::exists(dir() + "durations.csv", ec))
    return {};
  return "; durations.csv, of steps before " + std::to_string(first_ + 1) +
         ", is the resumed run's, kept: this one kept none of its own";
}

// The limit the ready policy ran under and the peak D each stage reached, as every other
// report states them (semantics.md §2); train printed neither.
std::string TrainingRun::memory_said() const {
  if (sum_.peak_d.empty()) return {};
  return (sum_.limit > 0 ? ", limit " + std::to_string(sum_.limit) : std::string()) +
         ", peak D per stage " + peak_d_column(sum_.peak_d);
}

void TrainingRun::print_summary() const {
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
     << fmt("%.1f%%", 100 * sum_.outside_pipeline_share) << memory_said() << "\n"
     << "wrote " << visible(dir())
     << "loss.csv, loss.svg, trace.json, timeline.svg"
     // durations.csv holds the steps after the first two: a run stopped before has none
     << (measured_.empty() ? "" : ", durations.csv")
     // A run's last step saves one: a stop's is named on the line above.
     << (o_.save_every > 0 && !stopped ? ", checkpoint.bin" : "") << earlier_durations_kept()
     << "\n";
  std::cout << os.str() << std::flush;
  said_if_piped(os.str());
}

void TrainingRun::said_if_piped(const std::string& printed) const {
  if (stopped_by_ == SIGPIPE)
    std::cerr << "rrfp train: " << printed.substr(0, printed.find('\n')) << std::endl;
}

}  // namespace rrfp::train
