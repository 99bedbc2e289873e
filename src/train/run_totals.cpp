// loss.csv's row of a step and the run's totals over its steps (train/run_parts.hpp).
#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "core/format.hpp"
#include "sim/metrics.hpp"
#include "train/run_parts.hpp"

namespace rrfp::train {

namespace {

// The q-quantile of durations in ns, in µs (sim/metrics.hpp's percentile); 0 for none.
double quantile_us(const std::vector<std::int64_t>& ns, double q) {
  return static_cast<double>(percentile(ns, q)) / 1e3;
}

double sum_ms(const std::vector<std::int64_t>& ns) {
  return static_cast<double>(std::accumulate(ns.begin(), ns.end(), std::int64_t{0})) / 1e6;
}

}  // namespace

std::string loss_row(int step, const StepReport& r, const std::string& val, double step_s,
                     double cpu_ms, double bubble) {
  return std::to_string(step) + "," + fmt("%.5f", r.loss) + "," + val + "," + fmt("%.6g", r.lr) +
         "," + fmt("%.4f", r.grad_norm) + "," + std::to_string(r.tokens) + "," +
         fmt("%.2f", step_s * 1e3) + "," +
         fmt("%.2f", static_cast<double>(r.run.run.makespan) / 1e6) + "," + fmt("%.4f", bubble) +
         "," + fmt("%.1f", median(r.run.dispatch_gaps) / 1e3) + "," + fmt("%.1f", cpu_ms) + "," +
         fmt("%.1f", quantile_us(r.run.dispatch_gaps, 0.99)) + "," +
         fmt("%.1f", median(r.device_waits) / 1e3) + "," + fmt("%.2f", sum_ms(r.device_waits));
}

void StepTotals::add(const StepReport& r, double step_s, double bubble) {
  pipeline_s_ += static_cast<double>(r.run.run.makespan) / 1e9;
  tokens_ += static_cast<double>(r.tokens);
  seconds_ += step_s;
  bubble_ += bubble;
  for (auto g : r.run.dispatch_gaps)
    gaps_ns_ += static_cast<double>(g);
  for (const auto& rs : r.run.run.ranks)
    busy_ns_ += static_cast<double>(rs.busy);
  const StepRecord& rec = r.run.run;
  limit_ = rec.arbiter.policy == Policy::Ready ? rec.arbiter.limit : 0;
  peak_d_.resize(std::max(peak_d_.size(), rec.peak_d.size()), 0);
  for (std::size_t s = 0; s < rec.peak_d.size(); ++s)
    peak_d_[s] = std::max(peak_d_[s], rec.peak_d[s]);
}

void StepTotals::summarize(TrainSummary& s) const {
  if (s.steps == 0) return;
  s.tokens_per_s = tokens_per_s();
  s.mean_step_ms = seconds_ * 1e3 / s.steps;
  s.mean_bubble = bubble_ / s.steps;
  // Runtime overhead: the dispatch gaps, against the ranks' summed compute.
  s.overhead_share = busy_ns_ > 0 ? gaps_ns_ / (busy_ns_ + gaps_ns_) : 0;
  s.outside_pipeline_share = seconds_ > 0 ? 1 - pipeline_s_ / seconds_ : 0;
  s.limit = limit_;
  s.peak_d = peak_d_;
}

}  // namespace rrfp::train
