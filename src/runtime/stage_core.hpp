#pragma once
// What the tensor-parallel ranks of one stage hosted by this process share, under one lock:
// each rank's protocol state machines (arbiter, readiness) and program, the step, and the few
// helpers the stage's coordinator (coordinator.hpp) and delivery (delivery.hpp) use. What is
// fixed at construction is read freely; what changes during a step only through a Locked.
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "comm/spin_park.hpp"
#include "comm/transport.hpp"
#include "core/modes.hpp"
#include "core/rank_driver.hpp"
#include "core/record.hpp"
#include "runtime/collective.hpp"
#include "runtime/delay_line.hpp"
#include "runtime/failure.hpp"
#include "runtime/program.hpp"

namespace rrfp {

// An endpoint (stage * tp + tp rank) as error messages name it: "stage 2", or "stage 2 tp rank
// 1" where stages have several tp ranks (both ranks of a stage read alike otherwise).
std::string endpoint_name(int endpoint, int tp);

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
  bool rendezvous_pull = false;   // RuntimeOptions::rendezvous_pull
  int window = 1;                 // RuntimeOptions::window
  std::int64_t idle_spin_ns = 0;  // RuntimeOptions::idle_spin_us
  // Names a peer endpoint in error messages (endpoint_name, or with its MPI rank).
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
  std::optional<RankDriver> driver;      // the rank's protocol (local ranks only)
  std::vector<Payload> input;            // by local task index
  std::vector<std::int64_t> arrived;     // by local task index: when its input came (-1: not)
  std::vector<std::int64_t> offer_wait;  // by local task index: TaskRecord::offer_wait
  std::vector<Message> early;            // arrivals tagged with the next step (or, before the first
                                         // step, with any: a resumed run starts past 0)
  std::optional<TaskId> running;
  std::int64_t running_since = 0;
  // When its running task entered its group's collective, -1 while not in one: written by the
  // task's thread outside the lock (TaskContext::all_reduce), read by the stall report.
  std::unique_ptr<std::atomic<std::int64_t>> in_collective =
      std::make_unique<std::atomic<std::int64_t>>(-1);
  RankResult result;
  bool local() const { return program != nullptr; }
};

class StageCore;

// Proof that the stage's lock is held: whatever changes during a step is reached only through
// a StageCore accessor that takes one, so a call that needs the lock says so in its type.
class Locked {
 public:
  // A window without the lock (sending a message takes the receiver's): nothing reached
  // through this Locked may be touched until relock().
  void unlock() { lk_.unlock(); }
  void relock() { lk_.lock(); }

 private:
  friend class StageCore;
  explicit Locked(std::mutex& mu) : lk_(mu) {}
  std::unique_lock<std::mutex> lk_;
};

class StageCore {
 public:
  StageCore(const StageEnv& env, int stage, TpCollective* group);
  // Set-up, before any thread of the stage runs: rank r's program and endpoint (no program:
  // the rank lives in another process).
  void adopt(int r, std::unique_ptr<StageProgram> program, Transport* endpoint);

  // Fixed at construction: read without the lock.
  const StageEnv& env() const { return env_; }
  const WorkModel& m() const { return m_; }
  int stage() const { return stage_; }
  int tp() const { return tp_; }
  FailureState& failure() const { return failure_; }
  TpCollective* group() const { return group_; }
  bool local(int r) const { return ranks_[r].local(); }
  // Rank r's program: called by the rank's own thread alone, without the lock.
  StageProgram& program(int r) const { return *ranks_[r].program; }
  std::string name(int r) const;         // "stage 2 tp rank 1"
  std::string peer(int endpoint) const;  // "stage 2", or as env.peer_name says
  // Sends from rank r's endpoint; a failure, now or on completion, ends the step. Call
  // without the stage lock: an in-process receiver takes its own stage's lock.
  void send(int r, int dst, const MessageTag& tag, Payload payload) const;

  Locked lock() const { return Locked(mu_); }
  // What changes during a step, under the lock.
  StageRank& rank(Locked&, int r) { return ranks_[r]; }
  const StageRank& rank(const Locked&, int r) const { return ranks_[r]; }
  RankDriver& driver(Locked&, int r) { return *ranks_[r].driver; }
  int step(const Locked&) const { return step_; }
  std::int64_t t0(const Locked&) const { return t0_; }
  void begin(Locked&, int step, std::int64_t t0) {
    step_ = step;
    t0_ = t0;
  }
  // Rank r was blocked from `from` to `to` (absolute ns): its stats and its trace span.
  void record_blocked(Locked&, int r, std::int64_t from, std::int64_t to, BlockReason why);
  void notify(Locked&) { cv_.notify_all(); }  // wakes every rank that sleeps
  // Spins first for env().idle_spin_ns, lending the thread to the local ranks' transports.
  void sleep(Locked& lk) { cv_.wait(lk.lk_); }
  // Sleeps until `done` or the step failed, calling `meanwhile` (what an idle rank may take)
  // before each sleep. False when the step failed.
  bool wait(Locked& lk, const std::function<bool()>& done, const std::function<void()>& meanwhile);

  // After the step's threads have ended (joined): what rank r recorded.
  const RankResult& result(int r) const { return ranks_[r].result; }

 private:
  const StageEnv env_;
  const WorkModel& m_;
  const int stage_, tp_;
  FailureState& failure_;
  TpCollective* const group_;
  mutable std::mutex mu_;
  SpinPark cv_;
  std::vector<StageRank> ranks_;  // by tp rank
  int step_ = -1;
  std::int64_t t0_ = 0;
};

}  // namespace rrfp
