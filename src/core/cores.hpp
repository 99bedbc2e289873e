#pragma once
// How many cores there are: one count for every layer, so that a sweep's threads, the trainer's
// thread check and `run --spin`'s warning read the machine alike.

namespace rrfp {

// The machine's cores, at least 1 (std::thread::hardware_concurrency): what LibTorch's pool
// makes threads for, and what a node offers the processes mpirun puts on it.
int machine_cores();

// The cores this process may run on, at least 1: its affinity (taskset, a cgroup's cpuset),
// or the machine's where the affinity cannot be read.
int usable_cores();

}  // namespace rrfp
