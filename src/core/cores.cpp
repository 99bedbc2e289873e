#include "core/cores.hpp"

#include <sched.h>

#include <algorithm>
#include <thread>

namespace rrfp {

int machine_cores() {
  return static_cast<int>(std::max(1U, std::thread::hardware_concurrency()));
}

int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return machine_cores();
}

}  // namespace rrfp
