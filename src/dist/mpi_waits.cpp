#include "dist/mpi_waits.hpp"

#include <algorithm>
#include <chrono>
#include <thread>

#include "comm/mpi_check.hpp"

namespace rrfp {

void wait_napping(std::span<MPI_Request> reqs, const char* what,
                  const std::function<void(int)>& done) {
  std::vector<int> index(reqs.size());
  std::size_t left = reqs.size();
  int sleep_us = 1;
  while (left > 0) {
    int count = 0;
    mpi_check(MPI_Testsome(static_cast<int>(reqs.size()), reqs.data(), &count, index.data(),
                           MPI_STATUSES_IGNORE),
              what);
    if (count == MPI_UNDEFINED) return;  // none active: every one was done
    if (count > 0) {
      for (int i = 0; i < count; ++i)
        if (done) done(index[i]);
      left -= count;
      sleep_us = 1;
      continue;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(sleep_us));
    sleep_us = std::min(sleep_us * 2, 200);
  }
}

}  // namespace rrfp
