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
  StageRank& rk = core_.rank(r);
  FailureState& failure = core_.failure;
  auto hook = [&](bool begin) {
    try {
      if (begin)
        rk.program->begin_step(core_.step);
      else
        rk.program->end_step(core_.step);
      return true;
    } catch (const std::exception& e) {
      failure.fail(std::make_exception_ptr(TaskError(
          core_.name(r) + ": " + (begin ? "begin_step" : "end_step") + " failed: " + e.what())));
      return false;
    }
  };
  if (hook(true)) {
    std::unique_lock lk(core_.mu);
    std::int64_t prev_end = -1;
    // With rendezvous sends a rank stays until its last send is acknowledged (the receiver
    // may be waiting to accept one of them after its own last task).
    RankDriver& driver = *rk.driver;
    while (!failure.failed() && !driver.done()) {
      delivery_->idle(lk, r);
      if (driver.held() || driver.finished()) {
        core_.cv.wait(lk);
        prev_end = -1;
        continue;
      }
      std::optional<TaskId> t = coordinator_->choose(lk, r);
      if (!t) {
        if (failure.failed()) break;
        // choose() may have released the lock (an agree round): an offer that came meanwhile
        // has already had its wake-up.
        if (delivery_->idle(lk, r)) continue;
        core_.cv.wait(lk);
        prev_end = -1;  // the next dispatch waited for an input: not a dispatch gap
        continue;
      }
      if (!execute(lk, r, *t, prev_end)) break;
    }
    rk.result.peak_d = driver.arbiter().peak_outstanding();
    rk.result.peak_pending_w = driver.arbiter().peak_pending_w();
    if (const AgreeRound* a = driver.agree()) {
      rk.result.rounds = a->rounds();
      rk.result.failed_rounds = a->failed_rounds();
    }
    const bool ok = !failure.failed();
    lk.unlock();
    if (ok) hook(false);
  }
  failure.worker_done();
}

Payload Stage::call_program(StageRank& rk, TaskContext& ctx, const TaskId& t, Payload in) {
  switch (t.kind) {
    case Kind::F:
      return rk.program->forward(ctx, t.chunk, t.mb, std::move(in));
    case Kind::B:
      return rk.program->backward(ctx, t.chunk, t.mb, std::move(in));
    case Kind::W:
      rk.program->weight_grad(ctx, t.chunk, t.mb);
      return {};
  }
  return {};
}

bool Stage::execute(std::unique_lock<std::mutex>& lk, int r, const TaskId& t,
                    std::int64_t& prev_end) {
  StageRank& rk = core_.rank(r);
  FailureState& failure = core_.failure;
  const WorkModel& m = core_.m;
  Payload in = std::move(rk.input[m.local_index(t)]);
  const std::int64_t start = now_ns();
  rk.running = t;
  rk.running_since = start;
  lk.unlock();
  failure.bump();
  if (prev_end >= 0) rk.result.gaps.push_back(start - prev_end);
  TaskContext ctx(core_.stage, r, core_.step, t, core_.tp > 1 ? core_.group : nullptr, &failure);
  Payload out;
  bool ok = true;
  try {
    out = call_program(rk, ctx, t, std::move(in));
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
  lk.lock();
  rk.running.reset();
  if (!ok) return false;
  const std::int64_t wait = ctx.collective_wait_ns();
  const std::int64_t t0 = core_.t0;
  RankResult& res = rk.result;
  TaskRecord rec{t, core_.stage, r, start - t0, end - wait - t0, end - t0};
  if (const std::int64_t at = rk.arrived[m.local_index(t)]; at >= 0) rec.input_at = at - t0;
  res.tasks.push_back(rec);
  res.stats.busy += end - wait - start;
  core_.record_blocked(r, end - wait, end, BlockReason::Collective);
  for (const Dep& c : rk.driver->task_ended(t, end - start)) {
    if (c.cross_stage)
      delivery_->output(r, t, c.task, out, end, end - start, sends);
    else if (c.task.kind == t.kind)
      rk.input[m.local_index(c.task)] = out;  // the next chunk on this stage
  }
  if (!sends.empty()) {
    lk.unlock();
    post_sends(r, sends);
    lk.lock();
  }
  prev_end = end;
  return true;
}

// Sends never wait for the receiver; with emulated latency they leave from the delay line.
void Stage::post_sends(int r, std::vector<Outgoing>& sends) {
  for (Outgoing& s : sends) {
    if (core_.env.delay && s.due > now_ns())
      core_.env.delay->post(s.due, [this, r, s = std::move(s)]() mutable {
        core_.send(r, s.dst, s.tag, std::move(s.payload));
      });
    else
      core_.send(r, s.dst, s.tag, std::move(s.payload));
  }
}

}  // namespace rrfp
