#include "core/memory.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <sstream>

#include "core/error.hpp"
#include "core/format.hpp"
#include "core/printable.hpp"

namespace rrfp {

namespace {

// A /proc/meminfo field ("MemAvailable:") in bytes; 0 where it is not there.
std::int64_t meminfo(const std::string& field) {
  std::ifstream in("/proc/meminfo");
  std::string line, key;
  while (std::getline(in, line)) {
    std::istringstream row(line);
    std::int64_t kb = 0;
    if (row >> key >> kb && key == field) return kb * 1024;
  }
  return 0;
}

std::int64_t meminfo_available() {
  return meminfo("MemAvailable:");
}

// A cgroup file's limit in bytes; 0 when absent, "max" (v2) or past 2^60 (v1's "unlimited" is
// 2^63 rounded down to a page).
std::int64_t limit_in(const std::string& file) {
  std::ifstream in(file);
  std::string v;
  if (!(in >> v) || v == "max") return 0;
  try {
    const std::int64_t n = std::stoll(v);
    return n > 0 && n < (std::int64_t{1} << 60) ? n : 0;
  } catch (...) {
    return 0;
  }
}

}  // namespace

std::int64_t cgroup_limit(const std::string& root, const std::string& membership) {
  // Each line of /proc/self/cgroup: "id:controllers:path". A cgroup's limit binds its members
  // as its ancestors' do: the least over the path and every folder above it.
  std::int64_t least = 0;
  std::istringstream lines(membership);
  for (std::string line; std::getline(lines, line);) {
    const auto a = line.find(':'), b = line.find(':', a == std::string::npos ? a : a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = "," + line.substr(a + 1, b - a - 1) + ",";
    std::string dir = line.substr(b + 1), file;
    if (controllers == ",,")
      file = "/memory.max", dir = root + dir;  // v2, the unified hierarchy
    else if (controllers.find(",memory,") != std::string::npos)
      file = "/memory.limit_in_bytes", dir = root + "/memory" + dir;  // v1
    else
      continue;
    for (;;) {
      while (dir.size() > 1 && dir.back() == '/')
        dir.pop_back();
      if (const std::int64_t n = limit_in(dir + file); n > 0)
        least = least > 0 ? std::min(least, n) : n;
      const auto up = dir.rfind('/');
      if (up == std::string::npos || dir.size() <= root.size()) break;
      dir.resize(up);
    }
  }
  return least;
}

namespace {

std::int64_t own_cgroup_limit() {
  std::ifstream in("/proc/self/cgroup");
  std::stringstream text;
  text << in.rdbuf();
  // Without /proc, the root's file alone, as a container sees its own.
  const std::string membership = in ? text.str() : std::string("0::/\n");
  return cgroup_limit("/sys/fs/cgroup", membership);
}

// RRFP_MEMORY_LIMIT: bytes, or with a K, M or G suffix (powers of 1024); 0 when unset. Decimal
// digits with an optional fraction, blanks around them ignored, at least one byte: strtod read
// 0x10 as 16 bytes and took "1G " as no size, and 0.5 truncated to 0, which is "unset".
std::int64_t env_limit() {
  const char* v = std::getenv("RRFP_MEMORY_LIMIT");
  if (!v || !*v) return 0;
  const std::string raw(v);
  const std::string s(trim(raw));
  auto digit = [](char c) { return c >= '0' && c <= '9'; };
  std::size_t at = 0;
  while (at < s.size() && digit(s[at]))
    ++at;
  bool ok = at > 0;
  if (ok && at < s.size() && s[at] == '.') {
    const std::size_t fraction = ++at;
    while (at < s.size() && digit(s[at]))
      ++at;
    ok = at > fraction;
  }
  double unit = 1;
  if (ok && at + 1 == s.size()) {
    const char u = static_cast<char>(std::toupper(static_cast<unsigned char>(s.back())));
    unit = u == 'K' ? 1024.0 : u == 'M' ? 1024.0 * 1024 : u == 'G' ? 1024.0 * 1024 * 1024 : 0;
    ++at;
  }
  const ClassicNumbers classic;  // the '.' whatever locale the process set
  const double bytes =
      ok && unit > 0 && at == s.size() && at <= 40 ? std::strtod(s.c_str(), nullptr) * unit : -1;
  if (!(bytes >= 1) || bytes > 1e18)
    throw InputError("RRFP_MEMORY_LIMIT: '" + printable(raw, 30) +
                     "' is not a size (decimal bytes, or a number with K, M or G; from 1 byte "
                     "to 10^18)");
  return static_cast<std::int64_t>(bytes);
}

// What the limit on `resource` leaves this process beside its share of /proc/self/statm's
// field `field` (pages), in bytes; 0 for no limit: the address-space limit (ulimit -v,
// RLIMIT_AS) beside what it has mapped (field 0), or the data limit (ulimit -d, RLIMIT_DATA,
// which counts private mappings too) beside its data (field 5). A run past either raised
// bad_alloc, or in Python a RuntimeError, after seconds of work the check would have spared.
std::int64_t limit_left(int resource, int field) {
  rlimit lim{};
  if (::getrlimit(resource, &lim) != 0 || lim.rlim_cur == RLIM_INFINITY) return 0;
  std::ifstream statm("/proc/self/statm");
  std::int64_t pages = 0;
  for (int i = 0; i <= field; ++i)
    if (!(statm >> pages)) return 0;
  const auto limit = static_cast<std::int64_t>(
      std::min<rlim_t>(lim.rlim_cur, std::numeric_limits<std::int64_t>::max()));
  return std::max<std::int64_t>(1, limit - pages * ::sysconf(_SC_PAGESIZE));
}

std::int64_t address_space_left() {
  return limit_left(RLIMIT_AS, 0);
}

// The most bytes one allocation may map here without writing them: the least of what ulimit -v
// and -d leave and, under the kernel's default overcommit (vm.overcommit_memory 0), its RAM
// plus swap (it refuses one allocation past that, whatever is free), or under strict
// accounting (2) what its commit limit leaves; 0 when none bounds it.
std::int64_t largest_mapping() {
  std::int64_t out = address_space_left();
  if (const std::int64_t d = limit_left(RLIMIT_DATA, 5); d > 0 && (out == 0 || d < out)) out = d;
  std::ifstream mode_file("/proc/sys/vm/overcommit_memory");
  int mode = -1;
  std::int64_t kernel = 0;
  if (mode_file >> mode && mode == 0)
    kernel = meminfo("MemTotal:") + meminfo("SwapTotal:");
  else if (mode == 2)
    kernel = std::max<std::int64_t>(1, meminfo("CommitLimit:") - meminfo("Committed_AS:"));
  if (kernel > 0 && (out == 0 || kernel < out)) out = kernel;
  return out;
}

}  // namespace

// The least of the limits, and which it is: each read once, so that a refusal names the one
// that binds (the mapped size moves between two reads, which named the machine instead).
MemorySnapshot memory_snapshot() {
  MemorySnapshot out;
  auto take = [&](std::int64_t v, MemoryLimit source) {
    if (v > 0 && (out.bytes <= 0 || v < out.bytes)) out = {v, source};
  };
  take(meminfo_available(), MemoryLimit::Machine);
  take(own_cgroup_limit(), MemoryLimit::Machine);
  take(env_limit(), MemoryLimit::Env);
  take(address_space_left(), MemoryLimit::AddressSpace);
  return out;
}

std::int64_t available_memory() {
  return memory_snapshot().bytes;
}

std::string gigabytes(double bytes) {
  // Below a megabyte in its own unit: a limit of 1536 bytes read "allows 0 MB".
  return bytes < 1e6   ? fmt("%.0f bytes", bytes)
         : bytes < 1e9 ? fmt("%.0f MB", bytes / 1e6)
                       : fmt("%.1f GB", bytes / 1e9);
}

namespace {

[[noreturn]] void refuse_memory(double bytes, const std::string& what, const std::string& extra,
                                const std::string& lower, const std::string& has) {
  throw InputError(what + ": about " + gigabytes(bytes) + " of memory" + extra + "; " + has +
                   ": lower " + lower);
}

}  // namespace

void check_memory(double bytes, const std::string& what, const std::string& extra,
                  const std::string& lower) {
  check_memory(bytes, memory_snapshot(), what, extra, lower);
}

void check_memory(double bytes, const MemorySnapshot& had, const std::string& what,
                  const std::string& extra, const std::string& lower) {
  if (had.bytes <= 0 || bytes <= static_cast<double>(had.bytes)) return;
  const std::string have = gigabytes(static_cast<double>(had.bytes));
  refuse_memory(bytes, what, extra, lower,
                had.source == MemoryLimit::Env ? "RRFP_MEMORY_LIMIT allows " + have
                : had.source == MemoryLimit::AddressSpace
                    ? "the address-space limit (ulimit -v) leaves " + have
                    : "this machine has " + have + " available");
}

void check_memory(double bytes, std::int64_t have, const std::string& what,
                  const std::string& extra, const std::string& lower, const std::string& machine) {
  if (have <= 0 || bytes <= static_cast<double>(have)) return;
  const std::string amount = gigabytes(static_cast<double>(have));
  refuse_memory(bytes, what, extra, lower,
                have == env_limit() ? "RRFP_MEMORY_LIMIT allows " + amount
                                    : machine + " has " + amount + " available");
}

void check_mapping(double bytes, const std::string& what, const std::string& thing,
                   const std::string& extra, const std::string& lower) {
  const std::int64_t most = largest_mapping();
  if (most <= 0 || bytes <= static_cast<double>(most)) return;
  throw InputError(
      what + ": " + thing + " takes " + gigabytes(bytes) + " " + extra +
      ", more than this machine maps in one allocation (" + gigabytes(static_cast<double>(most)) +
      ": its RAM and swap or commit limit, or what ulimit -v or -d leaves): lower " + lower);
}

}  // namespace rrfp
