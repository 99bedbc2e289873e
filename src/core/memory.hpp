#pragma once
// How much memory this process may still take, for refusing at once what would not fit (a run
// too large for the machine, a JSON document whose parse would take more than there is)
// instead of swapping or dying of an allocation failure later.
#include <cstdint>
#include <string>

namespace rrfp {

// The least of MemAvailable, the cgroup's limit, RRFP_MEMORY_LIMIT (bytes, or a number with
// K, M or G) and what the address-space limit (ulimit -v) leaves beside what is mapped, where
// each is there; 0 when none is. Throws InputError for a RRFP_MEMORY_LIMIT that
// is not a size.
std::int64_t available_memory();

// Throws InputError "<what>: <thing> takes X <extra>, more than this machine maps in one
// allocation (Y: ...): lower <lower>" where `bytes`, mapped and never written (a buffer nothing
// touches), pass the most one allocation may map here: what ulimit -v and -d leave and, by the
// kernel's overcommit mode, its RAM plus swap or what its commit limit leaves (nothing when
// none bounds it).
void check_mapping(double bytes, const std::string& what, const std::string& thing,
                   const std::string& extra, const std::string& lower);

// Throws InputError "<what>: about X GB of memory<extra>; this machine has Y GB available:
// lower <lower>" when `bytes` exceed available_memory() (nothing when it is unknown).
void check_memory(double bytes, const std::string& what, const std::string& extra,
                  const std::string& lower);

// What available_memory() gave at one moment, and which limit bound it: a command that learns
// its whole need only part way through checks it against what it had before it began, since by
// then its own allocations have lowered what is available (asking for the whole again counted
// them twice, and refused a run that fits after doing it).
// Machine: MemAvailable or a cgroup's limit; Env: RRFP_MEMORY_LIMIT; AddressSpace: ulimit -v.
enum class MemoryLimit { Machine, Env, AddressSpace };
struct MemorySnapshot {
  std::int64_t bytes = 0;
  MemoryLimit source = MemoryLimit::Machine;
};
MemorySnapshot memory_snapshot();
void check_memory(double bytes, const MemorySnapshot& had, const std::string& what,
                  const std::string& extra, const std::string& lower);
// The same against `have` bytes, what a machine other than this one may have (0: unknown), said
// of `machine` ("this machine has Y GB available").
void check_memory(double bytes, std::int64_t have, const std::string& what,
                  const std::string& extra, const std::string& lower,
                  const std::string& machine = "this machine");

// The memory limit of the cgroups a process belongs to (`membership`: /proc/self/cgroup's text)
// under the hierarchy mounted at `root` (/sys/fs/cgroup): cgroup v2's memory.max and v1's
// memory.limit_in_bytes, of its own cgroup and every cgroup above it, the least; 0 for none.
// Only the root's v2 file was read: a limit of a process's own cgroup, or any v1 limit, was
// not seen, and a run past it was killed without a word.
std::int64_t cgroup_limit(const std::string& root, const std::string& membership);

std::string gigabytes(double bytes);  // "1.3 GB", or "870 MB" below 1 GB

}  // namespace rrfp
