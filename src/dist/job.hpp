#pragma once
// The processes of a multi-process run as the layers above the transport see them (training
// and the CLI), without naming MPI: which endpoint this process hosts, the Hosting that
// connects it, and the few collectives training needs outside the pipeline (the global
// gradient norm, the step's loss; dist/replica_sum.hpp sums the replicas' gradients over
// them). dist/mpi_world, dist/c10d_world and dist/local_job implement it.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "runtime/runtime.hpp"

namespace rrfp {

struct JobLayout {
  int pp = 1, tp = 1, dp = 1;
};

// Throws InputError naming the option unless every dimension is at least 1 and the layout
// fills exactly `ranks` ranks (`where` names the job: "mpirun -np 8").
void validate(const JobLayout& l, int ranks, const std::string& where);

// A process's steady clock against endpoint 0's: endpoint 0's time = this process's - ns, and
// the true offset lies within ns +- uncertainty_ns.
struct ClockOffset {
  std::int64_t ns = 0;
  std::int64_t uncertainty_ns = 0;
};

// Each member's bytes of a byte all-gather read as values of T.
template <typename T>
std::vector<std::vector<T>> values_of(const std::vector<std::vector<std::byte>>& all) {
  std::vector<std::vector<T>> out;
  for (const auto& b : all) {
    auto& v = out.emplace_back(b.size() / sizeof(T));
    if (!v.empty()) std::memcpy(v.data(), b.data(), v.size() * sizeof(T));  // none: null data
  }
  return out;
}

class Job {
 public:
  virtual ~Job() = default;
  virtual int rank() const = 0;  // in the whole job
  virtual int size() const = 0;
  // Splits the job; throws InputError when the job's size is not pp * tp * dp.
  virtual void set_layout(const JobLayout& l) = 0;
  virtual int replica() const = 0;   // data-parallel replica of this process
  virtual int endpoint() const = 0;  // stage * T + tp rank within its replica
  // Connects this process's endpoint to the rest of its replica's pipeline.
  virtual Hosting hosting() = 0;
  // Every rank's bytes, by job rank (sizes may differ).
  virtual std::vector<std::vector<std::byte>> all_gather_bytes(std::span<const std::byte> mine) = 0;
  // Every rank's values, by job rank (counts may differ).
  std::vector<std::vector<double>> all_gather(std::span<const double> mine) {
    return values_of<double>(all_gather_bytes(std::as_bytes(mine)));
  }
  // An all-gather where the processes meet after what each did alone between calls (the
  // Python pipeline's calls: rank 0 evaluating or saving a checkpoint meanwhile): one may come
  // up to `within_ms` later than the others (0: no limit), where all_gather_bytes allows a
  // step's deadline. A job without deadlines of its own gathers as all_gather_bytes does.
  virtual std::vector<std::vector<std::byte>> arrival_gather_bytes(std::span<const std::byte> mine,
                                                                   std::int64_t within_ms) {
    (void)within_ms;
    return all_gather_bytes(mine);
  }
  std::vector<std::vector<double>> arrival_gather(std::span<const double> mine,
                                                  std::int64_t within_ms) {
    return values_of<double>(arrival_gather_bytes(std::as_bytes(mine), within_ms));
  }
  // Rank 0 gets every rank's bytes, by job rank; the others get an empty list.
  virtual std::vector<std::vector<std::byte>> gather_to_root(std::span<const std::byte> mine) = 0;
  // The same endpoint's bytes in every replica, by replica (for the data-parallel sum).
  virtual std::vector<std::vector<std::byte>> dp_all_gather(std::span<const std::byte> mine) = 0;
  // Every endpoint of this replica's bytes, by endpoint.
  virtual std::vector<std::vector<std::byte>> replica_all_gather(
      std::span<const std::byte> mine) = 0;
  // Point to point among `peers` (endpoints of this replica in ascending order, this one among
  // them, each of which calls this with the same list): every peer's bytes, in the order of
  // `peers`. The other endpoints take no part (the copies of a parameter that some stages
  // share). Throws InputError for a list that is not such a list.
  virtual std::vector<std::vector<std::byte>> exchange(std::span<const std::byte> mine,
                                                       std::span<const int> peers) = 0;
  // Ends every process of the job with `code` (after an error on this one).
  [[noreturn]] virtual void abort(int code) = 0;

  // How this process's steady clock stands to its replica's endpoint 0 (job rank 0's, in
  // replica 0), for lining up the records of a step: measured on the first call, a collective
  // over the replica's processes (see measure_clock_offset), and kept.
  const ClockOffset& clock_offset();

  // While the returned guard lives, every wait of this process for the others outside a step
  // may take `ms` longer than the job's deadline, for `why` (the deadline's message names it):
  // the others wait for rank 0 while it writes a checkpoint, which a deadline sized for a step
  // cut short. One at a time. Only MpiWorld keeps deadlines of its own; the other jobs ignore it.
  class LongerWaits {
   public:
    explicit LongerWaits(Job* job) : job_(job) {}
    LongerWaits(LongerWaits&& o) noexcept : job_(o.job_) { o.job_ = nullptr; }
    LongerWaits(const LongerWaits&) = delete;
    LongerWaits& operator=(const LongerWaits&) = delete;
    LongerWaits& operator=(LongerWaits&&) = delete;
    ~LongerWaits() {
      if (job_) job_->set_allowance(0, {});
    }

   private:
    Job* job_;
  };
  [[nodiscard]] LongerWaits allow_longer_waits(std::int64_t ms, std::string why) {
    set_allowance(ms, std::move(why));
    return LongerWaits(this);
  }

 protected:
  // The allowance in force: milliseconds and why (0 and "" when none).
  std::pair<std::int64_t, std::string> allowance() const {
    std::lock_guard lock(allowance_mu_);
    return {allowance_ms_, allowance_why_};
  }

 private:
  void set_allowance(std::int64_t ms, std::string why) {
    std::lock_guard lock(allowance_mu_);
    allowance_ms_ = ms;
    allowance_why_ = std::move(why);
  }

  std::optional<ClockOffset> clock_offset_;
  mutable std::mutex allowance_mu_;  // collectives may wait on other threads than the setter's
  std::int64_t allowance_ms_ = 0;
  std::string allowance_why_;
};

// A refusal of bad input that some processes of a job made and others may not have (a file
// only one node lacks): every process throws one, so all exit 2 together. The one that
// `speaks` (the lowest refusing rank) carries the refusal and prints it; the others point to it.
class JobInputError : public InputError {
 public:
  JobInputError(const std::string& what, bool speaks) : InputError(what), speaks_(speaks) {}
  bool speaks() const { return speaks_; }

 private:
  bool speaks_;
};

// A failure that every process of a job raises alike, at one point, from an outcome agreed
// over the job (a gradient norm reduced over it, a checkpoint that rank 0 could not write):
// rank 0 says it and all exit together. Each process said it under mpirun (one line per
// process), and mpirun's signal to the processes still in their shutdown added a line of its
// own.
class JobError : public Error {
 public:
  using Error::Error;
};

// Runs `check` on this process and agrees on its refusals over `job` (a collective; `check`
// must call none): an InputError it throws on any process becomes a JobInputError on every
// process, the lowest refusing rank's carrying its message ("mpi rank R: " ahead on ranks
// other than 0). Without it the others waited in their next collective until --timeout, and
// the refusing process's line was never printed. Other exceptions pass as they are (they end
// the job at once). Without a job, runs `check`.
void agree_on_input(Job* job, const std::function<void()>& check);

// What names the steady clock this process reads: the kernel's boot id (every process of one
// boot reads one monotonic clock, containers included), else the host's name.
std::vector<std::byte> this_clock_id();

// A collective over the replica's processes, each passing its clock's id: processes whose
// clock is endpoint 0's get {0, 0}; each other one is measured against endpoint 0, one after
// another, by timed exchanges. Each round sends endpoint 0's time there and that process's
// time back; causality bounds the offset on both sides, and the bounds of 8 rounds are
// intersected: the uncertainty is half the shortest round trip's, or so.
ClockOffset measure_clock_offset(Job& job, std::span<const std::byte> clock_id);

// Throws InputError unless `peers` ascend, lie in 0..endpoints-1 and hold `me`; returns the
// place of `me` in them (Job::exchange's check).
std::size_t place_among(std::span<const int> peers, int me, int endpoints);

// The largest of every process's `mine`, on every process: for what all must decide alike (a
// stop asked of any of them, another warm-up step while any still maps buffers).
double max_over_job(Job& job, double mine);

// What each process read for itself and all must have read alike (a hint file, a corpus, a
// checkpoint: one path may hold other bytes on each node). A 64-bit digest, kept to 52 bits so
// that the job's gather of doubles carries it exactly.
double job_digest(std::uint64_t hash);
// For each of `digests` (this process's, one per input; negative: none here, left to its
// reader to refuse in its own words), the lowest rank that gave one, the ranks whose digest
// differs from that rank's, and every rank's value. A collective: every process gets the same
// answer.
struct Differing {
  int first = -1;
  std::vector<int> other;
  std::vector<double> by_rank;  // -1 where a rank gave none
};
std::vector<Differing> differing_over_job(Job& job, std::span<const double> digests);
// Up to 8 ranks, comma-separated ("1, 3, 4"), then ", ..." for more.
std::string rank_list(const std::vector<int>& ranks);

}  // namespace rrfp
