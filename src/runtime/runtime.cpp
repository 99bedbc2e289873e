#include "runtime/runtime.hpp"

#include <algorithm>
#include <limits>
#include <system_error>
#include <thread>
#include <utility>

#include "comm/inproc.hpp"
#include "core/clock.hpp"
#include "core/format.hpp"
#include "core/hint_io.hpp"
#include "runtime/errors.hpp"
#include "runtime/tp_group.hpp"

namespace rrfp {

namespace {

Hosting all_local(int world, std::vector<std::unique_ptr<Transport>> endpoints) {
  Hosting pl;
  for (int i = 0; i < world; ++i)
    pl.local.push_back(i);
  pl.transports = endpoints.empty() ? make_inproc_transports(world) : std::move(endpoints);
  return pl;
}

// The endpoints, P x T, after the options' checks: computed in int it wrapped (P=4194305 at
// T=1024 made 1024, and the constructor crashed indexing past its table).
int world_size(const WorkModel& m, const RuntimeOptions& o) {
  validate(o);
  const std::int64_t world = std::int64_t{m.pp()} * std::max(1, o.tp);
  if (world > std::numeric_limits<int>::max())
    throw InputError("`pp` x `tp`: " + std::to_string(m.pp()) + " x " + std::to_string(o.tp) +
                     " = " + std::to_string(world) + " endpoints, past 2147483647");
  return static_cast<int>(world);
}

}  // namespace

Hosting in_process_hosting(int world) {
  return all_local(world, {});
}

Runtime::Runtime(const WorkModel& m, const Hint& hint, const ProgramFactory& programs,
                 RuntimeOptions opt, std::vector<std::unique_ptr<Transport>> endpoints)
    : Runtime(m, hint, programs, opt, all_local(world_size(m, opt), std::move(endpoints))) {}

// Endpoint id -> position in local_ (-1: hosted elsewhere), each local endpoint checked
// against its transport.
std::vector<int> Runtime::endpoint_slots(int world) const {
  if (endpoints_.size() != local_.size())
    throw Error("runtime: need one transport per local endpoint: " + std::to_string(local_.size()) +
                " endpoints, " + std::to_string(endpoints_.size()) + " transports");
  std::vector<int> slot(static_cast<size_t>(world), -1);
  for (size_t i = 0; i < local_.size(); ++i) {
    const int e = local_[i];
    if (e < 0 || e >= world || slot[e] >= 0)
      throw Error("runtime: local endpoint " + std::to_string(e) + " is out of range [0, " +
                  std::to_string(world) + ") or listed twice");
    slot[e] = static_cast<int>(i);
    // Checked here: transports listed in another order than `local` sent each stage's messages
    // from the wrong rank, and the step failed blaming a message.
    if (!endpoints_[i])
      throw Error("runtime: the transport for local endpoint " + std::to_string(e) + " is null");
    if (endpoints_[i]->rank() != e || endpoints_[i]->size() != world)
      throw Error("runtime: the transport for local endpoint " + std::to_string(e) + " is rank " +
                  std::to_string(endpoints_[i]->rank()) + " of " +
                  std::to_string(endpoints_[i]->size()) + "; it must be rank " + std::to_string(e) +
                  " of " + std::to_string(world) + " (transports in the order of `local`)");
  }
  return slot;
}

Runtime::Runtime(const WorkModel& m, const Hint& hint, const ProgramFactory& programs,
                 RuntimeOptions opt, Hosting hosting)
    : m_(m),
      opt_(std::move(opt)),
      endpoints_(std::move(hosting.transports)),
      local_(std::move(hosting.local)),
      before_step_(std::move(hosting.before_step)),
      on_peer_failure_(std::move(hosting.on_peer_failure)),
      peer_name_(hosting.peer_name) {
  const int world = world_size(m, opt_);  // validates the options first
  opt_.arbiter = resolve_options(opt_.arbiter, hint, m);
  // An empty std::function threw a bare "bad_function_call" at the first stage.
  if (!programs) throw InputError("runtime: `programs` is empty: give a program factory");
  const int p = m.pp(), t = opt_.tp;
  // Here, not first at a step's arbiters: a list that does not hold each stage's tasks once
  // failed the step after the barrier between processes, and the peers waited for their
  // watchdogs.
  if (hint.is_list())
    for (int s = 0; s < p; ++s)
      (void)stage_positions(hint.list(), m, s, "hint '" + hint.name + "'");
  const std::vector<int> slot = endpoint_slots(world);
  if (opt_.latency) {
    try {
      delay_ = std::make_unique<DelayLine>([this](std::exception_ptr e) { failure_.fail(e); });
    } catch (const std::system_error& e) {  // "internal error: Resource temporarily unavailable"
      throw thread_refused("the runtime's message delay thread", e.what());
    }
  }
  StageEnv env;
  env.model = &m;
  env.hint = &hint;
  env.dispatch = opt_.dispatch();
  env.tp = t;
  env.failure = &failure_;
  env.delay = delay_.get();
  env.latency = opt_.latency;
  env.rendezvous_pull = opt_.rendezvous_pull;
  env.window = opt_.window;
  env.idle_spin_ns = std::int64_t{opt_.idle_spin_us} * 1000;
  env.peer_name = hosting.peer_name;
  groups_.resize(p);
  stages_.resize(p);
  for (int s = 0; s < p; ++s) {
    std::vector<std::unique_ptr<StageProgram>> progs(t);
    std::vector<Transport*> eps(t, nullptr);
    int here = 0;
    for (int r = 0; r < t; ++r) {
      const int pos = slot[s * t + r];
      if (pos < 0) continue;
      ++here;
      progs[r] = programs(s, r);
      if (!progs[r])
        throw Error("runtime: the program factory returned nothing for stage " + std::to_string(s));
      eps[r] = endpoints_[pos].get();
    }
    if (here == 0) continue;
    if (here == t)
      groups_[s] = std::make_unique<TpGroup>(s, t);
    else if (hosting.make_group) {
      groups_[s] = hosting.make_group(s);
      // Checked: none ran the stage's all-reduces as no-ops, one of another size told its
      // programs another tp_size, and the step went on with partial sums.
      if (!groups_[s] || groups_[s]->size() != t)
        throw Error("runtime: `make_group` gave stage " + std::to_string(s) + " " +
                    (groups_[s] ? "a group of " + std::to_string(groups_[s]->size()) + " ranks"
                                : std::string("no group")) +
                    "; its `tp` is " + std::to_string(t));
    } else
      throw Error("runtime: stage " + std::to_string(s) +
                  " is split over processes but no cross-process collective was given");
    stages_[s] =
        std::make_unique<Stage>(env, s, std::move(progs), std::move(eps), groups_[s].get());
  }
  for (size_t i = 0; i < local_.size(); ++i) {
    Stage* st = stages_[local_[i] / t].get();
    const int r = local_[i] % t;
    endpoints_[i]->set_broken_handler(
        [this, st, r](std::exception_ptr why) { on_transport_broken(std::move(why), *st, r); });
    endpoints_[i]->set_receiver([this, st, r, ep = endpoints_[i].get()](Message&& msg) {
      switch (msg.tag.control) {
        case Control::Abort:
          return on_peer_abort(msg);  // about the whole step, whichever stage it reaches
        case Control::Query:
          return answer_query(msg, *st, r, *ep);
        case Control::Answer:
          return on_answer(std::move(msg));
        default:
          return st->on_message(r, std::move(msg));
      }
    });
  }
}

Runtime::~Runtime() {
  // Stop deliveries before the stages they target go away.
  delay_.reset();
  for (auto& e : endpoints_)
    e->shutdown();
}

void Runtime::cancel(std::exception_ptr why) {
  // A null reason was dropped by the failure slot, and the step ran on as if never cancelled.
  if (!why) why = std::make_exception_ptr(Error("runtime: the step was cancelled"));
  {
    std::lock_guard lk(cancel_mu_);
    cancel_ = why;
    cancelled_ = why;  // told to the peers as a cancel, not a stall (tell_peers)
  }
  failure_.fail(std::move(why));
}

std::vector<std::thread> Runtime::start_compute_threads() {
  std::vector<std::thread> threads;
  threads.reserve(local_.size());
  try {
    for (int e : local_) {
      Stage* st = stages_[e / opt_.tp].get();
      threads.emplace_back([st, r = e % opt_.tp] { st->run_rank(r); });
    }
  } catch (const std::system_error& ex) {
    // The machine's limit on threads or address space: the threads already running end with the
    // step, and the run fails in one line (it aborted: a joinable thread destroyed unjoined).
    failure_.fail(std::make_exception_ptr(
        Error("runtime: could not start compute thread " + std::to_string(threads.size() + 1) +
              " of " + std::to_string(local_.size()) + " (" + ex.what() +
              "): this machine's thread or memory limit; lower `tp` or `pp`")));
  }
  return threads;
}

void Runtime::stop_step(int step) noexcept {
  for (auto& s : stages_)
    if (s) s->wake();
  for (auto& g : groups_)
    if (g) g->abort();
  try {
    tell_peers(step, failure_.error());  // before the join: a running task may take long
  } catch (...) {
    // Out of memory for the message: the peers learn from their own watchdogs. Nothing may
    // leave here before the threads are joined.
  }
}

StepResult Runtime::run_step(int step) {
  if (broken_) throw Error("runtime: an earlier step failed; start a new runtime");
  // The transports poll at a step's pace while it runs, and back off between steps.
  struct InStep {
    std::vector<std::unique_ptr<Transport>>& eps;
    explicit InStep(std::vector<std::unique_ptr<Transport>>& e) : eps(e) {
      for (auto& t : eps)
        t->set_in_step(true);
    }
    ~InStep() {
      for (auto& t : eps)
        t->set_in_step(false);
    }
  } in_step(endpoints_);
  failure_.reset();
  {
    std::lock_guard lk(cancel_mu_);
    if (cancel_) failure_.fail(std::exchange(cancel_, nullptr));
    // Every step needs every endpoint's arrivals.
    if (transport_broken_) failure_.fail(transport_broken_);
  }
  // A failure known already (a cancel, a peer's abort) ends the step here, not after waiting
  // on peers that may never come to the barrier.
  // What fails from here to the compute threads' start fails the step as a task's error does
  // (peers told, the runtime refusing further steps): thrown out of run_step, it left the
  // runtime taking steps, its failure() null, and the peers waiting for their watchdogs.
  if (before_step_ && !failure_.failed()) {
    try {
      before_step_();
    } catch (...) {
      failure_.fail(std::current_exception());
    }
  }
  const std::int64_t t0 = now_ns();
  step_start_ns_.store(t0);
  step_now_.store(step);
  bool began = true;
  for (auto& s : stages_)
    if (s && !s->begin_step(step, t0)) began = false;
  {
    // A break told during the barrier, before the stages began, found the last step's inputs
    // all delivered and failed nothing: this step would wait for its watchdog.
    std::lock_guard lk(cancel_mu_);
    if (transport_broken_) failure_.fail(transport_broken_);
  }
  std::vector<std::thread> threads;
  if (began) threads = start_compute_threads();
  try {
    if (began) watch(static_cast<int>(threads.size()));
  } catch (...) {
    // Its report refused memory: the step fails with that, and the threads are joined below
    // (leaving here would destroy them joinable: std::terminate).
    failure_.fail(std::current_exception());
  }
  if (failure_.failed()) stop_step(step);
  for (auto& th : threads)
    th.join();
  step_now_.store(-1);
  bool failed = false;
  {
    // A peer's abort coming now either fails this step or finds it completed, never both.
    std::lock_guard lk(cancel_mu_);
    failed = failure_.failed();
    if (!failed) completed_step_ = step;
  }
  if (failed) {
    broken_ = true;
    if (delay_) delay_->clear();
    std::rethrow_exception(failure_.error());
  }
  StepResult out = collect();
  out.origin_ns = t0;
  const std::uint64_t fresh = BufferPool::fresh_total();
  out.fresh_buffers = static_cast<std::int64_t>(fresh - fresh_seen_);
  fresh_seen_ = fresh;
  return out;
}

// The caller's thread is the watchdog: it sleeps until every worker is done or one failed,
// waking now and then to see whether anything has progressed. A wake this late or later is a
// stop of the process (below); under a `timeout` of less than 2 s, half of it, and at least
// three polls: a stop of 0.8 s under `timeout` 0.3 s went uncounted at a second and failed the
// step as a stall, where a longer stop was forgiven.
namespace {

constexpr std::int64_t kSuspendedNs = 1'000'000'000;

std::int64_t suspended_ns(std::int64_t timeout, std::int64_t poll) {
  return std::min(kSuspendedNs, std::max(timeout / 2, 3 * poll));
}

}  // namespace

void Runtime::watch(int workers) {
  const std::int64_t timeout = opt_.timeout_ms * 1'000'000;
  const std::int64_t poll =
      timeout > 0 ? std::clamp<std::int64_t>(timeout / 10, 1'000'000, 50'000'000) : 50'000'000;
  const std::int64_t suspended = suspended_ns(timeout, poll);
  std::int64_t start = now_ns(), woke = start;
  std::int64_t wait = poll;
  while (!failure_.wait(workers, wait)) {
    const std::int64_t asked = wait;
    wait = poll;
    if (timeout == 0) continue;
    const std::int64_t now = now_ns();
    // Woken `suspended` or more after it asked: the process was stopped (Ctrl-Z, SIGSTOP) or
    // not run, and its tasks with it, so that time is nobody's stall: the deadline moves on by
    // it (a suspend longer than the timeout failed the step as a stall once resumed).
    if (const std::int64_t late = now - woke - asked; late > suspended)
      start = std::max(start, failure_.last_progress_ns()) + late;
    woke = now;
    const std::int64_t last_change = std::max(start, failure_.last_progress_ns());
    if (now - last_change < timeout) {
      wait = std::min(poll, last_change + timeout - now);  // wake at the deadline itself
      continue;
    }
    std::string report = "no progress for " + std::to_string((now - last_change) / 1'000'000) +
                         " ms (`timeout` " +
                         fmt("%g", static_cast<double>(opt_.timeout_ms) / 1000) + " s):";
    for (auto& s : stages_)
      if (s) report += " [" + s->describe(now) + "]";
    if (const std::string b = transport_broken_text(); !b.empty()) report += "; earlier, " + b;
    // Hosting some of the stages, it sees their progress alone: a stage waiting for its first
    // input behind stages busy elsewhere counts as stalled (P=4 of 400 ms tasks, `timeout` 1 s).
    // Said where a rank here waits for another stage (it was said of a rank stuck in its task,
    // expecting no message).
    if (static_cast<int>(local_.size()) < m_.pp() * opt_.tp && waits_elsewhere())
      report +=
          "; this process watches its own stages only: `timeout` must exceed the longest "
          "wait of a stage for its input";
    const Chase chase = chase_stall(now);
    report += chase.text;
    // A process further down the chain, stalled as long, is failing its step with the same
    // stall: its abort, awaited a while, fails this step as a peer's, so that the job prints one
    // line where both watchdogs fired together (two did, in 4 of 5 runs at P=8 under mpirun).
    if (chase.defer_ns > 0 && failure_.wait(workers, chase.defer_ns)) continue;
    failure_.fail(std::make_exception_ptr(StallError(report)));
  }
}

Runtime::StepProgress Runtime::step_progress() const {
  StepProgress p;
  for (const auto& s : stages_)
    if (s) {
      p.ended += s->tasks_ended();
      p.total += s->tasks_hosted();
    }
  return p;
}

bool Runtime::waits_elsewhere() const {
  for (const auto& s : stages_)
    if (s)
      for (int r = 0; r < opt_.tp; ++r)
        if (s->local(r) && !s->awaited_stages(r).empty()) return true;
  return false;
}

StepResult Runtime::collect() const {
  StepResult out;
  StepRecord& r = out.run;
  const int p = m_.pp(), t = opt_.tp;
  r.pp = p;
  r.tp = t;
  r.arbiter = opt_.arbiter;
  r.ranks.resize(static_cast<size_t>(p) * t);
  r.peak_d.assign(p, 0);
  r.peak_pending_w.assign(p, 0);
  int hosted = 0;  // the ranks this runtime hosts
  for (int s = 0; s < p; ++s)
    for (int k = 0; k < t; ++k) {
      if (!stages_[s] || !stages_[s]->local(k)) continue;
      ++hosted;
      const RankResult& rr = stages_[s]->result(k);
      r.ranks[static_cast<size_t>(s) * t + k] = rr.stats;
      r.peak_d[s] = std::max(r.peak_d[s], rr.peak_d);
      r.peak_pending_w[s] = std::max(r.peak_pending_w[s], rr.peak_pending_w);
      r.tasks.insert(r.tasks.end(), rr.tasks.begin(), rr.tasks.end());
      r.blocked.insert(r.blocked.end(), rr.blocked.begin(), rr.blocked.end());
      out.dispatch_gaps.insert(out.dispatch_gaps.end(), rr.gaps.begin(), rr.gaps.end());
      if (k == 0) {  // the group's rounds, counted once (by its rank 0's host)
        r.coordination_rounds += rr.rounds;
        r.failed_rounds += rr.failed_rounds;
      }
      for (const TaskRecord& rec : rr.tasks)
        r.makespan = std::max(r.makespan, rec.end);
    }
  send_times_from_arrivals(r);
  // Every rank here: the step's end is known (else merge_over_job cuts the merged record).
  if (hosted == p * t) cut_waits_at_end(r);
  return out;
}

}  // namespace rrfp
