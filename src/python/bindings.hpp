#pragma once
// The pieces of the extension module, one file each.
#include <pybind11/pybind11.h>

#include <string>

#include "core/error.hpp"
#include "report/estimate.hpp"

namespace rrfp::py {

void bind_records(pybind11::module_& m);   // StepRecord (bind_records.cpp)
void bind_pipeline(pybind11::module_& m);  // PipelineCore (bind_pipeline.cpp)
void bind_tools(pybind11::module_& m);     // simulate, schedule, hint names (bind_tools.cpp)
void bind_graph(pybind11::module_& m);     // a backward graph's foreign leaves (bind_graph.cpp)

// `s` as a Python str, each byte that is not well-formed UTF-8 as U+FFFD, as the JSON outputs
// write it: a hint file named in Latin-1 put its bytes in a record's label, and pybind11's
// strict decoding made its repr, label and table raise UnicodeDecodeError.
pybind11::str text(const std::string& s);

// Raises `type` with `what`, decoded as text() does; every error the extension raises itself
// goes through it (PyErr_SetString lost a message naming such a file whole: a bare ValueError).
void set_error(PyObject* type, const char* what);

// A run too large for this machine, refused before it starts with MemoryError, as the CLI
// refuses it (rrfp.simulate(pp=4096, microbatches=12200) ran for half a minute, then raised
// std::bad_alloc; smaller ones took memory past RRFP_MEMORY_LIMIT). `bytes`: what `tasks`
// tasks hold in all.
void check_fits_here(const std::string& what, double tasks, TaskCost cost, double bytes,
                     const std::string& lower);

// Runs `write`; a file it could not write (an Error) raises OSError, as Python's own writes do
// (a full disk raised RuntimeError, a missing folder ValueError, which `except OSError` let
// through).
template <class Write>
void writing_file(Write&& write) {
  try {
    write();
  } catch (const Error& e) {
    set_error(PyExc_OSError, e.what());
    throw pybind11::error_already_set();
  }
}

}  // namespace rrfp::py
