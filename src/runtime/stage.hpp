#pragma once
// One pipeline stage in the runtime: the tensor-parallel ranks of it that this process hosts
// (all T in one process; one when ranks are processes), each with its own compute thread
// (run_rank), arbiter, inputs and program, and one lock for the whole group so the in-process
// coordination protocols see a consistent picture. A group spread over processes coordinates
// by control messages instead (coordination.cpp). Arrivals are routed by
// on_message from the transport's context: matched to the task that needs them, stored in that
// task's input slot, and the task marked ready, waking the compute thread. See
// docs/runtime.md for the thread model.
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "comm/transport.hpp"
#include "core/arbiter.hpp"
#include "runtime/collective.hpp"
#include "runtime/delay_line.hpp"
#include "runtime/failure.hpp"
#include "runtime/program.hpp"
#include "sim/simulator.hpp"

namespace rrfp {

// Emulated message latency of a task's output on a tensor-parallel rank (0: none).
using LatencyFn = std::function<std::int64_t(int tp_rank, const TaskId& producer)>;

// What every stage of a runtime shares.
struct StageEnv {
  const WorkModel* model = nullptr;
  const Hint* hint = nullptr;
  ArbiterOptions arbiter;  // resolved
  TpProtocol protocol = TpProtocol::Leader;
  CommMode comm = CommMode::Async;
  int tp = 1;
  FailureState* failure = nullptr;
  DelayLine* delay = nullptr;  // required when latency is set
  LatencyFn latency;
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

class Stage {
 public:
  // `endpoints[r]` is tensor-parallel rank r's transport; endpoint ids are stage * T + r. A
  // rank hosted by another process has neither program nor endpoint (nullptr).
  Stage(const StageEnv& env, int stage, std::vector<std::unique_ptr<StageProgram>> programs,
        std::vector<Transport*> endpoints, TpCollective* group);

  void begin_step(int step, std::int64_t t0);  // before the compute threads start
  void run_rank(int r);                        // the compute thread of rank r
  void on_message(int r, Message&& msg);       // transport context
  void wake();                                 // after a failure: every waiting rank exits
  std::string describe(std::int64_t now) const;
  const RankResult& result(int r) const { return ranks_[r].result; }
  bool local(int r) const { return ranks_[r].program != nullptr; }

 private:
  struct Rank {
    std::unique_ptr<StageArbiter> arb;
    std::unique_ptr<StageProgram> program;
    Transport* transport = nullptr;
    std::vector<std::int8_t> missing;  // by task index
    std::vector<char> arrived;         // a cross-stage input's message has come in
    std::vector<char> received;        // ... and has been delivered to its task
    std::vector<Payload> input;        // by task index
    std::deque<TaskId> chosen;         // leader protocol: the leader's choices not yet run
    // agree across processes: this rank's next round, and the peers' proposals by round
    int round = 0;
    std::map<int, std::vector<std::optional<TaskId>>> proposals;
    std::vector<Message> early;  // arrivals tagged with the next step
    // Blocking (rendezvous) mode: transfers offered to this rank and not yet accepted, sends of
    // this rank not yet acknowledged, and the list position of the next posted receive.
    std::vector<std::pair<int, Message>> offers;
    int held = 0;
    std::int64_t held_since = 0;
    int recv_pos = 0;
    std::uint64_t failed_version = ~0ULL;
    std::optional<TaskId> running;
    std::int64_t running_since = 0;
    RankResult result;
  };
  struct Send {
    int dst;
    MessageTag tag;
    Payload payload;
    std::int64_t due;
  };

  std::string name(int r) const;
  // Rank r was blocked from `from` to `to` (absolute ns): its stats and its trace span.
  void record_blocked(int r, std::int64_t from, std::int64_t to, BlockReason why);
  void route(int r, Message&& msg);
  void deliver(Rank& rk, int index, Payload payload);
  void satisfy(Rank& rk, int index);
  void acknowledged(int r, const Message& msg);
  int posted_receive(Rank& rk);
  bool accept_offers(std::unique_lock<std::mutex>& lk, int r);
  void complete_transfer(int r, int index, Message msg);
  std::optional<TaskId> choose(std::unique_lock<std::mutex>& lk, int r);
  std::optional<TaskId> agree(std::unique_lock<std::mutex>& lk, int r);
  std::optional<TaskId> agree_remote(std::unique_lock<std::mutex>& lk, int r);
  void send_control(std::unique_lock<std::mutex>& lk, int r, const MessageTag& tag,
                    const std::vector<int>& peers);
  void on_control(int r, Message&& msg);
  std::string peer(int endpoint) const;
  bool execute(std::unique_lock<std::mutex>& lk, int r, const TaskId& t, std::int64_t& prev_end);
  Payload call_program(Rank& rk, TaskContext& ctx, const TaskId& t, Payload in);
  void post_sends(Rank& rk, std::vector<Send>& sends);
  std::string expected_messages(const Rank& rk) const;

  StageEnv env_;
  const WorkModel& m_;
  int stage_, tp_;
  bool distributed_ = false;  // some rank of this group lives in another process
  TpCollective* group_;
  FailureState& failure_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Rank> ranks_;
  int step_ = -1;
  std::int64_t t0_ = 0;
  std::uint64_t version_ = 0;  // bumped whenever any rank's ready set grows
  struct Round {
    std::uint64_t id = 0, version_at_start = 0;
    std::uint64_t outcome_since = 0;  // version_at_start of the last completed round
    int arrived = 0;
    std::vector<std::optional<TaskId>> proposals;
    std::optional<TaskId> outcome;
  } round_;
};

}  // namespace rrfp
