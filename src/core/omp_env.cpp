#include "core/omp_env.hpp"

#include <algorithm>
#include <cstdlib>

#include "core/error.hpp"
#include "core/printable.hpp"

namespace rrfp {

bool omp_thread_counts(const std::string& list) {
  std::size_t at = 0;
  for (;;) {
    const std::size_t comma = std::min(list.find(',', at), list.size());
    const std::string count = list.substr(at, comma - at);
    if (count.empty() || count.size() > 9 ||
        count.find_first_not_of("0123456789") != std::string::npos)
      return false;
    if (const long n = std::stol(count); n < 1 || n > kMaxOmpThreads) return false;
    if (comma == list.size()) return true;
    at = comma + 1;
  }
}

bool omp_num_threads_set() {
  const char* omp = std::getenv("OMP_NUM_THREADS");
  if (omp == nullptr || *omp == '\0') return false;
  if (!omp_thread_counts(omp))
    throw InputError("OMP_NUM_THREADS: '" + printable(omp) + "' is no thread count (1 to " +
                     std::to_string(kMaxOmpThreads) + ", or a comma-separated list of them)");
  return true;
}

}  // namespace rrfp
