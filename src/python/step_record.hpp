#pragma once
// What Python sees of a step, simulated or measured: rrfp.StepRecord. Times in seconds.
#include <string>
#include <vector>

#include "report/report.hpp"

namespace rrfp::py {

struct StepRecordPy {
  ReportHeader header;
  ReportRun run;  // run.dispatch_gaps: a measured step's

  double makespan() const { return static_cast<double>(run.metrics.makespan) / 1e9; }
  double lower_bound() const { return static_cast<double>(run.metrics.bound.value) / 1e9; }
  // Median dispatch gap in microseconds (0 when not measured).
  double dispatch_gap_us() const;
  std::string table() const;
  std::string json() const;
  void save_trace(const std::string& path) const;
  void save_svg(const std::string& path) const;
};

}  // namespace rrfp::py
