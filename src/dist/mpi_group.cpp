#include "dist/mpi_group.hpp"

#include <mpi.h>

#include <algorithm>
#include <array>
#include <thread>
#include <vector>

#include "comm/mpi_check.hpp"
#include "runtime/errors.hpp"

namespace rrfp {

MpiTpGroup::MpiTpGroup(void* comm, int stage) : stage_(stage) {
  MPI_Comm dup = MPI_COMM_NULL;
  mpi_check(MPI_Comm_dup(static_cast<MPI_Comm>(comm), &dup), "MPI_Comm_dup");
  MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN);
  MPI_Comm_size(dup, &size_);
  MPI_Comm_rank(dup, &rank_);
  comm_ = dup;
}

MpiTpGroup::~MpiTpGroup() {
  auto c = static_cast<MPI_Comm>(comm_);
  if (!aborted_.load()) MPI_Comm_free(&c);
}

void MpiTpGroup::wait(void* request, CollectiveIdle* idle) {
  auto* req = static_cast<MPI_Request*>(request);
  int sleep_us = 0;
  for (int spins = 0;; ++spins) {
    int flag = 0;
    mpi_check(MPI_Test(req, &flag, MPI_STATUS_IGNORE), "MPI_Test");
    if (flag) return;
    // The request is abandoned, not cancelled: the process ends after an abort.
    if (aborted_.load()) throw Aborted();
    if (idle && poked_.exchange(false)) {
      idle->serve();
      continue;
    }
    if (spins < 200) {
      std::this_thread::yield();
      continue;
    }
    sleep_us = std::min(sleep_us ? sleep_us * 2 : 5, 100);
    std::this_thread::sleep_for(std::chrono::microseconds(sleep_us));
  }
}

void MpiTpGroup::all_reduce(int rank, const TaskId& task, std::span<float> data,
                            CollectiveIdle* idle) {
  if (aborted_.load()) throw Aborted();
  auto comm = static_cast<MPI_Comm>(comm_);
  const std::array<std::int32_t, 4> mine{static_cast<std::int32_t>(task.kind), task.chunk, task.mb,
                                         static_cast<std::int32_t>(data.size())};
  std::vector<std::int32_t> all(4 * static_cast<std::size_t>(size_));
  MPI_Request req;
  mpi_check(MPI_Iallgather(mine.data(), 4, MPI_INT32_T, all.data(), 4, MPI_INT32_T, comm, &req),
            "MPI_Iallgather");
  wait(&req, idle);  // the peers entering: the rank may serve meanwhile
  for (int o = 0; o < size_; ++o) {
    const std::int32_t* h = &all[4 * static_cast<std::size_t>(o)];
    const TaskId theirs{static_cast<Kind>(h[0]), h[1], h[2]};
    if (theirs == task && h[3] == mine[3]) continue;
    throw CollectiveMismatchError(
        "stage " + std::to_string(stage_) + ": tensor-parallel rank " + std::to_string(rank) +
        " entered the all-reduce of " + to_string(task) + " (" + std::to_string(mine[3]) +
        " floats) while rank " + std::to_string(o) + " is in the all-reduce of " +
        to_string(theirs) + " (" + std::to_string(h[3]) + " floats): collective order diverged");
  }
  std::vector<float> gathered(data.size() * static_cast<std::size_t>(size_));
  mpi_check(MPI_Iallgather(data.data(), static_cast<int>(data.size()), MPI_FLOAT, gathered.data(),
                           static_cast<int>(data.size()), MPI_FLOAT, comm, &req),
            "MPI_Iallgather");
  wait(&req, nullptr);
  // Rank order on every rank: the same sum, bit for bit, everywhere.
  std::copy(gathered.begin(), gathered.begin() + static_cast<std::ptrdiff_t>(data.size()),
            data.begin());
  for (int o = 1; o < size_; ++o)
    for (std::size_t i = 0; i < data.size(); ++i)
      data[i] += gathered[o * data.size() + i];
}

}  // namespace rrfp
