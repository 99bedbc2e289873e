#pragma once
// How Open MPI's shared-memory transport (vader) moves a large message between two processes of
// one machine: in one copy, the receiver reading the sender's memory (Cross Memory Attach,
// process_vm_readv), or in two, through shared-memory fragments that both processes' progress
// threads must keep moving. The single copy needs the right to read a peer's memory, which a
// container's seccomp profile or the kernel's ptrace policy may deny. So before MPI starts,
// rrfp tries that read once and, if it is denied, asks Open MPI for the two-copy path. See
// docs/mpi.md.
#include <string>

namespace rrfp {

// The Open MPI setting that chooses how vader moves large messages ("none": two copies).
inline constexpr const char* kSingleCopyVar = "OMPI_MCA_btl_vader_single_copy_mechanism";

// Whether a child process may read this process's memory with process_vm_readv (what a peer
// does under CMA). Waits at most 5 s for the child. Always false off Linux.
bool cross_memory_attach_works();

// Called before MPI_Init. Leaves kSingleCopyVar alone when it is set
// (the user decided); otherwise sets it to "none" when cross_memory_attach_works() is false.
// Returns what was decided: "cma", "none (...)" or "set: VALUE".
std::string choose_single_copy();

}  // namespace rrfp
