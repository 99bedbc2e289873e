// Freed host memory kept for the next step (train/run.hpp).
#include <malloc.h>

#include <cstdlib>
#include <cstring>

#include "train/run.hpp"

namespace rrfp::train {

void keep_freed_host_memory() {
#ifdef __GLIBC__
  // GLIBC_TUNABLES that set malloc's thresholds are the user's choice, and stand.
  if (const char* t = std::getenv("GLIBC_TUNABLES");
      t != nullptr && std::strstr(t, "glibc.malloc."))
    return;
  // Tensors of up to 32 MiB (glibc's largest threshold) come from the heap, not from a fresh
  // mapping each, and freed ones stay there for the next microbatch's: every step allocates
  // and frees the same sizes, and each fresh page cost a fault (a 2-stage GPT of width 512
  // spent half its step in them on a 2-core VM; docs/results-train.md).
  mallopt(M_MMAP_THRESHOLD, kKeptAllocationBytes);
  mallopt(M_TRIM_THRESHOLD, kKeptFreeBytes);
#endif
}

}  // namespace rrfp::train
