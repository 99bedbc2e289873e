#pragma once
// A StageProgram whose tasks are methods of a Python object (rrfp/_stage.py's StageRunner):
// forward(chunk, mb, x), backward(chunk, mb, g), weight(chunk, mb), begin_step(step),
// end_step(step). The runtime calls it from the stage's compute thread; the thread holds the
// GIL only while it is in Python, so stages overlap wherever torch releases the GIL (inside its
// kernels and autograd). Tensors cross stages as encoded payloads (tensor_payload.hpp), or, where
// every stage is in this process, as payloads that hold copies of them (held_payload.hpp).
#include <ATen/ThreadLocalState.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "runtime/program.hpp"

namespace rrfp::py {

class PyStageProgram final : public StageProgram {
 public:
  // Refers to `runner` weakly (the Python pipeline holds it): a strong reference from here
  // closed a cycle Python's collector cannot see into (the runner's step data holds the user's
  // loss_fn or GradScaler, which may hold the pipeline, which holds this), and every such
  // pipeline stayed alive for good. Call with the GIL held. `sizes` (the pipeline's, set before
  // each step): the step's microbatch sizes, or empty. `hold`: every consumer of this stage's
  // outputs is in this process, so they travel as tensors, not bytes.
  // `caller` (the pipeline's, set as each step starts): torch's thread-local state of the
  // thread that called the step, which each step's thread takes (begin_step).
  PyStageProgram(pybind11::object runner, const std::vector<std::int64_t>* sizes,
                 const std::optional<at::ThreadLocalState>* caller, bool hold);
  ~PyStageProgram() override;  // drops the reference under the GIL

  void begin_step(int step) override;
  void end_step(int step) override;
  Payload forward(TaskContext& ctx, int chunk, int mb, Payload input) override;
  Payload backward(TaskContext& ctx, int chunk, int mb, Payload grad) override;
  void weight_grad(TaskContext& ctx, int chunk, int mb) override;
  std::optional<std::int64_t> microbatch_size(int mb) const override;
  std::string waiting_for() const override;
  // Called by the running task's Python half (note_waiting_for).
  void set_waiting_for(std::string what);

 private:
  Payload tensor_task(pybind11::object& method, char kind, int chunk, int mb, const Payload& in);
  // The runner, held for the call; throws where it is gone. Call with the GIL held.
  pybind11::object runner() const;

  // The runner and its class's task functions, looked up once: looking a method up by name
  // made a string and a bound method per task (a bound method would hold the runner, too).
  struct Methods {
    pybind11::weakref runner;
    pybind11::object forward, backward, weight;
  };
  std::unique_ptr<Methods> py_;
  const std::vector<std::int64_t>* sizes_;
  const std::optional<at::ThreadLocalState>* caller_;
  bool hold_;
  mutable std::mutex waiting_mu_;  // the watchdog reads what the task's thread writes
  std::string waiting_for_;
};

// What the task running on this thread waits for ("": nothing), shown by the stuck report;
// ignored outside a task (rrfp._rrfp._waiting_for, from rrfp/_seed.py).
void note_waiting_for(std::string what);

}  // namespace rrfp::py
