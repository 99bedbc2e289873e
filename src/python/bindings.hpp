#pragma once
// The pieces of the extension module, one file each.
#include <pybind11/pybind11.h>

namespace rrfp::py {

void bind_records(pybind11::module_& m);   // StepRecord (bind_records.cpp)
void bind_pipeline(pybind11::module_& m);  // PipelineCore (bind_pipeline.cpp)
void bind_tools(pybind11::module_& m);     // simulate, schedule, hint names (bind_tools.cpp)
void bind_graph(pybind11::module_& m);     // a backward graph's foreign leaves (bind_graph.cpp)

}  // namespace rrfp::py
