#include "python/step_record.hpp"

#include "sim/metrics.hpp"

namespace rrfp::py {

double StepRecordPy::dispatch_gap_us() const {
  return static_cast<double>(percentile(dispatch_gaps, 0.5)) / 1e3;
}

std::string StepRecordPy::table() const {
  return format_table(header, {run}, true);
}

std::string StepRecordPy::json() const {
  return to_json(header, {run}).dump();
}

void StepRecordPy::save_trace(const std::string& path) const {
  write_chrome_trace(path, {run});
}

void StepRecordPy::save_svg(const std::string& path) const {
  write_svg(path, header, {run});
}

}  // namespace rrfp::py
