#pragma once
// A job whose processes share torch.distributed process groups (torchrun): one stage per
// process over the c10d transport. With data parallelism, the caller makes the subgroups
// (torch.distributed.new_group, which every process must call alike): this replica's pipeline
// (ranks replica * P .. replica * P + P - 1, its stage = its rank there) and this stage's
// replicas (the same stage of every replica, by replica). No TP.
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <chrono>
#include <string>
#include <vector>

#include "dist/job.hpp"
#include "runtime/runtime.hpp"

namespace rrfp {

// The groups a job's process talks over.
struct C10dGroups {
  using Group = c10::intrusive_ptr<c10d::ProcessGroup>;
  Group pipeline;  // this replica's stages: the transport's messages
  // This stage across the replicas (the replicas' gathers), or null with one replica.
  Group replicas;
  // Over the pipeline's ranks, for the barrier before a step, the gathers and the exchanges
  // (null: `pipeline`). Gloo ends a collective only at its group's timeout, whatever a wait on
  // it asks, and closes every connection of the group then: these run on a group whose timeout
  // is the job's (a collective left running after a failed step held the process's exit for
  // torch's 30 minutes), the transport's receives, which stay posted between steps, on one
  // whose timeout outlasts any pause between steps.
  Group collectives;
  // Over the same ranks as `collectives` and `replicas`, for the gathers where the processes
  // meet after what each did alone between calls (arrival_gather_bytes), with the arrival's
  // longer timeout (null: `collectives` and `replicas`).
  Group arrivals, arrival_replicas;
  // The default group's rank of each of the job's ranks (job rank r = replica * P + stage),
  // where a group of the caller's numbers them otherwise (empty: the same), so that messages
  // name the rank torchrun gave each process beside the job's.
  std::vector<int> global_ranks;
};

class C10dWorld final : public Job {
 public:
  // `timeout`: the deadline of the barrier before each step and of the gathers.
  C10dWorld(C10dGroups groups, std::chrono::milliseconds timeout);
  // Lets go of the groups, then frees the transports its runtimes shut down whose peers have
  // closed theirs (C10dTransport::release_closed), so that the messages' group goes now if
  // nothing else holds it, not when the next pipeline is made.
  ~C10dWorld() override;

  int rank() const override { return replica_ * stages_ + stage_; }
  int size() const override { return stages_ * replicas_; }
  void set_layout(const JobLayout& l) override;
  int replica() const override { return replica_; }
  int endpoint() const override { return stage_; }
  Hosting hosting() override;
  std::vector<std::vector<std::byte>> all_gather_bytes(std::span<const std::byte> mine) override;
  // Over the arrival groups, waiting `within_ms` (0: no limit; the groups' own timeouts must be
  // as long, as Gloo ends a collective only at its group's timeout).
  std::vector<std::vector<std::byte>> arrival_gather_bytes(std::span<const std::byte> mine,
                                                           std::int64_t within_ms) override;
  // Unlike the Job contract with DP: rank 0 gets the bytes of its replica's stages only (all a
  // step record needs; the replicas' own stages are not gathered across).
  std::vector<std::vector<std::byte>> gather_to_root(std::span<const std::byte> mine) override;
  std::vector<std::vector<std::byte>> dp_all_gather(std::span<const std::byte> mine) override;
  std::vector<std::vector<std::byte>> replica_all_gather(std::span<const std::byte> mine) override {
    return gather_bytes(*coll_, mine, step_limit());
  }
  // Sends and receives on the pipeline's collectives group, with tags above every transport
  // channel's (the group may be the transport's own).
  std::vector<std::vector<std::byte>> exchange(std::span<const std::byte> mine,
                                               std::span<const int> peers) override;
  // c10d cannot end the other processes: this one exits, and the launcher (torchrun) ends
  // the rest when it sees a worker fail.
  [[noreturn]] void abort(int code) override;

 private:
  // How long a wait may take, and what the caller calls that limit (for the message).
  struct Limit {
    std::chrono::milliseconds ms;  // 0: none
    const char* late;              // what a failure says of the late process
  };
  // On the pipeline's own groups, longer than `timeout` by the grace a stalled process takes to
  // say what stalled (runtime.hpp's kJobGraceMs: the groups' own timeout is as long, set in
  // rrfp/_c10d.py). A caller's group keeps `timeout`: a wait given up there stays posted, and
  // the longer a process waits, the likelier a peer's next collective pairs with it.
  Limit step_limit() const {
    return {timeout_.count() > 0 && own_collectives_
                ? timeout_ + std::chrono::milliseconds(kJobGraceMs)
                : timeout_,
            "took longer than `timeout`"};
  }
  // Every rank's bytes of `pg`, by rank: one all-gather of each size with its first bytes, and
  // a second of padded buffers only when one is longer.
  std::vector<std::vector<std::byte>> gather_bytes(c10d::ProcessGroup& pg,
                                                   std::span<const std::byte> mine, Limit limit);
  // Over the pipeline's group `pipe`, then the replicas' `reps` (null: one replica).
  std::vector<std::vector<std::byte>> gather_job(c10d::ProcessGroup& pipe, c10d::ProcessGroup* reps,
                                                 std::span<const std::byte> mine, Limit limit);
  void barrier();
  // "rank R of the job", with its global rank where the caller's group numbers it otherwise.
  std::string job_rank_name(int r) const;
  void wait(const c10::intrusive_ptr<c10d::Work>& w, const char* what, Limit limit);
  void wait(const c10::intrusive_ptr<c10d::Work>& w, const char* what) {
    wait(w, what, step_limit());
  }

  // pg_ carries the transport; coll_ and dp_ the collectives, arr_ and arr_dp_ the arrival
  // gathers (C10dGroups).
  c10::intrusive_ptr<c10d::ProcessGroup> pg_, coll_, dp_, arr_, arr_dp_;
  std::vector<int> global_ranks_;  // C10dGroups::global_ranks
  // Whether arr_ was made for the arrivals: else it is the collectives' group, the caller's
  // own, whose timeout ends an arrival's wait (a wait given up before leaves Gloo's gather
  // posted, for a late process to pair with and run a step alone).
  bool own_arrivals_ = false;
  // Whether coll_ was made for the collectives (with the pipeline's timeout): else it is the
  // caller's group, whose own timeout outlasts the waits given up here.
  bool own_collectives_ = false;
  // The first collective given up on the caller's group: it stays posted there, the next
  // collective of a peer pairs with it, and every later one is off by one (the processes'
  // batches were then called different, step after step). Every collective after it is
  // refused at once, naming it.
  std::string given_up_;
  void refuse_given_up() const;
  std::chrono::milliseconds timeout_;
  int stage_ = 0, stages_ = 1, replica_ = 0, replicas_ = 1;
};

}  // namespace rrfp
