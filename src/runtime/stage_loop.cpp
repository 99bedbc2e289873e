// The compute thread of one tensor-parallel rank (the event loop of the paper's Figure 4):
// ask the arbiter (through the group's coordination protocol) for the next task, run it
// outside the lock, hand its output to local consumers and the transport, repeat. It sleeps on
// the stage's condition variable only when nothing is ready: no polling.
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
    } catch (const std::exception& e) {
      failure.fail(std::make_exception_ptr(TaskError(
          core_.name(r) + ": " + (begin ? "begin_step" : "end_step") + " failed: " + e.what())));
      return false;
    }
  };
  if (hook(true)) {
    Locked lk = core_.lock();
    std::int64_t prev_end = -1;
    // With rendezvous sends a rank stays until its last send is acknowledged (the receiver
    // may be waiting to accept one of them after its own last task).
    RankDriver& driver = core_.driver(lk, r);
    while (!failure.failed() && !driver.done()) {
      delivery_->idle(lk, r);
      if (driver.held() || driver.finished()) {
        core_.sleep(lk);
        prev_end = -1;
        continue;
      }
      std::optional<TaskId> t = coordinator_->choose(lk, r);
      if (!t) {
        if (failure.failed()) break;
        // choose() may have released the lock (an agree round): an offer that came meanwhile
        // has already had its wake-up.
        if (delivery_->idle(lk, r)) continue;
        core_.sleep(lk);
        prev_end = -1;  // the next dispatch waited for an input: not a dispatch gap
        continue;
      }
      if (!execute(lk, r, *t, prev_end)) break;
    }
    RankResult& res = core_.rank(lk, r).result;
    res.peak_d = driver.arbiter().peak_outstanding();
    res.peak_pending_w = driver.arbiter().peak_pending_w();
    if (const AgreeRound* a = driver.agree()) {
      res.rounds = a->rounds();
      res.failed_rounds = a->failed_rounds();
    }
    const bool ok = !failure.failed();
    lk.unlock();
    if (ok) hook(false);
  }
  failure.worker_done();
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

bool Stage::execute(Locked& lk, int r, const TaskId& t, std::int64_t& prev_end) {
  FailureState& failure = core_.failure();
  StageRank& rk = core_.rank(lk, r);
  Payload in = std::move(rk.input[core_.m().local_index(t)]);
  const std::int64_t start = now_ns();
  rk.running = t;
  rk.running_since = start;
  if (prev_end >= 0) rk.result.gaps.push_back(start - prev_end);
  TaskContext ctx(core_.stage(), r, core_.step(lk), t, core_.tp() > 1 ? core_.group() : nullptr,
                  &failure);
  lk.unlock();
  failure.bump();
  Payload out;
  bool ok = true;
  try {
    out = call_program(r, ctx, t, std::move(in));
  } catch (const Aborted&) {
    ok = false;
  } catch (const CollectiveMismatchError&) {
    failure.fail(std::current_exception());  // names the stage, ranks and tasks already
    ok = false;
  } catch (const std::exception& e) {
    failure.fail(std::make_exception_ptr(
        TaskError(core_.name(r) + ": task " + to_string(t) + " failed: " + e.what())));
    ok = false;
  } catch (...) {
    failure.fail(std::make_exception_ptr(TaskError(core_.name(r) + ": task " + to_string(t) +
                                                   " failed with a non-standard exception")));
    ok = false;
  }
  const std::int64_t end = now_ns();
  failure.bump();
  std::vector<Outgoing> sends;
  lk.relock();
  core_.rank(lk, r).running.reset();
  if (!ok) return false;
  finish(lk, r, t, start, end, ctx.collective_wait_ns(), out, sends);
  if (!sends.empty()) {
    lk.unlock();
    post_sends(r, sends);
    lk.relock();
  }
  prev_end = end;
  return true;
}

void Stage::finish(Locked& lk, int r, const TaskId& t, std::int64_t start, std::int64_t end,
                   std::int64_t wait, const Payload& out, std::vector<Outgoing>& sends) {
  const WorkModel& m = core_.m();
  const std::int64_t t0 = core_.t0(lk);
  StageRank& rk = core_.rank(lk, r);
  RankResult& res = rk.result;
  TaskRecord rec{t, core_.stage(), r, start - t0, end - wait - t0, end - t0};
  if (const std::int64_t at = rk.arrived[m.local_index(t)]; at >= 0) rec.input_at = at - t0;
  res.tasks.push_back(rec);
  res.stats.busy += end - wait - start;
  core_.record_blocked(lk, r, end - wait, end, BlockReason::Collective);
  for (const Dep& c : rk.driver->task_ended(t, end - start)) {
    if (c.cross_stage)
      delivery_->output(lk, r, t, c.task, out, end, end - start, sends);
    else if (c.task.kind == t.kind)
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
