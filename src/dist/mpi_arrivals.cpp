#include "dist/mpi_arrivals.hpp"

#include <mpi.h>

#include <algorithm>

#include "comm/mpi_check.hpp"
#include "dist/mpi_waits.hpp"

namespace rrfp {

std::string Arrivals::missing() const {
  std::lock_guard lk(mu_);
  if (missing_.empty()) return {};
  std::string who;
  for (std::size_t i = 0; i < missing_.size(); ++i)
    who += (i == 0 ? "" : i + 1 == missing_.size() ? " and " : ", ") + std::to_string(missing_[i]);
  const bool one = missing_.size() == 1;
  return (one ? "mpi rank " : "mpi ranks ") + who +
         (came_ ? (one ? " came to it but has not finished its exchange with this process"
                       : " came to it but have not finished their exchange with this process")
                : (one ? " has not come to it" : " have not come to it"));
}

void Arrivals::set(std::vector<int> world_ranks, bool came) {
  std::lock_guard lk(mu_);
  missing_ = std::move(world_ranks);
  came_ = came;
}

namespace {

// Apart from the tags of MpiWorld::exchange (1, 2), on the job's own communicators: the world's
// is a duplicate, apart from a script's messages.
constexpr int kArrivalHeadTag = 3, kArrivalPartTag = 4;

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

// Waits for `reqs`, each with the comm rank it awaits (`peer`), keeping in `arrivals` the world
// ranks of those not done.
void wait_for_peers(std::vector<MPI_Request>& reqs, const std::vector<int>& peer, MPI_Comm comm,
                    bool came, Arrivals& arrivals) {
  int n = 0;
  MPI_Comm_size(comm, &n);
  const std::vector<int> world = world_ranks_of(comm, n);
  std::vector<int> pending(n, 0);
  for (int p : peer)
    ++pending[p];
  auto publish = [&] {
    std::vector<int> missing;
    for (int r = 0; r < n; ++r)
      if (pending[r] > 0) missing.push_back(world[r]);
    std::sort(missing.begin(), missing.end());
    arrivals.set(std::move(missing), came);
  };
  publish();
  wait_napping(reqs,
               came ? "MPI_Irecv/MPI_Isend (a gather's bytes)" : "MPI_Irecv (a gather's sizes)",
               [&](int i) {
                 if (--pending[peer[i]] == 0) publish();
               });
  arrivals.set({});
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
  // Messages from one rank on one tag arrive in the order sent: a gather's heads pair with the
  // same gather's everywhere, as a collective's do.
  std::vector<MPI_Request> recvs, sends;
  std::vector<int> from, to;
  for (int r = 0; r < n; ++r) {
    if (r == me) continue;
    from.push_back(r);
    recvs.emplace_back();
    mpi_check(MPI_Irecv(&heads[2 * r], 2, MPI_UINT64_T, r, kArrivalHeadTag, comm, &recvs.back()),
              "MPI_Irecv");
    to.push_back(r);
    sends.emplace_back();
    mpi_check(MPI_Isend(head, 2, MPI_UINT64_T, r, kArrivalHeadTag, comm, &sends.back()),
              "MPI_Isend");
  }
  wait_for_peers(recvs, from, comm, false, arrivals);
  wait_for_peers(sends, to, comm, false, arrivals);
  return heads;
}

std::vector<std::vector<std::byte>> exchange_parts(std::span<const std::byte> mine,
                                                   const std::vector<std::uint64_t>& heads,
                                                   void* opaque, Arrivals& arrivals) {
  const MPI_Comm comm = static_cast<MPI_Comm>(opaque);
  int n = 0, me = 0;
  MPI_Comm_size(comm, &n);
  MPI_Comm_rank(comm, &me);
  std::vector<std::vector<std::byte>> out(n);
  out[me].assign(mine.begin(), mine.end());
  std::vector<MPI_Request> reqs;
  std::vector<int> peer;  // the comm rank of each request
  for (int r = 0; r < n; ++r) {
    if (r == me) continue;
    out[r].resize(heads[2 * r]);
    post_pieces(out[r].size(), reqs, [&](std::size_t at, int count, MPI_Request* req) {
      mpi_check(MPI_Irecv(out[r].data() + at, count, MPI_BYTE, r, kArrivalPartTag, comm, req),
                "MPI_Irecv");
    });
    post_pieces(mine.size(), reqs, [&](std::size_t at, int count, MPI_Request* req) {
      mpi_check(MPI_Isend(mine.data() + at, count, MPI_BYTE, r, kArrivalPartTag, comm, req),
                "MPI_Isend");
    });
    peer.resize(reqs.size(), r);
  }
  wait_for_peers(reqs, peer, comm, true, arrivals);
  return out;
}

}  // namespace rrfp
