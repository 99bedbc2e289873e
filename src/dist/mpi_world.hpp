#pragma once
// One process of an `mpirun -np N` job: Open MPI initialised with MPI_THREAD_MULTIPLE, and the
// job split into a PP x TP x DP layout. World rank w is replica w / (P*T) and, inside it,
// pipeline endpoint w % (P*T), i.e. stage (w % (P*T)) / T, tensor-parallel rank w % T, the
// same numbering the in-process runtime gives its endpoints. This header does not include
// <mpi.h>: only the mpi_*.cpp files of comm/ (the transport) and dist/ (the job) do.
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "comm/mpi_transport.hpp"
#include "dist/deadline.hpp"
#include "dist/job.hpp"
#include "dist/mpi_arrivals.hpp"
#include "runtime/collective.hpp"

namespace rrfp {

struct MpiWorldOptions {
  // Every MPI call that waits for the other processes outside a step (start-up, communicator
  // splits, the barrier before a step, gathers of results, shutdown) must end within this long,
  // or the job is ended naming the call: a process that is stopped or gone would otherwise
  // leave the others waiting forever (inside a step the runtime's watchdog does this). Start-up
  // and shutdown get at least kMinStartupMs. 0 disables every deadline.
  std::int64_t timeout_ms = 120'000;
  static constexpr std::int64_t kMinStartupMs = 10'000;
  // What the expiry's message calls the limit: the CLI's flag, the Python option.
  std::string limit_name = "--timeout";
  // The Python pipeline's `arrival_timeout` (-1: none): how much later than the others a
  // process may come to start-up, to a new layout's splits and to shutdown (0: no limit; at
  // least kMinStartupMs), as to its calls' gathers (arrival_gather_bytes): a process may
  // prepare data before it builds its Pipeline, or evaluate after its last step.
  std::int64_t arrival_ms = -1;
  // Given to every runtime this world hosts (Hosting::on_peer_failure).
  std::function<void()> on_peer_failure;
};

class MpiWorld final : public Job {
 public:
  // Initialises MPI (once per process). Throws Error if the library cannot give
  // MPI_THREAD_MULTIPLE.
  explicit MpiWorld(MpiWorldOptions o = {});
  ~MpiWorld();  // a barrier, then MPI_Finalize
  MpiWorld(const MpiWorld&) = delete;
  MpiWorld& operator=(const MpiWorld&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  // Splits the job. Throws InputError when the job's size is not pp * tp * dp.
  void set_layout(const JobLayout& l) override;
  int replica() const override { return rank_ / (layout_.pp * layout_.tp); }
  int endpoint() const override { return rank_ % (layout_.pp * layout_.tp); }
  int stage() const { return endpoint() / layout_.tp; }
  int tp_rank() const { return rank_ % layout_.tp; }
  // The world rank of endpoint `e` of this replica (for error messages).
  int world_rank_of(int e) const { return replica() * layout_.pp * layout_.tp + e; }

  // This process's endpoint of its replica's pipeline (ranks = endpoint ids).
  std::unique_ptr<Transport> make_transport(MpiPollOptions poll = {}, MpiLargeMessages large = {});
  // This endpoint, its transport, the TP group's collective, a barrier before each step, and
  // peers named with their MPI ranks in error messages.
  Hosting hosting() override;
  // The collective of this process's tensor-parallel group.
  std::unique_ptr<TpCollective> make_tp_group(int stage);
  std::vector<std::vector<std::byte>> all_gather_bytes(std::span<const std::byte> mine) override;
  std::vector<std::vector<std::byte>> arrival_gather_bytes(std::span<const std::byte> mine,
                                                           std::int64_t within_ms) override;
  std::vector<std::vector<std::byte>> dp_all_gather(std::span<const std::byte> mine) override;
  std::vector<std::vector<std::byte>> replica_all_gather(std::span<const std::byte> mine) override;
  std::vector<std::vector<std::byte>> exchange(std::span<const std::byte> mine,
                                               std::span<const int> peers) override;
  // Rank 0 gets every rank's bytes, by world rank; the others get nothing.
  std::vector<std::vector<std::byte>> gather_to_root(std::span<const std::byte> mine) override;
  void barrier();
  // An all-gather at the end of the program, before the closing barrier, within what that
  // barrier waits: where the processes' front end opens each of its calls with an arrival
  // gather, a process ending while another makes a call meets it here, not in no collective.
  std::vector<std::vector<double>> ending_gather(std::span<const double> mine);
  // Ends the whole job: every process, this one included, exits with `code`.
  [[noreturn]] void abort(int code) override;

 private:
  struct Comms;
  // What a wait for the other processes is: one of a step or between steps (timeout_ms, with
  // any allowance); one where the processes meet at start-up, at a new layout's splits or at
  // shutdown (at least kMinStartupMs; arrival_ms where given); or a Python call's arrival
  // gather (its own limit).
  enum class Wait { kStep, kEnds, kArrival };
  // Arms the guard for `call`; `arrival_ms` is the limit of a kArrival wait.
  DeadlineGuard::Phase deadline(const char* call, Wait wait = Wait::kStep,
                                std::int64_t arrival_ms = 0);
  // `phase`: the call and the name of its limit, as deadline() armed them.
  [[noreturn]] void expired(const std::string& phase, std::int64_t ms,
                            DeadlineGuard::Stopped stopped);
  // What an all-gather is, exchanged with its sizes, and on which communicator. A process whose
  // step failed (a timeout, an interrupt) where the others' completed skipped the step's closing
  // gather and went on to its next call's: the two paired, and a script that caught the error
  // went on with one update of two steps' batches.
  enum class GatherKind : std::uint64_t {
    kStep = 1,
    kCall = 2,
    kGradients = 3,
    kReplica = 4,
    kBarrier = 5,
    kShutdown = 6
  };
  enum class Group { kWorld, kDp, kPipe };
  std::vector<std::vector<std::byte>> gathered(std::span<const std::byte> mine, Group group,
                                               GatherKind kind);
  // The processes of a group (the job's where `world`) made gathers of other kinds (`kinds`,
  // by their rank in it; `me`, this process's): ends the job.
  [[noreturn]] void out_of_step(const std::vector<std::uint64_t>& kinds, bool world, int me);

  MpiWorldOptions opt_;
  int rank_ = 0, size_ = 1;
  std::atomic<bool> live_{false};  // MPI is initialised and not finalising: MPI_Abort is safe
  JobLayout layout_;
  std::unique_ptr<Comms> comms_;
  Arrivals arrivals_;    // the ranks an all-gather awaits, for expired()
  DeadlineGuard guard_;  // last: its thread may call expired(), which reads the members above
};

}  // namespace rrfp
