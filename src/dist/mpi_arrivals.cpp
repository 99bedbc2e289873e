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

// The world ranks of the ranks `at` meets, by their place there.
std::vector<int> world_ranks_of(const Meeting& at) {
  MPI_Group group = MPI_GROUP_NULL, world = MPI_GROUP_NULL;
  MPI_Comm_group(static_cast<MPI_Comm>(at.comm), &group);
  MPI_Comm_group(MPI_COMM_WORLD, &world);
  std::vector<int> out(at.ranks.size());
  MPI_Group_translate_ranks(group, static_cast<int>(at.ranks.size()), at.ranks.data(), world,
                            out.data());
  MPI_Group_free(&group);
  MPI_Group_free(&world);
  return out;
}

// Waits for `reqs`, each with the place in `at` of the rank it awaits (`place`), keeping in
// `arrivals` the world ranks of those not done.
void wait_for_peers(std::vector<MPI_Request>& reqs, const std::vector<std::size_t>& place,
                    const Meeting& at, bool came, Arrivals& arrivals) {
  const std::vector<int> world = world_ranks_of(at);
  std::vector<int> pending(world.size(), 0);
  for (std::size_t p : place)
    ++pending[p];
  auto publish = [&] {
    std::vector<int> missing;
    for (std::size_t p = 0; p < world.size(); ++p)
      if (pending[p] > 0) missing.push_back(world[p]);
    std::sort(missing.begin(), missing.end());
    arrivals.set(std::move(missing), came);
  };
  publish();
  wait_napping(reqs, came ? "MPI_Irecv/MPI_Isend (bytes)" : "MPI_Irecv/MPI_Isend (sizes)",
               [&](int i) {
                 if (--pending[place[i]] == 0) publish();
               });
  arrivals.set({});
}

}  // namespace

std::vector<std::uint64_t> exchange_heads(std::uint64_t size, std::uint64_t kind, const Meeting& at,
                                          Arrivals& arrivals) {
  const MPI_Comm comm = static_cast<MPI_Comm>(at.comm);
  const std::uint64_t head[2] = {size, kind};
  std::vector<std::uint64_t> heads(2 * at.ranks.size());
  heads[2 * at.me] = size;
  heads[2 * at.me + 1] = kind;
  // Messages from one rank on one tag arrive in the order sent: a gather's heads pair with the
  // same gather's everywhere, as a collective's do.
  std::vector<MPI_Request> reqs;
  std::vector<std::size_t> place;  // of the rank each request awaits
  for (std::size_t p = 0; p < at.ranks.size(); ++p) {
    if (p == at.me) continue;
    reqs.resize(reqs.size() + 2);
    place.insert(place.end(), 2, p);
    mpi_check(MPI_Irecv(&heads[2 * p], 2, MPI_UINT64_T, at.ranks[p], at.tag, comm,
                        &reqs[reqs.size() - 2]),
              "MPI_Irecv");
    mpi_check(MPI_Isend(head, 2, MPI_UINT64_T, at.ranks[p], at.tag, comm, &reqs.back()),
              "MPI_Isend");
  }
  wait_for_peers(reqs, place, at, false, arrivals);
  return heads;
}

std::vector<std::vector<std::byte>> exchange_parts(std::span<const std::byte> mine,
                                                   const std::vector<std::uint64_t>& heads,
                                                   const Meeting& at, Arrivals& arrivals) {
  const MPI_Comm comm = static_cast<MPI_Comm>(at.comm);
  std::vector<std::vector<std::byte>> out(at.ranks.size());
  out[at.me].assign(mine.begin(), mine.end());
  std::vector<MPI_Request> reqs;
  std::vector<std::size_t> place;  // of the rank each request awaits
  for (std::size_t p = 0; p < at.ranks.size(); ++p) {
    if (p == at.me) continue;
    const int r = at.ranks[p];
    out[p].resize(heads[2 * p]);
    post_pieces(out[p].size(), reqs, [&](std::size_t from, int count, MPI_Request* req) {
      mpi_check(MPI_Irecv(out[p].data() + from, count, MPI_BYTE, r, at.tag + 1, comm, req),
                "MPI_Irecv");
    });
    post_pieces(mine.size(), reqs, [&](std::size_t from, int count, MPI_Request* req) {
      mpi_check(MPI_Isend(mine.data() + from, count, MPI_BYTE, r, at.tag + 1, comm, req),
                "MPI_Isend");
    });
    place.resize(reqs.size(), p);
  }
  wait_for_peers(reqs, place, at, true, arrivals);
  return out;
}

}  // namespace rrfp
