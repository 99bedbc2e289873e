#include "python/step_record.hpp"

#include <algorithm>

namespace rrfp::py {

double StepRecordPy::dispatch_gap_us() const {
  if (dispatch_gaps.empty()) return 0;
  auto g = dispatch_gaps;
  std::nth_element(g.begin(), g.begin() + static_cast<std::ptrdiff_t>(g.size() / 2), g.end());
  return static_cast<double>(g[g.size() / 2]) / 1e3;
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
