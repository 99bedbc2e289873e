#include <ATen/SavedTensorHooks.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include <algorithm>
#include <cstring>
#include <optional>

#include "comm/c10d_transport.hpp"
#include "core/clock.hpp"
#include "core/error.hpp"
#include "core/hint.hpp"
#include "core/hint_io.hpp"
#include "core/hint_shape.hpp"
#include "core/memory.hpp"
#include "core/modes.hpp"
#include "core/printable.hpp"
#include "python/bindings.hpp"
#include "python/py_program.hpp"
#include "python/step_record.hpp"
#include "python/tensor_payload.hpp"
#include "report/estimate.hpp"
#include "report/experiment.hpp"
#include "sim/trace_import.hpp"

namespace rrfp::py {
namespace pyb = pybind11;

void check_fits_here(const std::string& what, double tasks, TaskCost cost, double bytes,
                     const std::string& lower) {
  if (tasks > 0) cost.bytes = bytes / tasks;
  available_memory();  // a bad RRFP_MEMORY_LIMIT is a ValueError, not the run's MemoryError
  try {
    check_fits(what, tasks, cost, lower);
  } catch (const InputError& e) {
    set_error(PyExc_MemoryError, e.what());
    throw pyb::error_already_set();
  }
}

namespace {

// Python's signal handlers, run between a simulation's tasks (about every 16k, the simulator's
// progress calls) by a call that let the GIL go: their exception (KeyboardInterrupt) stops the
// run as this, and is raised once the GIL is back. A Ctrl-C was heeded only when the run ended,
// half a minute later, and rrfp.schedule held the GIL throughout, every other thread waiting.
struct PythonSignal : std::exception {};

// Every 50 ms at most, and only for a call from the main thread, where Python runs its
// handlers: taking the GIL at each callback (every 256 group tasks at TP 64) slowed a run 2.6x
// beside a busy Python thread, and elsewhere PyErr_CheckSignals does nothing.
class SignalPoll {
 public:
  SignalPoll()
      : main_(pyb::module_::import("threading")
                  .attr("current_thread")()
                  .is(pyb::module_::import("threading").attr("main_thread")())) {}
  void operator()() {
    if (!main_) return;
    const std::int64_t now = now_ns();
    if (now - last_ns_ < kEveryNs) return;
    last_ns_ = now;
    pyb::gil_scoped_acquire gil;
    if (PyErr_CheckSignals() != 0) throw PythonSignal();
  }

 private:
  static constexpr std::int64_t kEveryNs = 50'000'000;
  bool main_;
  std::int64_t last_ns_ = now_ns();
};

// Runs `work` without the GIL, Python's signals heeded through a SignalPoll.
template <class Work>
auto without_gil(Work&& work) {
  try {
    pyb::gil_scoped_release nogil;
    return work();
  } catch (const PythonSignal&) {
    throw pyb::error_already_set();  // the handler's exception, set while the GIL was held
  }
}

// The shape the arguments give (simulate's and schedule's defaults, P=4 V=1 M=8 loop, for those
// not given), a hint file's own for those not given, as the commands take it: whether any came
// from the file.
bool shape_of(HintShape& s, const std::string& hint, std::optional<int> pp, std::optional<int> vpp,
              std::optional<int> microbatches, const std::optional<std::string>& placement) {
  s = {pp.value_or(4), vpp.value_or(1), microbatches.value_or(8), placement.value_or("loop")};
  return !is_hint_name(hint) &&
         take_hint_file_shape(
             hint, s,
             {pp.has_value(), vpp.has_value(), microbatches.has_value(), placement.has_value()},
             "`vpp`");
}

// One simulated step: rrfp simulate's scenario runner with one run.
StepRecordPy simulate_one(std::optional<int> pp, std::optional<int> vpp,
                          std::optional<int> microbatches, std::optional<std::string> placement,
                          const std::string& split_backward, const std::string& workload,
                          const std::string& workload_file, const std::string& replay,
                          const std::string& hint, const std::string& policy, int limit,
                          int max_pending_w, const std::string& comm, std::uint64_t seed, int tp,
                          const std::string& tp_protocol, const std::string& ordered_forwards,
                          int step, const std::string& trace_format, double message_us,
                          bool workload_given, bool seed_given) {
  HintShape s;
  shape_of(s, hint, pp, vpp, microbatches, placement);
  Scenario sc;
  sc.cfg = make_config(s.pp, s.vpp, s.microbatches, s.placement, "off", hint);  // split: per run
  if (ordered_forwards != "auto" && ordered_forwards != "on" && ordered_forwards != "off")
    throw InputError("`ordered_forwards`: expected auto, on or off, got '" +
                     printable(ordered_forwards, 20) + "'");
  // auto: a replayed trace's step decides, as `rrfp simulate --replay` does (it was off, and a
  // step recorded with ordered forwards was predicted faster than rrfp could run it).
  sc.cfg.ordered_forwards = ordered_forwards == "on";
  sc.ordered_from_replay = ordered_forwards == "auto";
  sc.trace.step = step;
  sc.trace.format = trace_format;
  sc.trace.message_us = message_us;  // < 0: seen from when the consumers started
  check_trace_options(sc.trace);     // a CSV's replay reads neither: refused all the same
  sc.split_mode = split_backward;
  sc.tp = tp;
  sc.tp_protocol = parse_tp_protocol(tp_protocol);
  // Named as the command names it.
  sc.workload = workload_file.empty() ? workload_preset(workload)
                                      : read_workload_file(workload_file, workload, workload_given);
  sc.workload_name = workload_label(workload, workload_given, workload_file, !replay.empty());
  sc.replay_path = replay;
  sc.seed = seed;
  refuse_replaced_workload(sc, workload_given ? workload : "", workload_file, false);
  refuse_unused_seed(sc, seed_given);
  sc.limit = limit;
  sc.max_pending_w = max_pending_w;
  RunSpec spec;
  spec.hint = hint;
  spec.policy = parse_policy(policy);
  spec.comm = parse_comm(comm);
  // A W cap where the backward stays whole: refused, as `rrfp simulate --split-backward off
  // --max-pending-w` is (there are no W tasks to cap: it was taken and ignored). Only here is
  // auto resolved, a hint file's own split included. A hint that needs the split is refused
  // with its own message, as the command refuses it.
  if (max_pending_w > 0 && !resolve_split(split_backward, hint) && !hint_needs_split(hint))
    throw InputError(
        "`max_pending_w`: caps the W tasks a split backward defers; `split_backward` " +
        split_backward + " keeps the backward whole here" +
        (split_backward == "auto"
             ? " (it splits it for zb-*, bfw, adaptive and a hint file written with it)"
             : "") +
        ", so there are none (got " + std::to_string(max_pending_w) +
        "; give `split_backward` on to split it)");
  sc = with_replay_step(std::move(sc), {spec});
  check_spec(sc, spec);
  const PipelineConfig c = config_for(sc, spec);
  // Its StepRecord keeps every task's record, beside the simulation's own.
  const TaskCost cost = protocol_cost(kSimulateCost, tp, sc.tp_protocol);
  check_fits_here("simulate: " + std::to_string(static_cast<long long>(tasks_of(c, tp))) + " tasks",
                  tasks_of(c, tp), cost, simulated_bytes(c, tp, cost.bytes + kRecordBytes),
                  "`pp`, `microbatches` or `tp`");
  SignalPoll poll;
  sc.poll = std::ref(poll);
  StepRecordPy r;
  r.run = without_gil([&] { return run_scenario(sc, spec); });
  r.header = header_of(sc);
  return r;
}

// Each stage's tasks in the order they run at unit cost: a list hint's own order (fixed
// policy), a rule hint's ready order. `out`: where to write a list hint's task list, as
// `rrfp schedule show --out` writes it; "" for nowhere. A hint file's header gives each of
// pp, vpp, microbatches and placement not given (None), as under `rrfp schedule show`.
pyb::list schedule(const std::string& hint, std::optional<int> pp, std::optional<int> vpp,
                   std::optional<int> microbatches, std::optional<std::string> placement,
                   const std::string& split_backward, bool ordered_forwards,
                   const std::string& out) {
  HintShape s;
  const bool file = !is_hint_name(hint);
  // What a run too large should lower: the shape the file alone gave, not arguments never given.
  std::string lower = "`pp` or `microbatches`";
  if (shape_of(s, hint, pp, vpp, microbatches, placement) && !pp && !vpp && !microbatches)
    lower = "the shape, which '" + printable(hint, 100) + "' was written for";
  PipelineConfig c = make_config(s.pp, s.vpp, s.microbatches, s.placement, split_backward, hint);
  c.ordered_forwards = ordered_forwards;
  // A file too small to list the run's tasks, refused before they are built (as the command
  // refuses it).
  if (file) check_hint_file_holds(hint, c, "hint");
  validate(c);  // the shape's cap first: past it the tasks' count read -9223372036854775808
  // Its tasks' records are kept, with a tuple each for Python.
  check_fits_here("schedule: " + std::to_string(static_cast<long long>(tasks_of(c, 1))) + " tasks",
                  tasks_of(c, 1), kScheduleCost,
                  simulated_bytes(c, 1, kScheduleCost.bytes + kScheduleTupleBytes), lower);
  const WorkModel m(c);
  const Hint h = make_hint(hint, m);
  if (!out.empty() && !h.is_list())
    throw InputError("`out`: '" + h.name + "' is a rule hint, it has no task list");
  SimOptions opt;
  opt.arbiter.policy = h.is_list() ? Policy::Fixed : Policy::Ready;
  SignalPoll poll;
  opt.progress = [&poll](std::int64_t, std::int64_t) { poll(); };
  // A hint that cannot run: no file.
  const StepRecord r = without_gil([&] { return simulate(m, h, unit_cost_work(m), opt); });
  if (!out.empty())
    writing_file([&] {
      write_text_file(
          out, hint_path_is_json(out) ? write_hint_json(h.list(), m) : write_hint_text(h.list(), m),
          "`out`");
    });
  // Built here, so that memory running out while they are made raises MemoryError (pybind's
  // conversion of a returned vector said "Unable to convert call argument", a RuntimeError).
  pyb::list order;
  for (int s = 0; s < m.pp(); ++s)
    order.append(pyb::list());
  const pyb::str kinds[] = {pyb::str("F"), pyb::str("B"), pyb::str("W")};
  for (const TaskRecord& t : r.tasks)
    order[static_cast<std::size_t>(t.stage)].cast<pyb::list>().append(
        pyb::make_tuple(kinds[static_cast<int>(t.task.kind)], t.task.chunk, t.task.mb));
  return order;
}

// A tensor's message between stages as uint8 bytes, and back: for tests of the decoding's
// refusals (a corrupt header is a ProtocolError, never a crash).
at::Tensor payload_bytes(const at::Tensor& t) {
  const Payload p = encode_tensor(t, "payload");
  at::Tensor out = at::empty({static_cast<std::int64_t>(p.size())}, at::kByte);
  if (p.size() > 0) std::memcpy(out.data_ptr(), p.data(), p.size());
  return out;
}

at::Tensor payload_tensor(const at::Tensor& bytes) {
  const at::Tensor b = bytes.contiguous();
  if (b.scalar_type() != at::kByte || b.dim() != 1)
    throw InputError("`bytes`: a one-dimensional uint8 tensor");
  const auto* data = static_cast<const std::byte*>(b.data_ptr());
  // The tensor holds the copy's buffer: its strides as decoded.
  return decode_tensor(Payload::copy_of({data, static_cast<std::size_t>(b.numel())}), "payload");
}

}  // namespace

void bind_tools(pyb::module_& m) {
  // How many saved-tensor hooks (torch.autograd.graph.saved_tensors_hooks) this thread is
  // inside: a step's tasks run under its caller's, which a split backward would unpack twice.
  m.def("_saved_tensor_hooks_depth",
        [] { return at::SavedTensorDefaultHooks::get_tls_state().stack.size(); });
  m.def("_payload_bytes", &payload_bytes, pyb::arg("tensor"), "a tensor's message (tests)");
  m.def("_payload_tensor", &payload_tensor, pyb::arg("bytes"), "a message's tensor (tests)");
  m.def("_message_copy", &copy_keeping_layout, pyb::arg("tensor"),
        "the copy a message between stages of one process carries (rrfp/_device.py)");
  m.def("_c10d_release_closed", &C10dTransport::release_closed,
        "frees the c10d transports shut down whose peers have all closed theirs; how many are "
        "still kept (rrfp/_c10d.py)");
  m.def("_waiting_for", &note_waiting_for, pyb::arg("what"),
        "what the task running on this thread waits for, for the stuck report (\"\": nothing)");
  m.def("simulate", &simulate_one, pyb::kw_only(), pyb::arg("pp") = pyb::none(),
        pyb::arg("vpp") = pyb::none(), pyb::arg("microbatches") = pyb::none(),
        pyb::arg("placement") = pyb::none(), pyb::arg("split_backward") = "auto",
        pyb::arg("workload") = "multimodal", pyb::arg("workload_file") = "",
        pyb::arg("replay") = "", pyb::arg("hint") = "bf", pyb::arg("policy") = "ready",
        pyb::arg("limit") = 0, pyb::arg("max_pending_w") = 0, pyb::arg("comm") = "async",
        pyb::arg("seed") = 1, pyb::arg("tp") = 1, pyb::arg("tp_protocol") = "leader",
        pyb::arg("ordered_forwards") = "auto", pyb::arg("step") = -1,
        pyb::arg("trace_format") = "auto", pyb::arg("message_us") = -1.0,
        pyb::arg("workload_given") = false, pyb::arg("seed_given") = false,
        "Simulates one step (as `rrfp simulate`) and returns its StepRecord.");
  m.def("schedule", &schedule, pyb::kw_only(), pyb::arg("hint") = "1f1b",
        pyb::arg("pp") = pyb::none(), pyb::arg("vpp") = pyb::none(),
        pyb::arg("microbatches") = pyb::none(), pyb::arg("placement") = pyb::none(),
        pyb::arg("split_backward") = "auto", pyb::arg("ordered_forwards") = false,
        pyb::arg("out") = "",
        "Each stage's tasks, ('F'|'B'|'W', chunk, microbatch), in the order the hint runs "
        "them at unit cost.");
  m.def("hint_names", &hint_names, "every hint name a Pipeline or simulate accepts");
  m.attr("_max_tp") = kMaxTp;  // the largest `tp` simulate takes, for its argument checks
}

}  // namespace rrfp::py
