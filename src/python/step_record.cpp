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

namespace {

// What writing `what` of the record's tasks takes, checked as the CLI checks --trace and --svg
// (a run it refused was written here at twice RRFP_MEMORY_LIMIT); MemoryError where it does
// not fit.
void check_write_fits(const StepRecordPy& r, const char* what, TaskCost cost) {
  const double n = static_cast<double>(r.run.result.tasks.size());
  check_fits_here(std::string("StepRecord.") + what + ": " +
                      std::to_string(r.run.result.tasks.size()) + " tasks",
                  n, cost, n * cost.bytes, "`pp`, `microbatches` or `tp`");
}

}  // namespace

// The writes let other Python threads run (a Pipeline's stages among them): they waited for
// the whole write, 12 s at P=8 M=50000.
void StepRecordPy::save_trace(const std::string& path) const {
  check_write_fits(*this, "save_trace", kTraceCost);
  // Named as the method's argument: `trace`, the command's flag, is no name here.
  writing_file([&] {
    pybind11::gil_scoped_release nogil;
    write_text_file(path, trace_file_bytes(path, chrome_trace({run})), "`path`");
  });
}

void StepRecordPy::save_svg(const std::string& path) const {
  check_write_fits(*this, "save_svg", kSvgCost);
  writing_file([&] {
    pybind11::gil_scoped_release nogil;
    write_text_file(path, svg_timeline(header, {run}), "`path`");
  });
}

}  // namespace rrfp::py
