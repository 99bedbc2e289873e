#include "python/py_program.hpp"

#include <ATen/Parallel.h>

#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include <utility>

#include "core/error.hpp"
#include "core/format.hpp"
#include "python/held_payload.hpp"
#include "python/tensor_payload.hpp"

namespace rrfp::py {
namespace pyb = pybind11;

namespace {

std::string where(int chunk, int mb, char kind) {
  return std::string(1, kind) + " c" + std::to_string(chunk) + " m" + std::to_string(mb);
}

// Python's text of `o` in UTF-8: a lone surrogate (a file name that os.listdir decoded with
// surrogateescape) as \udcXX, and a NUL as \x00. The cast to UTF-8 refused the first, and the
// step's error said "Unable to cast Python instance to C++ type" for the task's own message;
// the second cut the message short. A str() that raises is said to have raised.
std::string utf8_text(pyb::handle o) {
  const auto s = pyb::reinterpret_steal<pyb::object>(PyObject_Str(o.ptr()));
  if (!s) {
    // An exception whose __str__ raises was reported as "E: ", its text just missing.
    PyObject *type = nullptr, *value = nullptr, *trace = nullptr;
    PyErr_Fetch(&type, &value, &trace);
    const std::string raised = type ? reinterpret_cast<PyTypeObject*>(type)->tp_name : "?";
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(trace);
    return "(its text could not be made: its __str__ raised " + raised + ")";
  }
  const auto b = pyb::reinterpret_steal<pyb::object>(
      PyUnicode_AsEncodedString(s.ptr(), "utf-8", "backslashreplace"));
  char* data = nullptr;
  Py_ssize_t n = 0;
  if (!b || PyBytes_AsStringAndSize(b.ptr(), &data, &n) != 0) {
    PyErr_Clear();
    return "";
  }
  std::string out;
  out.reserve(static_cast<size_t>(n));
  for (Py_ssize_t i = 0; i < n; ++i)
    if (data[i] == '\0')
      out.append("\\x00");
    else
      out.push_back(data[i]);
  return out;
}

// The program whose task runs on this thread (note_waiting_for's), set for the task's call.
thread_local PyStageProgram* t_running = nullptr;

class RunningHere {
 public:
  explicit RunningHere(PyStageProgram* p) : p_(p), outer_(std::exchange(t_running, p)) {}
  ~RunningHere() {
    t_running = outer_;
    try {
      p_->set_waiting_for({});
    } catch (...) {  // an allocation: no note is better than the end of the process
    }
  }
  RunningHere(const RunningHere&) = delete;
  RunningHere& operator=(const RunningHere&) = delete;

 private:
  PyStageProgram* p_;
  PyStageProgram* outer_;
};

// Calls a runner's method holding the GIL. A Python exception becomes an Error carrying its
// text (the runner keeps the exception object itself, to chain it when the step fails); the
// exception object is released here, under the GIL.
template <typename... Args>
pyb::object call(pyb::object& method, Args&&... args) {
  try {
    return method(std::forward<Args>(args)...);
  } catch (pyb::error_already_set& e) {
    // One line, "ValueError: text": the traceback stays with the exception the runner kept.
    throw Error(utf8_text(e.type().attr("__name__")) + ": " + utf8_text(e.value()));
  }
}

// A thread Python did not start gets a new Python thread state at every GIL acquisition, which
// is deleted again at the release (pybind11's gil_scoped_acquire, and PyGILState_Ensure alike,
// when nothing else holds one): a fresh thread state per task, and every thread-local of the
// interpreter and of torch's bindings with it. A stage's thread keeps one instead, from its
// first call into Python until the thread ends (its step's end), so that a task only takes
// and drops the GIL.
class ThreadStateKeeper {
 public:
  ThreadStateKeeper() : state_(PyGILState_Ensure()), tstate_(PyEval_SaveThread()) {}
  ~ThreadStateKeeper() {
    PyEval_RestoreThread(tstate_);
    PyGILState_Release(state_);  // the last hold: deletes the thread state, drops the GIL
  }
  ThreadStateKeeper(const ThreadStateKeeper&) = delete;
  ThreadStateKeeper& operator=(const ThreadStateKeeper&) = delete;

 private:
  PyGILState_STATE state_;
  PyThreadState* tstate_;
};

// Call without the GIL, before the first acquisition on this thread.
void keep_thread_state() {
  thread_local ThreadStateKeeper keeper;
}

// A stage's thread's own torch state, while it has the caller's (begin_step to end_step).
std::optional<at::ThreadLocalState>& own_state() {
  thread_local std::optional<at::ThreadLocalState> own;
  return own;
}

}  // namespace

PyStageProgram::PyStageProgram(pyb::object runner, const std::vector<std::int64_t>* sizes,
                               const std::optional<at::ThreadLocalState>* caller, bool hold)
    : sizes_(sizes), caller_(caller), hold_(hold) {
  const pyb::handle type = pyb::type::handle_of(runner);
  py_ = std::make_unique<Methods>(Methods{pyb::weakref(runner), type.attr("forward"),
                                          type.attr("backward"), type.attr("weight")});
}

pyb::object PyStageProgram::runner() const {
  pyb::object r = py_->runner();
  if (r.is_none())
    throw Error("rrfp: the pipeline this stage ran for is gone (its Python object was freed)");
  return r;
}

std::optional<std::int64_t> PyStageProgram::microbatch_size(int mb) const {
  if (!sizes_ || mb < 0 || mb >= static_cast<int>(sizes_->size())) return std::nullopt;
  return (*sizes_)[mb];
}

PyStageProgram::~PyStageProgram() {
  pyb::gil_scoped_acquire gil;
  py_.reset();
}

void PyStageProgram::begin_step(int step) {
  // On the stage's thread, which torch did not start: its kernels' OpenMP threads would number
  // the machine's default, not torch.get_num_threads() as on the caller's thread, and kernels
  // whose reductions split by thread count (a convolution's weight gradient) round otherwise
  // than a plain loop there. torch's own worker threads start the same way.
  at::init_num_threads();
  // And with the caller's thread-local state, as torch's autograd engine hands its worker
  // threads the state of the thread that called backward(): a profiler, torch function and
  // dispatch modes, saved-tensor hooks and autocast's keys around step() apply to the tasks as
  // to a plain loop's operations; each was ignored here, silently (a profile held none of the
  // stages' operations). rrfp/_caller.py keeps autocast to the forwards.
  if (caller_ && *caller_) {
    own_state().emplace();
    at::ThreadLocalState::setThreadLocalState(**caller_);
  }
  keep_thread_state();
  pyb::gil_scoped_acquire gil;
  pyb::object begin = runner().attr("begin_step");
  call(begin, step);
}

void PyStageProgram::end_step(int step) {
  // The thread's own state back, on the thread that took the caller's: the step's references
  // to the caller's modes and hooks end with it.
  if (std::optional<at::ThreadLocalState>& own = own_state()) {
    at::ThreadLocalState::setThreadLocalState(*own);
    own.reset();
  }
  pyb::gil_scoped_acquire gil;
  pyb::object r = py_->runner();
  if (r.is_none()) return;  // nothing of the step to free
  pyb::object end = r.attr("end_step");
  call(end, step);
}

// F and B alike: a tensor, a structure of tensors or nothing in, and the same out. A structure
// crosses to and from Python as (bytes, [tensors]): the runner packs and unpacks it.
Payload PyStageProgram::tensor_task(pyb::object& method, char kind, int chunk, int mb,
                                    const Payload& in) {
  const std::string task = where(chunk, mb, kind);
  at::Tensor x;
  std::optional<DecodedTree> tree;
  if (const HeldTensors* held = hold_ ? held_of(in) : nullptr) {
    if (held->structure)
      tree = DecodedTree{*held->structure, held->tensors};
    else
      x = held->tensors.at(0);
  } else if (!in.empty() && is_tree(in)) {
    tree = decode_tree(in, task);
  } else if (!in.empty()) {
    x = decode_tensor(in, task);
  }
  at::Tensor y;
  std::optional<std::string> structure;  // set when the output is a structure
  std::vector<at::Tensor> leaves;
  {
    // Python objects live only in this block: the GIL is taken once per task, and released
    // before the copies, which need no Python.
    keep_thread_state();
    pyb::gil_scoped_acquire gil;
    pyb::object arg =
        tree ? pyb::object(pyb::make_tuple(pyb::bytes(tree->structure), pyb::cast(tree->leaves)))
        : x.defined() ? pyb::cast(x)
                      : pyb::none();
    const RunningHere here(this);
    pyb::object out = call(method, runner(), chunk, mb, arg);
    if (pyb::isinstance<pyb::tuple>(out)) {
      const auto packed = out.cast<pyb::tuple>();
      structure = packed[0].cast<std::string>();
      leaves = packed[1].cast<std::vector<at::Tensor>>();
    } else if (!out.is_none()) {
      y = out.cast<at::Tensor>();
    }
  }
  try {
    if (hold_ && (structure || y.defined()))
      return hold_tensors(structure, structure ? leaves : std::vector<at::Tensor>{y}, task);
    if (structure) return encode_tree(*structure, leaves, task);
    return y.defined() ? encode_tensor(y, task) : Payload();
  } catch (const c10::Error& e) {
    // A copy LibTorch refuses (out of a meta tensor): its message, without the C++ frames
    // LibTorch appends, which the step's error repeated.
    throw Error(first_line(e.what()));
  }
}

Payload PyStageProgram::forward(TaskContext&, int chunk, int mb, Payload input) {
  return tensor_task(py_->forward, 'F', chunk, mb, input);
}

Payload PyStageProgram::backward(TaskContext&, int chunk, int mb, Payload grad) {
  return tensor_task(py_->backward, 'B', chunk, mb, grad);
}

void PyStageProgram::weight_grad(TaskContext&, int chunk, int mb) {
  keep_thread_state();
  pyb::gil_scoped_acquire gil;
  const RunningHere here(this);
  call(py_->weight, runner(), chunk, mb);
}

std::string PyStageProgram::waiting_for() const {
  const std::lock_guard lk(waiting_mu_);
  return waiting_for_;
}

void PyStageProgram::set_waiting_for(std::string what) {
  const std::lock_guard lk(waiting_mu_);
  waiting_for_ = std::move(what);
}

void note_waiting_for(std::string what) {
  if (t_running != nullptr) t_running->set_waiting_for(std::move(what));
}

}  // namespace rrfp::py
