#pragma once
// How much memory this process may still take, for refusing at once what would not fit (a run
// too large for the machine, a JSON document whose parse would take more than there is)
// instead of swapping or dying of an allocation failure later.
#include <cstdint>
#include <string>

namespace rrfp {

// The least of MemAvailable, the cgroup's limit and RRFP_MEMORY_LIMIT (bytes, or a number with
// K, M or G) where each is there; 0 when none is. Throws InputError for a RRFP_MEMORY_LIMIT that
// is not a size.
std::int64_t available_memory();

// Throws InputError "<what>: about X GB of memory<extra>; this machine has Y GB available:
// lower <lower>" when `bytes` exceed available_memory() (nothing when it is unknown).
void check_memory(double bytes, const std::string& what, const std::string& extra,
                  const std::string& lower);
// The same against `have` bytes, what a machine other than this one may have (0: unknown), said
// of `machine` ("this machine has Y GB available").
void check_memory(double bytes, std::int64_t have, const std::string& what,
                  const std::string& extra, const std::string& lower,
                  const std::string& machine = "this machine");

std::string gigabytes(double bytes);  // "1.3 GB", or "870 MB" below 1 GB

}  // namespace rrfp
