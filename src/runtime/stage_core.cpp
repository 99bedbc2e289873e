#include "runtime/stage_core.hpp"

#include <algorithm>
#include <new>

#include "core/error.hpp"

namespace rrfp {

StageCore::StageCore(const StageEnv& e, int s, TpCollective* group)
    : env_(e),
      m_(*e.model),
      stage_(s),
      tp_(e.tp),
      failure_(*e.failure),
      group_(group),
      ranks_(e.tp) {
  // The transports are set by adopt() before any thread of the stage runs, and fixed after.
  cv_.set_spin(e.idle_spin_ns, [this] {
    bool moved = false;
    for (const StageRank& rk : ranks_)
      if (rk.local()) moved |= rk.transport->progress();
    return moved;
  });
}

void StageCore::adopt(int r, std::unique_ptr<StageProgram> program, Transport* endpoint) {
  StageRank& rk = ranks_[r];
  rk.program = std::move(program);
  rk.transport = endpoint;
  if (rk.local() && !rk.transport) throw Error(name(r) + ": has a program but no endpoint");
  if (rk.local()) rk.driver.emplace(m_, *env_.hint, env_.dispatch, tp_, stage_, r);
}

std::string endpoint_name(int endpoint, int tp) {
  tp = std::max(1, tp);
  return "stage " + std::to_string(endpoint / tp) +
         (tp > 1 ? " tp rank " + std::to_string(endpoint % tp) : "");
}

std::string StageCore::name(int r) const {
  return endpoint_name(stage_ * tp_ + r, tp_);
}

std::string StageCore::peer(int endpoint) const {
  if (env_.peer_name) return env_.peer_name(endpoint);
  return endpoint_name(endpoint, tp_);
}

void StageCore::record_blocked(Locked&, int r, std::int64_t from, std::int64_t to,
                               BlockReason why) {
  if (to <= from) return;
  RankResult& res = ranks_[r].result;
  res.stats.add_blocked(why, to - from);
  res.blocked.push_back(BlockedSpan{stage_, r, from - t0_, to - t0_, why});
}

void StageCore::send(int r, int dst, const MessageTag& tag, Payload payload) const {
  FailureState* f = &failure_;
  auto done = [f](std::exception_ptr e) {
    if (e && !f->failed()) f->fail_send(e);
  };
  try {
    ranks_[r].transport->send(dst, tag, std::move(payload), done);
  } catch (const InputError&) {
    // Refused before it left (a destination out of range): no break of the transport.
    if (!f->failed()) f->fail(std::current_exception());
  } catch (const std::bad_alloc&) {
    if (!f->failed()) f->fail(std::current_exception());
  } catch (const std::exception&) {
    done(std::current_exception());  // Gloo refuses at once a pair it knows closed
  }
}

bool StageCore::wait(Locked& lk, const std::function<bool()>& done,
                     const std::function<void()>& meanwhile) {
  while (!done() && !failure_.failed()) {
    meanwhile();
    if (!done() && !failure_.failed()) sleep(lk);
  }
  return !failure_.failed();
}

}  // namespace rrfp
