// The compute thread of one tensor-parallel rank (the event loop of the paper's Figure 4):
// ask the arbiter (through the group's coordination protocol) for the next task, run it
// outside the lock, hand its output to local consumers and the transport, repeat. It sleeps on
// the stage's condition variable only when nothing is ready: no polling.
#include <array>

#include "runtime/clock.hpp"
#include "runtime/errors.hpp"
#include "runtime/stage.hpp"

namespace rrfp {

void Stage::run_rank(int r) {
  tighten_timer_slack();
  Rank& rk = ranks_[r];
  auto hook = [&](bool begin) {
    try {
      if (begin)
        rk.program->begin_step(step_);
      else
        rk.program->end_step(step_);
      return true;
    } catch (const std::exception& e) {
      failure_.fail(std::make_exception_ptr(TaskError(
          name(r) + ": " + (begin ? "begin_step" : "end_step") + " failed: " + e.what())));
      return false;
    }
  };
  if (hook(true)) {
    std::unique_lock lk(mu_);
    std::int64_t prev_end = -1;
    // With rendezvous sends a rank stays until its last send is acknowledged (the receiver
    // may be waiting to accept one of them after its own last task).
    while (!failure_.failed() && (!rk.arb->finished() || rk.held > 0)) {
      if (env_.comm == CommMode::Blocking) {
        accept_offers(lk, r);
        if (rk.held > 0 || rk.arb->finished()) {
          cv_.wait(lk);
          prev_end = -1;
          continue;
        }
      }
      std::optional<TaskId> t = choose(lk, r);
      if (!t) {
        if (failure_.failed()) break;
        // choose() may have released the lock (an agree round): an offer that came meanwhile
        // has already had its wake-up.
        if (env_.comm == CommMode::Blocking && accept_offers(lk, r)) continue;
        cv_.wait(lk);
        prev_end = -1;  // the next dispatch waited for an input: not a dispatch gap
        continue;
      }
      if (!execute(lk, r, *t, prev_end)) break;
    }
    rk.result.peak_d = rk.arb->peak_outstanding();
    rk.result.peak_pending_w = rk.arb->peak_pending_w();
    const bool ok = !failure_.failed();
    lk.unlock();
    if (ok) hook(false);
  }
  failure_.worker_done();
}

Payload Stage::call_program(Rank& rk, TaskContext& ctx, const TaskId& t, Payload in) {
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
  Rank& rk = ranks_[r];
  Payload in = std::move(rk.input[m_.index(t)]);
  const std::int64_t start = now_ns();
  rk.running = t;
  rk.running_since = start;
  lk.unlock();
  failure_.bump();
  if (prev_end >= 0) rk.result.gaps.push_back(start - prev_end);
  TaskContext ctx(stage_, r, step_, t, tp_ > 1 ? group_ : nullptr);
  Payload out;
  bool ok = true;
  try {
    out = call_program(rk, ctx, t, std::move(in));
  } catch (const Aborted&) {
    ok = false;
  } catch (const CollectiveMismatchError&) {
    failure_.fail(std::current_exception());  // names the stage, ranks and tasks already
    ok = false;
  } catch (const std::exception& e) {
    failure_.fail(std::make_exception_ptr(
        TaskError(name(r) + ": task " + to_string(t) + " failed: " + e.what())));
    ok = false;
  } catch (...) {
    failure_.fail(std::make_exception_ptr(
        TaskError(name(r) + ": task " + to_string(t) + " failed with a non-standard exception")));
    ok = false;
  }
  const std::int64_t end = now_ns();
  failure_.bump();
  std::vector<Send> sends;
  lk.lock();
  rk.running.reset();
  if (!ok) return false;
  const std::int64_t wait = ctx.collective_wait_ns();
  RankResult& res = rk.result;
  res.tasks.push_back(TaskRecord{t, stage_, r, start - t0_, end - wait - t0_, end - t0_});
  res.stats.busy += end - wait - start;
  record_blocked(r, end - wait, end, BlockReason::Collective);
  std::array<Dep, 2> c{};
  const int n = m_.consumers(t, c);
  for (int i = 0; i < n; ++i) {
    const int ci = m_.index(c[i].task);
    if (c[i].cross_stage) {
      const std::int64_t lat = env_.latency ? env_.latency(r, t) : 0;
      if (env_.comm == CommMode::Blocking) {
        // Offered now; the latency runs from the receiver's acceptance.
        sends.push_back(Send{m_.stage_of(c[i].task) * tp_ + r, MessageTag{step_, t}, out, 0});
        if (rk.held++ == 0) rk.held_since = end;
        continue;
      }
      sends.push_back(Send{m_.stage_of(c[i].task) * tp_ + r, MessageTag{step_, t}, out, end + lat});
      continue;
    }
    if (c[i].task.kind == t.kind) rk.input[ci] = out;  // activations forward, gradients back
    satisfy(rk, ci);
  }
  if (!sends.empty()) {
    lk.unlock();
    post_sends(rk, sends);
    lk.lock();
  }
  prev_end = end;
  return true;
}

// Sends never wait for the receiver; with emulated latency they leave from the delay line.
void Stage::post_sends(Rank& rk, std::vector<Send>& sends) {
  FailureState* failure = &failure_;
  auto done = [failure](std::exception_ptr e) {
    if (e && !failure->failed()) failure->fail(e);
  };
  for (Send& s : sends) {
    Transport* tr = rk.transport;
    auto go = [tr, s = std::move(s), done]() mutable {
      try {
        tr->send(s.dst, s.tag, std::move(s.payload), done);
      } catch (const std::exception&) {
        done(std::current_exception());
      }
    };
    if (env_.delay && s.due > now_ns())
      env_.delay->post(s.due, std::move(go));
    else
      go();
  }
}

}  // namespace rrfp
