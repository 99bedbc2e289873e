#include "python/step_record.hpp"

#include <pybind11/pybind11.h>

#include <algorithm>
#include <vector>

#include "core/error.hpp"
#include "core/json_input.hpp"
#include "python/bindings.hpp"
#include "sim/metrics.hpp"

namespace rrfp::py {

double StepRecordPy::dispatch_gap_us() const {
  return median(dispatch_gaps) / 1e3;
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
