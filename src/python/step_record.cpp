#include "python/step_record.hpp"

#include <pybind11/pybind11.h>

#include <algorithm>
#include <vector>

#include "core/error.hpp"
#include "core/json_input.hpp"
#include "python/bindings.hpp"
#include "sim/metrics.hpp"

namespace rrfp::py {

// The median: of an even count, the mean of the middle two (percentile's 0.5 is the upper one).
double StepRecordPy::dispatch_gap_us() const {
  if (dispatch_gaps.empty()) return 0;
  std::vector<std::int64_t> v = dispatch_gaps;
  const std::size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid), v.end());
  double m = static_cast<double>(v[mid]);
  if (v.size() % 2 == 0)
    m = (m + static_cast<double>(*std::max_element(v.begin(), v.begin() + mid))) / 2;
  return m / 1e3;
}

std::string StepRecordPy::table() const {
  return format_table(header, {run}, true);
}

std::string StepRecordPy::json() const {
  return json_text(to_json(header, {run}));
}

namespace {

// A file that could not be written raises OSError, as Python's own writes do (a full disk
// raised RuntimeError, a missing folder ValueError, which `except OSError` let through).
template <class Write>
void writing_file(Write&& write) {
  try {
    write();
  } catch (const Error& e) {
    set_error(PyExc_OSError, e.what());
    throw pybind11::error_already_set();
  }
}

}  // namespace

void StepRecordPy::save_trace(const std::string& path) const {
  writing_file([&] { write_chrome_trace(path, {run}); });
}

void StepRecordPy::save_svg(const std::string& path) const {
  writing_file([&] { write_svg(path, header, {run}); });
}

}  // namespace rrfp::py
