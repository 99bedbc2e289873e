// rrfp._rrfp: the extension behind `import rrfp` (the package in rrfp/ wraps it). Errors
// become the matching Python exceptions: bad arguments ValueError, a stalled step TimeoutError,
// a failed task rrfp.StageError (the package chains the stage's own exception to it).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include "core/error.hpp"
#include "python/bindings.hpp"
#include "runtime/errors.hpp"

namespace pyb = pybind11;

PYBIND11_MODULE(_rrfp, m) {
  m.doc() = "rrfp: readiness-first pipeline-parallel runtime (C++ core)";
  static pyb::exception<rrfp::TaskError> stage_error(m, "StageError", PyExc_RuntimeError);
  static pyb::exception<rrfp::ProtocolError> protocol_error(m, "ProtocolError", PyExc_RuntimeError);
  pyb::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const rrfp::InputError& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const rrfp::StallError& e) {
      PyErr_SetString(PyExc_TimeoutError, e.what());
    } catch (const rrfp::TaskError& e) {
      stage_error(e.what());
    } catch (const rrfp::ProtocolError& e) {
      protocol_error(e.what());
    }
  });
  rrfp::py::bind_records(m);
  rrfp::py::bind_pipeline(m);
  rrfp::py::bind_tools(m);
  rrfp::py::bind_graph(m);
}
