#pragma once
// The job's all-gathers and exchanges, point to point. Each opens with every rank's (size, kind),
// sent to every other rank it meets, then each rank's bytes likewise: a collective cannot say
// which ranks it still waits for, and a deadline's line under data parallelism named none ("a
// process of the job is stopped, gone or far behind", from three processes, the stopped one
// among none of them). While a gather waits, the ranks it waits on are kept where the deadline's
// watchdog can read them: those whose size has not come, then those whose bytes have not all
// come or gone.
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <vector>

namespace rrfp {

class Arrivals {
 public:
  // "mpi rank 2 has not come to it", "mpi ranks 0 and 2 have not come to it", or in the bytes'
  // phase "mpi rank 2 came to it but has not finished its exchange with this process"; empty
  // where no gather waits.
  std::string missing() const;
  // `came`: the ranks are in the bytes' phase.
  void set(std::vector<int> world_ranks, bool came = false);

 private:
  mutable std::mutex mu_;
  std::vector<int> missing_;  // world ranks, ascending
  bool came_ = false;
};

// Where a gather or an exchange meets: `ranks` of `comm` (an MPI_Comm, kept opaque here), in the
// order their parts come back, this rank's at `me`; `tag` carries the sizes, `tag` + 1 the bytes.
struct Meeting {
  void* comm;
  std::vector<int> ranks;
  std::size_t me;
  int tag;
};

// Every rank's head (`size`, `kind`), by its place in `at`, this rank's included.
std::vector<std::uint64_t> exchange_heads(std::uint64_t size, std::uint64_t kind, const Meeting& at,
                                          Arrivals& arrivals);
// Every rank's bytes, by its place in `at`, `heads` giving their sizes: sent to every other rank
// in pieces an int counts.
std::vector<std::vector<std::byte>> exchange_parts(std::span<const std::byte> mine,
                                                   const std::vector<std::uint64_t>& heads,
                                                   const Meeting& at, Arrivals& arrivals);

}  // namespace rrfp
