// rrfp._rrfp: the extension behind `import rrfp` (the package in rrfp/ wraps it). Errors
// become the matching Python exceptions: bad arguments ValueError, a stalled step TimeoutError,
// a failed task rrfp.StageError (the package chains the stage's own exception to it).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include <cstring>

#include "core/error.hpp"
#include "core/input_file.hpp"
#include "python/bindings.hpp"
#include "runtime/errors.hpp"
#include "runtime/runtime.hpp"

namespace pyb = pybind11;

namespace rrfp::py {

pybind11::str text(const std::string& s) {
  PyObject* o = PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), "replace");
  if (o == nullptr) throw pybind11::error_already_set();
  return pybind11::reinterpret_steal<pybind11::str>(o);
}

void set_error(PyObject* type, const char* what) {
  PyObject* msg = PyUnicode_DecodeUTF8(what, static_cast<Py_ssize_t>(std::strlen(what)), "replace");
  if (msg == nullptr) return;  // the decoding's own error is raised instead
  PyErr_SetObject(type, msg);
  Py_DECREF(msg);
}

}  // namespace rrfp::py

PYBIND11_MODULE(_rrfp, m) {
  m.doc() = "rrfp: readiness-first pipeline-parallel runtime (C++ core)";
  // What a benchmark states beside its numbers (a Debug build's times mean nothing).
  m.attr("build_type") = RRFP_BUILD_TYPE;
  // How much longer than `timeout` a c10d pipeline's groups wait (runtime.hpp's kJobGraceMs).
  m.attr("job_grace_s") = static_cast<double>(rrfp::kJobGraceMs) / 1000;
  static pyb::exception<rrfp::TaskError> stage_error(m, "StageError", PyExc_RuntimeError);
  static pyb::exception<rrfp::ProtocolError> protocol_error(m, "ProtocolError", PyExc_RuntimeError);
  stage_error.attr("__doc__") =
      "A task of a stage failed: its message names the stage, the task and what it raised (the "
      "original exception is its __cause__ where there is one).";
  protocol_error.attr("__doc__") =
      "A message or protocol step that fits no state it could be in (an input arriving twice, "
      "an acknowledgement without an offer, a wrong size): a bug, or processes that called the "
      "pipeline apart.";
  pyb::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const rrfp::MissingInputError& e) {
      rrfp::py::set_error(PyExc_FileNotFoundError, e.what());
    } catch (const rrfp::InputIsDirectoryError& e) {
      rrfp::py::set_error(PyExc_IsADirectoryError, e.what());
    } catch (const rrfp::InputError& e) {
      rrfp::py::set_error(PyExc_ValueError, e.what());
    } catch (const rrfp::StallError& e) {
      rrfp::py::set_error(PyExc_TimeoutError, e.what());
    } catch (const rrfp::TaskError& e) {
      rrfp::py::set_error(stage_error.ptr(), e.what());
    } catch (const rrfp::ProtocolError& e) {
      rrfp::py::set_error(protocol_error.ptr(), e.what());
    }
  });
  rrfp::py::bind_records(m);
  rrfp::py::bind_pipeline(m);
  rrfp::py::bind_tools(m);
  rrfp::py::bind_graph(m);
}
