#pragma once
// OMP_NUM_THREADS, checked before LibTorch's OpenMP reads it: the `rrfp` command checks it
// before it starts `rrfp-train`, whose OpenMP runtime, as it loads, printed its own lines about
// a value it cannot take, before rrfp's one-line refusal.
#include <string>

namespace rrfp {

// The most threads an OMP_NUM_THREADS count may ask for.
constexpr long kMaxOmpThreads = 4096;

// Whether `list` is OpenMP's thread counts, one per nesting level: "4" or "4,2", each 1 to
// kMaxOmpThreads in digits alone.
bool omp_thread_counts(const std::string& list);

// Whether OMP_NUM_THREADS is set (an empty one counts as unset); throws InputError where it is
// no list of thread counts (omp_thread_counts).
bool omp_num_threads_set();

}  // namespace rrfp
