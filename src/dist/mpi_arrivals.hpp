#pragma once
// Who has come to an all-gather of the job. Each gather opens with every rank's (size, kind),
// sent to every other rank of its communicator point to point rather than by MPI_Iallgather:
// a collective cannot say which ranks it still waits for, and a deadline's line under data
// parallelism named none ("a process of the job is stopped, gone or far behind", from three
// processes, the stopped one among none of them). While the heads are awaited, the ranks not
// yet heard from are kept where the deadline's watchdog can read them.
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace rrfp {

class Arrivals {
 public:
  // "mpi rank 2 has not come to it" or "mpi ranks 0 and 2 have not come to it"; empty where
  // no gather's heads are awaited.
  std::string missing() const;
  void set(std::vector<int> world_ranks);

 private:
  mutable std::mutex mu_;
  std::vector<int> missing_;  // world ranks, ascending
};

// Every rank's head (`size`, `kind`) of the gather on `comm` (an MPI_Comm, kept opaque here),
// by its rank there, this rank's included; `arrivals` holds the ranks awaited meanwhile.
std::vector<std::uint64_t> exchange_heads(std::uint64_t size, std::uint64_t kind, void* comm,
                                          Arrivals& arrivals);

}  // namespace rrfp
