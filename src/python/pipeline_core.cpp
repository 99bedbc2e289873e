#include "python/pipeline_core.hpp"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <functional>
#include <mutex>

#include <unistd.h>

#include "core/error.hpp"
#include "core/mpirun_env.hpp"
#include "dist/c10d_world.hpp"
#include "python/py_program.hpp"
#include "report/experiment.hpp"
#include "sim/hint_check.hpp"
#ifdef RRFP_HAVE_MPI
#include "dist/mpi_world.hpp"
#endif

namespace rrfp::py {
namespace pyb = pybind11;

namespace {

// Multi-process state of this process: the MPI world (MPI starts once per process) and the
// pipelines alive, so that shutdown_processes can tear their runtimes down first.
struct Processes {
  std::mutex mu;
#ifdef RRFP_HAVE_MPI
  std::unique_ptr<MpiWorld> world;
#endif
  std::vector<PipelineCore*> live;
  // The pipelines alive over the MPI world, and its layout: the world's communicators follow
  // one layout at a time, which a pipeline of another layout would re-split under them.
  std::vector<const PipelineCore*> on_mpi;
  JobLayout mpi_layout;
  bool shut = false;
  // The process the world and pipelines belong to: a process forked from it (a data loader's
  // worker, a user's os.fork()) ends without touching them. Ending them there joined the
  // parent's MPI job (the child's end of the script ended the parent's healthy job) or crashed.
  const int pid = static_cast<int>(::getpid());
};

Processes& processes() {
  static Processes p;
  return p;
}

#ifdef RRFP_HAVE_MPI
// Every process makes the same pipelines in the same order, so all refuse alike. A second
// pipeline of another layout re-split the communicators the first one's replica sums and
// gathers use: its next step read another stage's chunks (a segfault).
void refuse_other_layout(const Processes& p, const JobLayout& want) {
  if (p.on_mpi.empty() || (want.pp == p.mpi_layout.pp && want.dp == p.mpi_layout.dp)) return;
  throw InputError("`pp` and `dp`: " + std::to_string(p.on_mpi.size()) + " pipeline(s) of pp=" +
                   std::to_string(p.mpi_layout.pp) + ", dp=" + std::to_string(p.mpi_layout.dp) +
                   " are alive over this MPI job, whose processes take one layout at a "
                   "time: give this one the same pp and dp, or delete the others first");
}
#endif

Job* mpi_job(const CoreOptions& o, std::int64_t timeout_ms, std::int64_t arrival_ms,
             const PipelineCore* self, bool& split_pending) {
#ifdef RRFP_HAVE_MPI
  if (!launched_by_mpirun())
    throw InputError("`transport` mpi: start the script under mpirun (see docs/python.md)");
  Processes& p = processes();
  // The world a forked process holds is its parent's: a pipeline made on it joined that job.
  if (p.pid != static_cast<int>(::getpid()))
    throw InputError(
        "`transport` mpi: this process was forked from one of an MPI job, whose "
        "MPI is that process's; make an in-process pipeline here "
        "(transport='inproc')");
  // The GIL first, then the lock (as take_layout): MPI start-up waits for every process, and a
  // thread holding the GIL and waiting for the lock (another pipeline's construction or
  // destructor) blocked this one's return for ever.
  pyb::gil_scoped_release nogil;
  std::lock_guard lk(p.mu);
  if (p.shut) throw Error("rrfp: MPI has been shut down in this process");
  if (!p.world) {
    MpiWorldOptions wo;
    // The grace a stalled process takes to say what stalled, as over c10d (kJobGraceMs): a
    // process done with its step ended the job in the closing exchange at `timeout` first.
    wo.timeout_ms = timeout_ms > 0 ? timeout_ms + kJobGraceMs : 0;
    wo.limit_name = "`timeout` and " + std::to_string(kJobGraceMs / 1000) + " s";
    wo.arrival_ms = arrival_ms;
    p.world = std::make_unique<MpiWorld>(std::move(wo));
  }
  const JobLayout want{o.pp, 1, o.dp};
  refuse_other_layout(p, want);
  if (!p.on_mpi.empty()) {     // the same layout: the communicators stay
    p.on_mpi.push_back(self);  // under the same lock as the look (another may leave meanwhile)
    return p.world.get();
  }
  // The first pipeline of a layout splits the world's communicators, but only once every
  // process is found building one (take_layout(), after the construction's gather): split
  // here, a process that built a pipeline while another stepped its last one met that step's
  // gather in MPI_Comm_split, and both waited until `arrival_timeout`. It counts among the
  // pipelines on the layout only then: one whose construction failed before (a gather that
  // found the processes apart) left a layout recorded that no communicator had.
  split_pending = true;
  return p.world.get();
#else
  (void)o;
  (void)timeout_ms;
  (void)arrival_ms;
  (void)self;
  (void)split_pending;
  throw InputError("`transport` mpi: this rrfp was built without Open MPI");
#endif
}

}  // namespace

PipelineCore::PipelineCore(const CoreOptions& o) : opt_(o) {
  const TransportKind tr = parse_transport(
      o.transport, {TransportKind::Inproc, TransportKind::Mpi, TransportKind::C10d});
  if (tr == TransportKind::C10d && !o.groups.pipeline)
    throw InputError("`group`: transport c10d needs a torch.distributed process group");
  if (o.dp < 1)
    throw InputError("`dp`: must be at least 1 (one replica: no data parallelism), got " +
                     std::to_string(o.dp));
  if (o.dp > 1 && tr == TransportKind::Inproc)
    throw InputError("`dp`: data-parallel replicas need `transport` mpi or c10d (got dp " +
                     std::to_string(o.dp) + ")");
  if (tr == TransportKind::C10d && (o.dp > 1) != static_cast<bool>(o.groups.replicas))
    throw InputError("`dp_group`: give the replicas' group exactly when dp > 1");
  model_ = std::make_unique<WorkModel>(
      make_config(o.pp, o.vpp, o.microbatches, o.placement, o.split_backward, o.hint));
  hint_ = std::make_unique<Hint>(make_hint(o.hint, *model_));
  runtime_.arbiter.policy = parse_policy(o.policy);
  runtime_.arbiter.limit = o.limit;
  runtime_.arbiter.max_pending_w = o.max_pending_w;
  runtime_.comm = parse_comm(o.comm);
  runtime_.timeout_ms = timeout_ms_of(o.timeout_s);
  arrival_ms_ = timeout_ms_of(o.arrival_timeout_s, "`arrival_timeout`");
  validate(runtime_);
  resolve_options(runtime_.arbiter, *hint_, *model_);  // a bad limit fails here, not mid-step
  // A hint file whose order deadlocks the blocking rendezvous: refused here, where a step
  // stalled on it until the watchdog.
  refuse_blocking_deadlock(*model_, *hint_, runtime_.arbiter.policy, runtime_.comm);
  if (tr == TransportKind::Mpi)
    job_ = mpi_job(o, runtime_.timeout_ms, arrival_ms_, this, split_pending_);
  if (tr == TransportKind::C10d) {
    own_job_ = std::make_unique<C10dWorld>(
        o.groups, std::chrono::milliseconds(runtime_.timeout_ms ? runtime_.timeout_ms : 1'800'000));
    own_job_->set_layout(JobLayout{o.pp, 1, o.dp});
    job_ = own_job_.get();
  }
  Processes& p = processes();
  std::lock_guard lk(p.mu);
  p.live.push_back(this);
}

void PipelineCore::take_layout() {
#ifdef RRFP_HAVE_MPI
  if (!split_pending_) return;
  Processes& p = processes();
  // The GIL first, then the lock: held the other way round, a thread holding the GIL and
  // waiting for the lock (a pipeline's destructor) and this one waiting for the GIL blocked.
  pyb::gil_scoped_release nogil;  // the split waits for every process
  std::lock_guard lk(p.mu);
  const JobLayout want{opt_.pp, 1, opt_.dp};
  refuse_other_layout(p, want);  // another thread's pipeline took one meanwhile
  if (p.on_mpi.empty()) {
    p.world->set_layout(want);
    p.mpi_layout = want;
  }
  p.on_mpi.push_back(this);
  split_pending_ = false;
#endif
}

void PipelineCore::order_forwards() {
  if (rt_ || !runners_.empty()) throw Error("order_forwards: the runtime is already built");
  if (model_->config().ordered_forwards) return;
  PipelineConfig cfg = model_->config();
  cfg.ordered_forwards = true;
  auto model = std::make_unique<WorkModel>(cfg);
  auto hint = std::make_unique<Hint>(make_hint(opt_.hint, *model));
  resolve_options(runtime_.arbiter, *hint, *model);
  model_ = std::move(model);
  hint_ = std::move(hint);
}

namespace {

// How long close() waits for a step on another thread to end once cancelled: its running task
// ends first (Python's tasks are not cut short).
constexpr auto kCloseWait = std::chrono::seconds(30);

}  // namespace

bool PipelineCore::runtime_is_ours() const {
  return made_here() && (!stepping_.load() || step_pid_.load() == static_cast<int>(::getpid()));
}

void PipelineCore::drop_runtime() {
  std::unique_ptr<Runtime> dead;
  {
    std::lock_guard lk(step_mu_);
    dead = std::move(rt_);
  }
}

void PipelineCore::close() {
  if (!made_here()) {  // step_mu_ may have been held by a thread the fork did not copy
    closed_ = true;
    (void)rt_.release();
    return;
  }
  pyb::gil_scoped_release nogil;  // a step on another thread takes it to end
  std::unique_lock lk(step_mu_);
  closed_ = true;
  if (!runtime_is_ours()) {
    (void)rt_.release();  // the parent's threads would be waited for: left as it is
    return;
  }
  if (stepping_.load()) {
    if (rt_) rt_->cancel(std::make_exception_ptr(Error(kShutDown)));
    if (!step_cv_.wait_for(lk, kCloseWait, [&] { return !stepping_.load(); })) {
      std::fprintf(stderr,
                   "rrfp: a step still running %lld s after its pipeline was shut "
                   "down is left as it is\n",
                   static_cast<long long>(kCloseWait.count()));
      (void)rt_.release();  // freed under its threads, it crashed the process
      return;
    }
  }
  std::unique_ptr<Runtime> dead = std::move(rt_);
  lk.unlock();
}

#ifdef RRFP_HAVE_MPI
// The end of the script is a call too. A process that ended it while another made one of the
// pipeline's calls (a step() more than this one made) met it in no collective: each waited out
// `arrival_timeout` (30 minutes by default), in the closing barrier and in the call's gather,
// saying only that a process was late. Every process ends in the gather that opens each call
// (rrfp/_calls.py), with the end's code; one making a call finds the difference there and
// raises, and here it is said and the job ended, as an uncaught exception ends it.
void end_of_script(MpiWorld& w) {
  constexpr double kEndCode = 9;  // _calls.py's _CALLS
  const double mine[] = {kEndCode, -1};
  const auto every = w.ending_gather(mine);
  std::vector<int> other;
  for (int r = 0; r < static_cast<int>(every.size()); ++r)
    if (every[r].empty() || every[r][0] != kEndCode) other.push_back(r);
  if (other.empty()) return;
  std::fprintf(stderr,
               "rrfp: mpi rank %d: the script ended while mpi rank(s) %s made a call of the "
               "pipeline (a step() or another call this process did not make); every process "
               "must make the same calls; ending the job\n",
               w.rank(), rank_list(other).c_str());
  std::fflush(stderr);
  w.abort(1);
}
#endif

void shutdown_processes(const std::string& held_call) {
  (void)held_call;  // without MPI
  Processes& p = processes();
  if (p.pid != static_cast<int>(::getpid())) {  // a forked process: see Processes::pid
    p.shut = true;
#ifdef RRFP_HAVE_MPI
    (void)p.world.release();
#endif
    // Its own pipelines (in-process ones it made) end as anywhere: a daemon thread's step is
    // cancelled before the interpreter frees the runtime under its threads.
    for (PipelineCore* c : std::vector<PipelineCore*>(p.live))
      if (c->made_here()) c->close();
    return;
  }
  std::vector<PipelineCore*> live;
  {
    std::lock_guard lk(p.mu);
    if (p.shut) return;
    p.shut = true;
    live = p.live;
  }
#ifdef RRFP_HAVE_MPI
  if (p.world && !held_call.empty()) {
    // A daemon thread stepping as the script ends: its step's collectives and the end's are
    // posted from two threads on one communicator, in another order on each process, and
    // crossed (a clean end, a false report of a process in a call, or a wait until
    // `arrival_timeout`, by chance).
    std::fprintf(stderr,
                 "rrfp: mpi rank %d: the script ended while another thread of this process "
                 "(a daemon thread, say) was in the pipeline's %s(); end every call before the "
                 "script ends (join the thread that makes them); ending the job\n",
                 p.world->rank(), held_call.c_str());
    std::fflush(stderr);
    p.world->abort(1);
  }
  if (p.world) {
    pyb::gil_scoped_release nogil;
    end_of_script(*p.world);
  }
#endif
  for (PipelineCore* c : live)
    c->close();
#ifdef RRFP_HAVE_MPI
  pyb::gil_scoped_release nogil;  // the closing barrier waits for every process
  p.world.reset();
#endif
}

void abort_processes(int code) {
#ifdef RRFP_HAVE_MPI
  Processes& p = processes();
  if (p.world && p.pid == static_cast<int>(::getpid())) {  // a forked process ends alone
    std::fprintf(stderr, "rrfp: mpi rank %d: an uncaught exception ends the job (MPI_Abort)\n",
                 p.world->rank());
    std::fflush(stderr);
    p.world->abort(code);
  }
#endif
  (void)code;
}

PipelineCore::~PipelineCore() {
  if (!made_here()) {  // a forked process: see made_here()
    (void)rt_.release();
    (void)own_job_.release();
    // Out of the list the exit handler goes through, unlocked: a thread the fork did not copy
    // may have held the lock for ever.
    Processes& p = processes();
    std::erase(p.live, this);
    std::erase(p.on_mpi, this);
    return;
  }
  {
    Processes& p = processes();
    std::lock_guard lk(p.mu);
    std::erase(p.live, this);
    std::erase(p.on_mpi, this);
  }
  // The runtime's threads are idle between steps; its programs drop their Python references
  // under the GIL, which this thread must not hold meanwhile.
  pyb::gil_scoped_release nogil;
  if (!runtime_is_ours()) (void)rt_.release();  // see close()
  rt_.reset();
}

std::vector<int> PipelineCore::local_stages() const {
  if (job_) return {job_->endpoint()};  // one stage per process (no TP)
  std::vector<int> s(model_->pp());
  for (int i = 0; i < model_->pp(); ++i)
    s[i] = i;
  return s;
}

void PipelineCore::set_runners(const std::vector<pyb::object>& runners) {
  if (runners.size() != local_stages().size())
    throw InputError("`runners`: expected " + std::to_string(local_stages().size()) + ", got " +
                     std::to_string(runners.size()));
  if (closed_) throw Error(kShutDown);
  runners_.clear();
  for (const pyb::object& r : runners)
    runners_.emplace_back(r);
  {
    pyb::gil_scoped_release nogil;
    rt_.reset();
  }
  build_runtime();
}

void PipelineCore::build_runtime() {
  const std::vector<int> local = local_stages();  // runners_[i] runs stage local[i]
  const bool hold = holds_messages();
  ProgramFactory programs = [this, local, hold](int stage, int) -> std::unique_ptr<StageProgram> {
    const auto at = std::find(local.begin(), local.end(), stage) - local.begin();
    pyb::gil_scoped_acquire gil;
    pyb::object runner = runners_.at(static_cast<std::size_t>(at))();
    if (runner.is_none()) throw Error("rrfp: the pipeline's stage runners are gone");
    return std::make_unique<PyStageProgram>(std::move(runner), &sizes_, &caller_, hold);
  };
  pyb::gil_scoped_release nogil;
  std::unique_ptr<Runtime> rt;
  if (job_) {
    Hosting h = job_->hosting();
    // The barrier before a step is for a runtime's first one, while peers may still be setting
    // up their receivers. Each step then ends in the closing exchange, a collective over the job
    // made after every thread of the step has joined: past it, the step is over everywhere (one
    // that ends otherwise gets a new runtime). A collective each step less.
    h.before_step = [barrier = std::move(h.before_step), first = true]() mutable {
      if (std::exchange(first, false) && barrier) barrier();
    };
    rt = std::make_unique<Runtime>(*model_, *hint_, programs, runtime_, std::move(h));
  } else
    rt = std::make_unique<Runtime>(*model_, *hint_, programs, runtime_);
  std::lock_guard lk(step_mu_);  // close() may look at it meanwhile
  rt_ = std::move(rt);
}

}  // namespace rrfp::py
