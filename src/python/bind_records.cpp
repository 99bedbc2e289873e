#include <pybind11/stl.h>

#include "python/bindings.hpp"
#include "python/step_record.hpp"

namespace rrfp::py {
namespace pyb = pybind11;

void bind_records(pyb::module_& m) {
  pyb::class_<StepRecordPy>(m, "StepRecord",
                            R"(One step, simulated or measured. Times in seconds.)")
      .def_property_readonly("makespan", &StepRecordPy::makespan)
      .def_property_readonly("lower_bound", &StepRecordPy::lower_bound,
                             "what no schedule of these durations can beat")
      .def_property_readonly("bubble",
                             [](const StepRecordPy& r) { return r.run.metrics.bubble_ratio; })
      .def_property_readonly("efficiency",
                             [](const StepRecordPy& r) { return r.run.metrics.efficiency; })
      .def_property_readonly("dispatch_gap_us", &StepRecordPy::dispatch_gap_us,
                             "median time from a task's end to the next ready task's start")
      .def_property_readonly(
          "dispatch_gaps_us",
          [](const StepRecordPy& r) {
            std::vector<double> us;
            us.reserve(r.run.dispatch_gaps.size());
            for (auto ns : r.run.dispatch_gaps)
              us.push_back(static_cast<double>(ns) / 1e3);
            return us;
          },
          "every dispatch gap of the step (µs), in no particular order")
      .def_property_readonly("label", [](const StepRecordPy& r) { return text(r.run.label); })
      .def_property_readonly(
          "stages",
          [](const StepRecordPy& r) {
            pyb::list out;
            for (const StageMetrics& s : r.run.metrics.stages) {
              pyb::dict d;
              d["busy"] = static_cast<double>(s.busy) / 1e9;
              d["blocked"] = static_cast<double>(s.blocked) / 1e9;
              d["idle"] = static_cast<double>(s.idle) / 1e9;
              d["peak_d"] = s.peak_d;
              d["peak_pending_w"] = s.peak_pending_w;
              out.append(d);
            }
            return out;
          },
          "per stage: busy, blocked and idle seconds, peak D and peak pending W")
      .def_property_readonly(
          "tasks",
          [](const StepRecordPy& r) {
            // About 190 bytes a task (a tuple, its task's name, two floats), built on each
            // access: a record the run's check let through needed 12.7 GB more here, unchecked,
            // and a Ctrl-C waited for it.
            const auto& tasks = r.run.result.tasks;
            const double n = static_cast<double>(tasks.size());
            check_fits_here(
                "StepRecord.tasks: " + std::to_string(tasks.size()) + " tuples", n,
                TaskCost{kTaskTupleBytes, 1e-7}, n * kTaskTupleBytes,
                "`pp`, `microbatches` or `tp`, or read the record's table() or json() instead");
            pyb::list out;
            for (std::size_t i = 0; i < tasks.size(); ++i) {
              if (i % 65536 == 65535 && PyErr_CheckSignals() != 0) throw pyb::error_already_set();
              const TaskRecord& t = tasks[i];
              out.append(pyb::make_tuple(t.stage, to_string(t.task),
                                         static_cast<double>(t.start) / 1e9,
                                         static_cast<double>(t.compute_end) / 1e9));
            }
            return out;
          },
          "(stage, task, start, end) of every task, in seconds from the step's start; with "
          "tp > 1, once for each TP rank of its stage")
      .def("table", [](const StepRecordPy& r) { return text(r.table()); })
      .def("json", &StepRecordPy::json)
      .def("save_trace", &StepRecordPy::save_trace, pyb::arg("path"),
           "a Chrome trace (chrome://tracing, Perfetto), gzipped where `path` ends in .gz")
      .def("save_svg", &StepRecordPy::save_svg, pyb::arg("path"), "an SVG timeline")
      .def("__repr__", [](const StepRecordPy& r) {
        return text("<rrfp.StepRecord " + r.run.label + ": makespan " +
                    fmt("%.3f", r.makespan() * 1e3) + " ms, bubble " +
                    fmt("%.1f", 100 * r.run.metrics.bubble_ratio) + "%>");
      });
}

}  // namespace rrfp::py
