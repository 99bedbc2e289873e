// The compute thread of one tensor-parallel rank (the event loop of the paper's Figure 4):
// ask the arbiter (through the group's coordination protocol) for the next task, run it
// outside the lock, hand its output to local consumers and the transport, repeat. It sleeps on
// the stage's condition variable only when nothing is ready: no polling. With a window
// (RuntimeOptions::window), a task may return with its work still running on a device: it
// waits in `flight` while the rank starts the next one, and completes (its output handed on)
// once its work is ready, tasks completing in the order they started.
#include <algorithm>
#include <string>

#include "core/clock.hpp"
#include "runtime/errors.hpp"
#include "runtime/stage.hpp"

namespace rrfp {

void Stage::run_rank(int r) {
  tighten_timer_slack();
  FailureState& failure = core_.failure();
  const int step = [&] {
    const Locked lk = core_.lock();
    return core_.step(lk);
  }();
  auto hook = [&](bool begin) {
    try {
      if (begin)
        core_.program(r).begin_step(step);
      else
        core_.program(r).end_step(step);
      return true;
    } catch (...) {  // out of the thread, it ended the process in std::terminate
      failure.fail(std::make_exception_ptr(
          call_failed(core_.name(r) + ": " + (begin ? "begin_step" : "end_step"))));
    }
    return false;
  };
  if (hook(true)) {
    bool ok = false;
    // What the loop's protocol machines throw (an allocation refused, a broken invariant) fails
    // the step, named by the rank, as a task's error does; out of the thread, it ended the
    // process in std::terminate.
    try {
      ok = dispatch_loop(r);
    } catch (const std::exception& e) {
      failure.fail(std::make_exception_ptr(TaskError(core_.name(r) + ": " + failure_reason(e))));
    } catch (...) {
      failure.fail(std::make_exception_ptr(
          TaskError(core_.name(r) + ": failed with a non-standard exception")));
    }
    if (ok) hook(false);
  }
  failure.worker_done();
}

bool Stage::dispatch_loop(int r) {
  FailureState& failure = core_.failure();
  Locked lk = core_.lock();
  std::int64_t prev_end = -1;
  // With rendezvous sends a rank stays until its last send is acknowledged (the receiver
  // may be waiting to accept one of them after its own last task).
  RankDriver& driver = core_.driver(lk, r);
  const size_t window = static_cast<size_t>(core_.env().window);
  Flight flight;
  // done(): nothing left to start or release; the tasks in flight still end after it.
  while (!failure.failed() && (!driver.done() || !flight.empty())) {
    if (!retire(lk, r, flight, false, prev_end)) break;
    delivery_->idle(lk, r);
    // Nothing to start (held, finished, the window full): the oldest task in flight is
    // what can change that; with none, sleep until a message or a wake-up.
    const bool may_start = !driver.held() && !driver.finished() && flight.size() < window;
    std::optional<TaskId> t;
    if (may_start) {
      t = coordinator_->choose(lk, r);
      if (!t && failure.failed()) break;
      // choose() may have released the lock (an agree round): an offer that came meanwhile
      // has already had its wake-up.
      if (!t && delivery_->idle(lk, r)) continue;
    }
    if (t) {
      if (!execute(lk, r, *t, prev_end, flight)) break;
    } else if (!flight.empty()) {
      if (!retire(lk, r, flight, true, prev_end)) break;
    } else if (!driver.done() && !failure.failed()) {
      // (done once the first retire ended the last in flight.) The step may have failed while
      // the lock was let go above (an acceptance completing inline, a retire's sends), and the
      // watchdog's one wake-up may have come then: asked under the lock held into the sleep,
      // a failure is seen here or its wake-up comes after (the rank slept for ever so).
      core_.sleep(lk);
      prev_end = -1;  // the next dispatch waited for an input: not a dispatch gap
    }
  }
  RankResult& res = core_.rank(lk, r).result;
  res.peak_d = driver.arbiter().peak_outstanding();
  res.peak_pending_w = driver.arbiter().peak_pending_w();
  if (const AgreeRound* a = driver.agree()) {
    res.rounds = a->rounds();
    res.failed_rounds = a->failed_rounds();
  }
  return !failure.failed();
}

Payload Stage::call_program(int r, TaskContext& ctx, const TaskId& t, Payload in) {
  StageProgram& p = core_.program(r);
  switch (t.kind) {
    case Kind::F:
      return p.forward(ctx, t.chunk, t.mb, std::move(in));
    case Kind::B:
      return p.backward(ctx, t.chunk, t.mb, std::move(in));
    case Kind::W:
      p.weight_grad(ctx, t.chunk, t.mb);
      return {};
  }
  return {};
}

template <class Fn>
bool Stage::guarded(int r, const TaskId& t, Fn&& fn) {
  FailureState& failure = core_.failure();
  try {
    fn();
    return true;
  } catch (const Aborted&) {
    // This step's own failure (already recorded) tore the task down; or a group shared with
    // another runtime (ranks of one process as a job's processes) was aborted by that one's:
    // then this step ends failed too, never as if its tasks had run.
    if (!failure.failed())
      failure.fail(std::make_exception_ptr(
          TaskError(core_.name(r) + ": task " + to_string(t) +
                    " was aborted: its tensor-parallel group ended with another rank's failure")));
  } catch (const CollectiveMismatchError&) {
    failure.fail(std::current_exception());  // names the stage, ranks and tasks already
  } catch (...) {
    failure.fail(std::make_exception_ptr(call_failed(core_.name(r) + ": task " + to_string(t))));
  }
  return false;
}

bool Stage::execute(Locked& lk, int r, const TaskId& t, std::int64_t& prev_end, Flight& flight) {
  FailureState& failure = core_.failure();
  StageRank& rk = core_.rank(lk, r);
  Payload in = std::move(rk.input[core_.m().local_index(t)]);
  const std::int64_t start = now_ns();
  rk.running = t;  // while its program runs; then the oldest in flight (show_running)
  rk.running_since = start;
  if (prev_end >= 0 && flight.empty()) rk.result.gaps.push_back(start - prev_end);
  TaskContext ctx(core_.stage(), r, core_.step(lk), t, core_.tp() > 1 ? core_.group() : nullptr,
                  &failure);
  ctx.set_window(core_.env().window);
  ctx.set_collective_clock(rk.in_collective.get());
  if (!acceptors_.empty()) ctx.set_idle(&acceptors_[static_cast<std::size_t>(r)]);
  lk.unlock();
  failure.bump();
  // The work a task leaves pending may still read its input: a handle on it stays with the task.
  Payload held = ctx.window() > 1 ? in : Payload();
  Payload out;
  const bool ok = guarded(r, t, [&] { out = call_program(r, ctx, t, std::move(in)); });
  const std::int64_t end = now_ns();
  failure.bump();
  lk.relock();
  if (!ok) {
    core_.rank(lk, r).running.reset();
    return false;
  }
  std::unique_ptr<PendingWork> work = ctx.take_pending();
  if (work || !flight.empty()) {  // completes once its work (and every earlier task's) is done
    flight.tasks.push_back(
        {t, start, std::move(ctx), std::move(held), std::move(out), std::move(work)});
    show_running(lk, r, flight);
    return true;
  }
  core_.rank(lk, r).running.reset();
  flight.last_end = end;
  complete(lk, r, t, start, end, ctx.collective_wait_ns(), out, prev_end, flight.sends);
  return true;
}

bool Stage::retire(Locked& lk, int r, Flight& flight, bool block, std::int64_t& prev_end) {
  while (!flight.empty()) {
    InFlight& f = flight.tasks.front();
    if (f.work) {
      bool ready = false;
      if (!guarded(r, f.task, [&] { ready = f.work->ready(); })) return false;
      if (!ready && !block) break;
      if (!ready) {
        lk.unlock();
        const bool ok = guarded(r, f.task, [&] { f.work->wait(f.ctx); });
        core_.failure().bump();
        lk.relock();
        if (!ok) return false;
      }
    }
    block = false;
    InFlight done = std::move(f);
    flight.tasks.pop_front();
    show_running(lk, r, flight);
    const std::int64_t end = now_ns();
    const std::int64_t start = std::max(done.start, flight.last_end);
    flight.last_end = end;
    complete(lk, r, done.task, start, end, done.ctx.collective_wait_ns(), done.out, prev_end,
             flight.sends);
  }
  return true;
}

void Stage::show_running(Locked& lk, int r, const Flight& flight) {
  StageRank& rk = core_.rank(lk, r);
  if (flight.empty()) {
    rk.running.reset();
    return;
  }
  rk.running = flight.tasks.front().task;
  rk.running_since = flight.tasks.front().start;
}

void Stage::complete(Locked& lk, int r, const TaskId& t, std::int64_t start, std::int64_t end,
                     std::int64_t wait, const Payload& out, std::int64_t& prev_end,
                     std::vector<Outgoing>& sends) {
  finish(lk, r, t, start, end, wait, out, sends);
  if (!sends.empty()) {
    lk.unlock();
    post_sends(r, sends);
    sends.clear();
    lk.relock();
  }
  prev_end = end;
}

void Stage::finish(Locked& lk, int r, const TaskId& t, std::int64_t start, std::int64_t end,
                   std::int64_t wait, const Payload& out, std::vector<Outgoing>& sends) {
  const WorkModel& m = core_.m();
  const std::int64_t t0 = core_.t0(lk);
  StageRank& rk = core_.rank(lk, r);
  RankResult& res = rk.result;
  TaskRecord rec{t, core_.stage(), r, start - t0, end - wait - t0, end - t0};
  if (const std::int64_t at = rk.arrived[m.local_index(t)]; at >= 0) rec.input_at = at - t0;
  rec.offer_wait = rk.offer_wait[m.local_index(t)];
  res.tasks.push_back(rec);
  ended_.store(ended_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  res.stats.busy += end - wait - start;
  core_.record_blocked(lk, r, end - wait, end, BlockReason::Collective);
  for (const Dep& c : rk.driver->task_ended(t, end - start)) {
    if (c.cross_stage)
      delivery_->output(lk, r, t, c.task, out, end, end - start, sends);
    else if (c.task.kind == t.kind && !c.order)
      rk.input[m.local_index(c.task)] = out;  // the next chunk on this stage
  }
}

// Sends never wait for the receiver; with emulated latency they leave from the delay line.
void Stage::post_sends(int r, std::vector<Outgoing>& sends) {
  const StageEnv& env = core_.env();
  for (Outgoing& s : sends) {
    if (env.delay && s.due > now_ns())
      env.delay->post(s.due, [this, r, s = std::move(s)]() mutable {
        core_.send(r, s.dst, s.tag, std::move(s.payload));
      });
    else
      core_.send(r, s.dst, s.tag, std::move(s.payload));
  }
}

}  // namespace rrfp
