#pragma once
// What the tensor-parallel ranks of one stage hosted by this process share, under one lock:
// each rank's protocol state machines (arbiter, readiness) and program, the step, and the few
// helpers the stage's coordinator (coordinator.hpp) and delivery (delivery.hpp) use. A plain
// struct on purpose: it is the stage's inside, seen only by the stage's own parts.
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "comm/transport.hpp"
#include "core/modes.hpp"
#include "core/rank_driver.hpp"
#include "core/record.hpp"
#include "runtime/collective.hpp"
#include "runtime/delay_line.hpp"
#include "runtime/failure.hpp"
#include "runtime/program.hpp"

namespace rrfp {

class Delivery;

// Emulated message latency of a task's output on a tensor-parallel rank (0: none).
using LatencyFn = std::function<std::int64_t(int tp_rank, const TaskId& producer)>;

// What every stage of a runtime shares.
struct StageEnv {
  const WorkModel* model = nullptr;
  const Hint* hint = nullptr;
  DispatchOptions dispatch;  // the arbiter's options resolved
  int tp = 1;
  FailureState* failure = nullptr;
  DelayLine* delay = nullptr;  // required when latency is set
  LatencyFn latency;
  bool rendezvous_pull = false;  // RuntimeOptions::rendezvous_pull
  // Names a peer endpoint in error messages ("stage 2", or with its MPI rank).
  std::function<std::string(int endpoint)> peer_name;
};

struct RankResult {
  std::vector<TaskRecord> tasks;
  std::vector<BlockedSpan> blocked;
  RankStats stats;
  std::vector<std::int64_t> gaps;  // task end -> next dispatch, when the next was already ready
  std::int64_t rounds = 0, failed_rounds = 0;
  int peak_d = 0, peak_pending_w = 0;
};

struct StageRank {
  std::unique_ptr<StageProgram> program;  // null: the rank lives in another process
  Transport* transport = nullptr;
  std::optional<RankDriver> driver;   // the rank's protocol (local ranks only)
  std::vector<Payload> input;         // by local task index
  std::vector<std::int64_t> arrived;  // by local task index: when its input came (-1: not)
  std::vector<Message> early;         // arrivals tagged with the next step (or, before the first
                                      // step, with any: a resumed run starts past 0)
  std::optional<TaskId> running;
  std::int64_t running_since = 0;
  RankResult result;
  bool local() const { return program != nullptr; }
};

struct StageCore {
  StageCore(const StageEnv& env, int stage);

  StageEnv env;
  const WorkModel& m;
  int stage, tp;
  FailureState& failure;
  TpCollective* group = nullptr;
  Delivery* delivery = nullptr;

  mutable std::mutex mu;
  std::condition_variable cv;
  std::vector<StageRank> ranks;  // by tp rank
  int step = -1;
  std::int64_t t0 = 0;

  StageRank& rank(int r) { return ranks[r]; }
  RankDriver& driver(int r) { return *ranks[r].driver; }
  std::string name(int r) const;         // "stage 2 tp rank 1"
  std::string peer(int endpoint) const;  // "stage 2", or as env.peer_name says
  // Rank r was blocked from `from` to `to` (absolute ns): its stats and its trace span.
  void record_blocked(int r, std::int64_t from, std::int64_t to, BlockReason why);
  // Sends from rank r's endpoint; a failure, now or on completion, ends the step. Call
  // without the stage lock: an in-process receiver takes its own stage's lock.
  void send(int r, int dst, const MessageTag& tag, Payload payload);
  // Sleeps (lock held on entry and exit) until `done` or the step failed, taking what the
  // delivery lets an idle rank take meanwhile. False when the step failed.
  bool wait(std::unique_lock<std::mutex>& lk, int r, const std::function<bool()>& done);
};

}  // namespace rrfp
