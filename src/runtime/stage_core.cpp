#include "runtime/stage_core.hpp"

#include "runtime/delivery.hpp"

namespace rrfp {

StageCore::StageCore(const StageEnv& e, int s)
    : env(e), m(*e.model), stage(s), tp(e.tp), failure(*e.failure), ranks(e.tp) {}

std::string StageCore::name(int r) const {
  return "stage " + std::to_string(stage) + (tp > 1 ? " tp rank " + std::to_string(r) : "");
}

std::string StageCore::peer(int endpoint) const {
  if (env.peer_name) return env.peer_name(endpoint);
  return "stage " + std::to_string(endpoint / tp);
}

void StageCore::record_blocked(int r, std::int64_t from, std::int64_t to, BlockReason why) {
  if (to <= from) return;
  RankResult& res = ranks[r].result;
  res.stats.blocked += to - from;
  res.blocked.push_back(BlockedSpan{stage, r, from - t0, to - t0, why});
}

void StageCore::send(int r, int dst, const MessageTag& tag, Payload payload) {
  FailureState* f = &failure;
  auto done = [f](std::exception_ptr e) {
    if (e && !f->failed()) f->fail(e);
  };
  try {
    ranks[r].transport->send(dst, tag, std::move(payload), done);
  } catch (const std::exception&) {
    done(std::current_exception());
  }
}

bool StageCore::wait(std::unique_lock<std::mutex>& lk, int r, const std::function<bool()>& done) {
  while (!done() && !failure.failed()) {
    // A rank waiting for its group still takes rendezvous transfers, as an idle rank does:
    // the rank the group waits for may itself be held on a send to this stage.
    delivery->idle(lk, r);
    if (!done() && !failure.failed()) cv.wait(lk);
  }
  return !failure.failed();
}

}  // namespace rrfp
