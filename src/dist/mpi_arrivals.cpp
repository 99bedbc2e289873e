#include "dist/mpi_arrivals.hpp"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "comm/mpi_check.hpp"

namespace rrfp {

std::string Arrivals::missing() const {
  std::lock_guard lk(mu_);
  if (missing_.empty()) return {};
  std::string who;
  for (std::size_t i = 0; i < missing_.size(); ++i)
    who += (i == 0 ? "" : i + 1 == missing_.size() ? " and " : ", ") + std::to_string(missing_[i]);
  return missing_.size() == 1 ? "mpi rank " + who + " has not come to it"
                              : "mpi ranks " + who + " have not come to it";
}

void Arrivals::set(std::vector<int> world_ranks) {
  std::lock_guard lk(mu_);
  missing_ = std::move(world_ranks);
}

namespace {

// Apart from the tags of MpiWorld::exchange, the only other point-to-point traffic on a job's
// communicators (the transport sends on a duplicate).
constexpr int kArrivalHeadTag = 3;

// The world ranks of `comm`'s ranks, by their rank there.
std::vector<int> world_ranks_of(MPI_Comm comm, int n) {
  MPI_Group group = MPI_GROUP_NULL, world = MPI_GROUP_NULL;
  MPI_Comm_group(comm, &group);
  MPI_Comm_group(MPI_COMM_WORLD, &world);
  std::vector<int> mine(n), out(n);
  for (int r = 0; r < n; ++r)
    mine[r] = r;
  MPI_Group_translate_ranks(group, n, mine.data(), world, out.data());
  MPI_Group_free(&group);
  MPI_Group_free(&world);
  return out;
}

}  // namespace

std::vector<std::uint64_t> exchange_heads(std::uint64_t size, std::uint64_t kind, void* opaque,
                                          Arrivals& arrivals) {
  const MPI_Comm comm = static_cast<MPI_Comm>(opaque);
  int n = 0, me = 0;
  MPI_Comm_size(comm, &n);
  MPI_Comm_rank(comm, &me);
  const std::uint64_t head[2] = {size, kind};
  std::vector<std::uint64_t> heads(2 * static_cast<std::size_t>(n));
  heads[2 * me] = size;
  heads[2 * me + 1] = kind;
  if (n == 1) return heads;
  // Messages from one rank on one tag arrive in the order sent: a gather's heads pair with the
  // same gather's everywhere, as a collective's do.
  std::vector<MPI_Request> recvs, sends;
  std::vector<int> from;  // the comm rank of each receive
  for (int r = 0; r < n; ++r) {
    if (r == me) continue;
    from.push_back(r);
    recvs.emplace_back();
    mpi_check(MPI_Irecv(&heads[2 * r], 2, MPI_UINT64_T, r, kArrivalHeadTag, comm, &recvs.back()),
              "MPI_Irecv");
    sends.emplace_back();
    mpi_check(MPI_Isend(head, 2, MPI_UINT64_T, r, kArrivalHeadTag, comm, &sends.back()),
              "MPI_Isend");
  }
  const std::vector<int> world = world_ranks_of(comm, n);
  std::vector<bool> heard(from.size(), false);
  auto publish = [&] {
    std::vector<int> missing;
    for (std::size_t i = 0; i < from.size(); ++i)
      if (!heard[i]) missing.push_back(world[from[i]]);
    std::sort(missing.begin(), missing.end());
    arrivals.set(std::move(missing));
  };
  publish();
  // Tested with growing naps, as the job's other waits (mpi_world.cpp): a blocking wait polls
  // a core flat out.
  std::vector<int> done(recvs.size());
  std::size_t left = recvs.size();
  int sleep_us = 1;
  while (left > 0) {
    int count = 0;
    mpi_check(MPI_Testsome(static_cast<int>(recvs.size()), recvs.data(), &count, done.data(),
                           MPI_STATUSES_IGNORE),
              "MPI_Testsome");
    if (count > 0 && count != MPI_UNDEFINED) {
      for (int i = 0; i < count; ++i)
        heard[done[i]] = true;
      left -= count;
      publish();
      sleep_us = 1;
      continue;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(sleep_us));
    sleep_us = std::min(sleep_us * 2, 200);
  }
  arrivals.set({});
  mpi_check(MPI_Waitall(static_cast<int>(sends.size()), sends.data(), MPI_STATUSES_IGNORE),
            "MPI_Waitall");
  return heads;
}

}  // namespace rrfp
