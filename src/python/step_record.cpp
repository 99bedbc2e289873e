#include "python/step_record.hpp"

#include <pybind11/pybind11.h>

#include <algorithm>
#include <vector>

#include "core/error.hpp"
#include "core/json_input.hpp"
#include "python/bindings.hpp"
#include "sim/metrics.hpp"
#include "sim/trace_import.hpp"

namespace rrfp::py {

double StepRecordPy::dispatch_gap_us() const {
  return median(run.dispatch_gaps) / 1e3;
}

std::string StepRecordPy::table() const {
  return format_table(header, {run}, true);
}

std::string StepRecordPy::json() const {
  return json_text(to_json(header, {run}));
}

void StepRecordPy::save_trace(const std::string& path) const {
  // Named as the method's argument: `trace`, the command's flag, is no name here.
  writing_file(
      [&] { write_text_file(path, trace_file_bytes(path, chrome_trace({run})), "`path`"); });
}

void StepRecordPy::save_svg(const std::string& path) const {
  writing_file([&] { write_text_file(path, svg_timeline(header, {run}), "`path`"); });
}

}  // namespace rrfp::py
