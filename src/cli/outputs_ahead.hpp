#pragma once
// `rrfp run` in one process: every output buffer a step can hold at once is mapped before the
// warm-up, so that no timed step maps one however its timing goes (a warm-up only finds the
// peaks it met). Outputs pass by reference and are never written in one process, so this costs
// address space and a page a buffer (the allocator's header, for one taken from its heap), not
// the bytes. Over a transport the bytes are written, and the bound would hold that much memory
// in every process: there the warm-up fills the pools.
#include <cstdint>
#include <string>

#include "core/arbiter.hpp"
#include "emulate/emulated.hpp"

namespace rrfp {

class OutputsAhead {
 public:
  // Sets this run's `eo.outputs_in_flight`: its arbiter's D bound, or 0 (none mapped ahead)
  // where they would take more than a quarter of a memory limit (ulimit -v or -d) or of the
  // memory available, leaving the run's threads and records none.
  void plan(const WorkModel& m, const Hint& h, const RealizedWork& w, const ArbiterOptions& a,
            EmulationOptions& eo);
  // What the runtime of a run mapped, as BufferPool::reserved_total() grew.
  void mapped(std::uint64_t bytes);
  // For the warm-up line: "; output buffers mapped ahead ...", or why some were not.
  std::string note() const;

 private:
  std::uint64_t mapped_ = 0;   // the largest run's
  std::uint64_t skipped_ = 0;  // the largest a run did not map
  std::string skip_of_;        // what it would have taken more than a quarter of
};

}  // namespace rrfp
