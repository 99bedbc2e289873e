#include "cli/outputs_ahead.hpp"

#include <sys/resource.h>

#include <algorithm>

#include "core/format.hpp"
#include "core/memory.hpp"

namespace rrfp {

namespace {

constexpr std::uint64_t kPageBytes = 4096;

// The process's limit on address space (ulimit -v) or on its data, which counts private
// mappings too (ulimit -d), the lower, in bytes; 0 when it has none. (Under -d alone, the
// buffers mapped ahead took what the compute threads' stacks needed, and the run blamed --pp.)
std::uint64_t memory_limit() {
  std::uint64_t limit = 0;
  for (const int resource : {RLIMIT_AS, RLIMIT_DATA}) {
    rlimit r{};
    if (getrlimit(resource, &r) == 0 && r.rlim_cur != RLIM_INFINITY)
      limit = limit == 0 ? r.rlim_cur : std::min<std::uint64_t>(limit, r.rlim_cur);
  }
  return limit;
}

}  // namespace

void OutputsAhead::plan(const WorkModel& m, const Hint& h, const RealizedWork& w,
                        const ArbiterOptions& a, EmulationOptions& eo) {
  eo.outputs_in_flight = d_bound(resolve_options(a, h, m), h, m);
  std::uint64_t bytes = 0, buffers = 0;
  for (int stage = 0; stage < m.pp(); ++stage)
    for (const auto& [cap, count] : buffers_ahead(m, w, stage, eo)) {
      buffers += static_cast<std::uint64_t>(count) * static_cast<std::uint64_t>(w.tp);
      bytes += cap * static_cast<std::uint64_t>(count) * static_cast<std::uint64_t>(w.tp);
    }
  // Their pages alone held 2.3 GB at P=512 M=512 of small messages.
  const std::uint64_t limit = memory_limit(), pages = buffers * kPageBytes;
  const std::int64_t have = available_memory();
  const char* of = nullptr;
  std::uint64_t over = 0;
  if (limit > 0 && bytes > limit / 4) {
    of = "the memory limit (ulimit -v or -d)";
    over = bytes;
  } else if (have > 0 && pages > static_cast<std::uint64_t>(have) / 4) {
    of = "the memory available (a page of each buffer)";
    over = pages;
  }
  if (!of) return;
  eo.outputs_in_flight = 0;  // this run's warm-up fills its pools
  if (over >= skipped_) {
    skipped_ = over;
    skip_of_ = of;
  }
}

void OutputsAhead::mapped(std::uint64_t bytes) {
  mapped_ = std::max(mapped_, bytes);
}

std::string OutputsAhead::note() const {
  auto mib = [](std::uint64_t b) { return fmt("%.0f", static_cast<double>(b) / (1 << 20)); };
  if (skipped_ > 0)
    return "; output buffers not mapped ahead: " + mib(skipped_) +
           " MiB would take more than a quarter of " + skip_of_;
  if (mapped_ == 0) return "";
  return "; output buffers mapped ahead (address space, never written in one process but for a "
         "page each): " +
         mib(mapped_) + " MiB, the largest run's";
}

}  // namespace rrfp
