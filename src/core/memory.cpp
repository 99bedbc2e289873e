#include "core/memory.hpp"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>

#include "core/error.hpp"
#include "core/format.hpp"

namespace rrfp {

namespace {

std::int64_t meminfo_available() {
  std::ifstream in("/proc/meminfo");
  std::string key, unit;
  std::int64_t kb = 0;
  while (in >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024;
  return 0;
}

std::int64_t cgroup_limit() {
  std::ifstream in("/sys/fs/cgroup/memory.max");  // cgroup v2; "max" when unlimited
  std::string v;
  if (!(in >> v) || v == "max") return 0;
  try {
    return std::stoll(v);
  } catch (...) {
    return 0;
  }
}

// RRFP_MEMORY_LIMIT: bytes, or with a K, M or G suffix (powers of 1024); 0 when unset.
std::int64_t env_limit() {
  const char* v = std::getenv("RRFP_MEMORY_LIMIT");
  if (!v || !*v) return 0;
  const std::string s(v);
  size_t used = 0;
  double n = -1;
  try {
    n = std::stod(s, &used);
  } catch (...) {
    used = 0;
  }
  double unit = 1;
  if (used > 0 && used + 1 == s.size()) {
    const char u = static_cast<char>(std::toupper(static_cast<unsigned char>(s.back())));
    unit = u == 'K' ? 1024.0 : u == 'M' ? 1024.0 * 1024 : u == 'G' ? 1024.0 * 1024 * 1024 : 0;
    if (unit > 0) ++used;
  }
  if (used == 0 || used != s.size() || !(n > 0) || n * unit > 1e18)
    throw InputError("RRFP_MEMORY_LIMIT: '" + s.substr(0, 30) +
                     "' is not a size (bytes, or a number with K, M or G, above 0)");
  return static_cast<std::int64_t>(n * unit);
}

}  // namespace

std::int64_t available_memory() {
  std::int64_t have = 0;
  for (const std::int64_t v : {meminfo_available(), cgroup_limit(), env_limit()})
    if (v > 0) have = have > 0 ? std::min(have, v) : v;
  return have;
}

std::string gigabytes(double bytes) {
  return bytes < 1e9 ? fmt("%.0f MB", bytes / 1e6) : fmt("%.1f GB", bytes / 1e9);
}

void check_memory(double bytes, const std::string& what, const std::string& extra,
                  const std::string& lower) {
  check_memory(bytes, available_memory(), what, extra, lower);
}

void check_memory(double bytes, std::int64_t have, const std::string& what,
                  const std::string& extra, const std::string& lower, const std::string& machine) {
  if (have <= 0 || bytes <= static_cast<double>(have)) return;
  const bool env = have == env_limit();
  throw InputError(what + ": about " + gigabytes(bytes) + " of memory" + extra + "; " +
                   (env ? "RRFP_MEMORY_LIMIT allows " : machine + " has ") +
                   gigabytes(static_cast<double>(have)) + (env ? "" : " available") + ": lower " +
                   lower);
}

}  // namespace rrfp
