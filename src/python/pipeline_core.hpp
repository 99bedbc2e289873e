#pragma once
#include <unistd.h>
// The C++ half of rrfp.Pipeline: the work model, the hint, the Runtime and where its stages
// live (threads of this process, or one stage per process under mpirun). The Python half
// (rrfp/pipeline.py) owns the modules and the autograd; this half dispatches their tasks.
#include <ATen/ATen.h>
#include <ATen/ThreadLocalState.h>
#include <pybind11/pybind11.h>

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/hint.hpp"
#include "dist/c10d_world.hpp"
#include "dist/job.hpp"
#include "python/step_record.hpp"
#include "runtime/runtime.hpp"

namespace rrfp::py {

// What the Python constructor takes, checked once (each value's error names its argument).
struct CoreOptions {
  int pp = 4, vpp = 1, microbatches = 8;
  std::string placement = "loop", split_backward = "auto";
  std::string hint = "bfw", policy = "ready", comm = "async";
  int limit = 0, max_pending_w = 0;
  double timeout_s = 120;
  // How much later than the others a process may come to a call's gathers (all_gather with
  // `arrival`), to MPI's start-up, a new layout's splits and its shutdown: 0 never ends the
  // wait. rrfp.Pipeline makes it at least timeout_s (0 with it).
  double arrival_timeout_s = 1800;
  std::string transport = "inproc";  // inproc: every stage a thread here; mpi: one per process
  int dp = 1;                        // mpi: data-parallel replicas (mpirun -np pp * dp)
  // c10d: the torch.distributed ProcessGroups the stages talk over (one stage per rank;
  // `groups.pipeline` is this replica's) and, with dp > 1, this stage's across the replicas.
  C10dGroups groups;
};

// Ends multi-process use before the interpreter exits (rrfp registers it with atexit): every
// live pipeline's runtime is torn down, then the MPI world (a barrier, MPI_Finalize).
// `held_call`: the call another thread of this process is making on a pipeline over MPI
// (empty: none); the job is then ended, as its collectives and the end's would cross.
void shutdown_processes(const std::string& held_call = "");
// Ends every process of an MPI job at once (an uncaught exception in one of them: the others
// would wait for it until their timeout). Returns when MPI is not in use.
void abort_processes(int code);

// Why a closed pipeline refuses a step: close() runs from rrfp's exit handler only.
inline constexpr const char* kShutDown =
    "rrfp: the pipeline was shut down as the interpreter exits (rrfp's exit handler ran): no "
    "step runs after it";

class PipelineCore {
 public:
  explicit PipelineCore(const CoreOptions& o);
  ~PipelineCore();

  const WorkModel& model() const { return *model_; }
  // The stages this process runs (all of them in-process).
  std::vector<int> local_stages() const;
  int rank() const { return job_ ? job_->rank() : 0; }
  // Whether messages between stages hold tensors rather than bytes: without a job every stage
  // is a thread of this process (held_payload.hpp).
  bool holds_messages() const { return job_ == nullptr; }
  int world() const { return job_ ? job_->size() : 1; }
  int replica() const { return job_ ? job_->replica() : 0; }
  // Every process's `mine`, by job rank (just `mine` in one process): for what every rank must
  // learn from one, such as its replica's loss from the last stage. A collective.
  // `arrival`: where the processes meet after what each did alone between calls, waiting up to
  // the options' arrival_timeout_s rather than a step's timeout_s.
  std::vector<std::vector<double>> all_gather(const std::vector<double>& mine, bool arrival);
  // Every process's bytes (`mine`: a contiguous uint8 CPU tensor, of any length), by job rank,
  // as uint8 tensors ([mine] in one process): for what is not a few numbers, such as the
  // options each process was given. A collective over the job.
  std::vector<at::Tensor> all_gather_bytes(const at::Tensor& mine);
  // Every stage of this replica's bytes (`mine`: a contiguous uint8 CPU tensor), by stage, as
  // uint8 tensors ([mine] in one process): for parameters that several stages share. A
  // collective over the replica.
  std::vector<at::Tensor> replica_all_gather(const at::Tensor& mine);
  // The same stage's bytes in every replica, by replica ([mine] with one replica): for what the
  // replicas keep equal besides gradients (the first replica's state). A collective over the
  // stage's replicas.
  std::vector<at::Tensor> dp_all_gather(const at::Tensor& mine);
  // Replaces each of `parts` (contiguous one-dimensional CPU tensors of float32, float64,
  // float16 or bfloat16) by its sum over the replicas, in replica order, in its own dtype
  // (dist/replica_sum.hpp): the data-parallel gradient sum. A collective over the stage's
  // replicas; nothing to do with one replica.
  void dp_sum(const std::vector<at::Tensor>& parts);
  // Point to point among `peers`, stages of this replica this one among them (Job::exchange):
  // each peer's bytes in the order of `peers` ([mine] in one process).
  std::vector<at::Tensor> exchange(const at::Tensor& mine, const std::vector<int>& peers);
  // Tears the runtime down (shutdown_processes); the pipeline refuses further steps. A step
  // running meanwhile on another thread (a daemon thread's, as the interpreter exits) is
  // cancelled and waited for, at most kCloseWait: freed under it, its threads crashed the
  // process. A process forked while a step ran leaves its runtime alone (its threads are the
  // parent's: destroying it waited for them for ever).
  void close();
  // Whether this process made the pipeline: a process forked from it holds copies of its
  // runtime, transport and locks without their threads (and MPI's or Gloo's state it must not
  // touch); they are left as they are there, never closed or freed.
  bool made_here() const { return made_pid_ == static_cast<int>(::getpid()); }
  // Over MPI, the first pipeline of a layout splits the world's communicators for it, once
  // every process was found building one (the construction's gather): a no-op otherwise.
  void take_layout();
  // Makes each chunk's forwards run in microbatch order from now on (PipelineConfig::
  // ordered_forwards): asked for, or needed by the chunks, which exist only after the core
  // (they are built for its local stages); before set_runners. Throws HintError when the hint
  // is a list that runs some chunk's forwards out of that order.
  void order_forwards();
  // Sets the Python runner of each local stage; the runtime is built from them.
  void set_runners(const std::vector<pybind11::object>& runners);
  // One step, the GIL released while it runs. Ctrl-C (or any Python signal handler that
  // raises) cancels it: its exception is raised once every thread has stopped. A failed step
  // leaves nothing behind: the next one starts on a new runtime. `sizes`: each microbatch's
  // size (its input's elements) for the adaptive rule's entry order, or empty. `closing`
  // (None, or a callable returning a contiguous one-dimensional uint8 CPU tensor) is called
  // once the step has completed here; what it returns rides on the step's closing exchange,
  // which the processes make anyway (the step's loss: no collective of its own). Returns the
  // step's record and every process's bytes, by job rank ([this process's] in one process).
  std::pair<StepRecordPy, std::vector<at::Tensor>> run_step(
      int step, std::vector<std::int64_t> sizes = {},
      const pybind11::object& closing = pybind11::none());

 private:
  void build_runtime();

  CoreOptions opt_;
  std::unique_ptr<WorkModel> model_;
  std::unique_ptr<Hint> hint_;
  RuntimeOptions runtime_;
  std::int64_t arrival_ms_ = 0;   // arrival_timeout_s (0: none)
  Job* job_ = nullptr;            // the MPI world (owned by the process), the c10d job, or none
  std::unique_ptr<Job> own_job_;  // the c10d job
  // By local stage, held weakly as the programs hold them (PyStageProgram).
  std::vector<pybind11::weakref> runners_;
  std::vector<std::int64_t> sizes_;  // this step's microbatch sizes; the programs read them
  // torch's thread-local state of the thread that called this step (PyStageProgram::begin_step
  // gives it each stage's thread); none between steps, so that it holds no Python object.
  std::optional<at::ThreadLocalState> caller_;
  // Whether the runtime is still the one a step runs on (no step runs, or close() can touch
  // it): false in a process forked from the one that made it, or forked while a step ran.
  bool runtime_is_ours() const;
  // Takes the runtime out under step_mu_ (a close() may cancel it meanwhile) and destroys it.
  void drop_runtime();

  std::unique_ptr<Runtime> rt_;
  std::atomic<bool> closed_{false};
  // A step in flight, and the process it began in (getpid()); set and cleared by run_step.
  std::mutex step_mu_;
  std::condition_variable step_cv_;
  std::atomic<bool> stepping_{false};
  std::atomic<int> step_pid_{0};
  bool split_pending_ = false;  // take_layout() splits the MPI world's communicators
  const int made_pid_ = static_cast<int>(::getpid());
};

}  // namespace rrfp::py
