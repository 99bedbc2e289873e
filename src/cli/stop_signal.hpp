#pragma once
// SIGINT and SIGTERM for the commands whose work is long and worth keeping (`train`, `plan`,
// `sweep`): the first signal asks the work to stop at its next safe point, where the command
// writes what it has (a step's log row and checkpoint, the best order so far, the grid points
// done) and exits 128 + the signal (130, 143); a second signal ends the process at once.
#include <atomic>
#include <string>

namespace rrfp {

// Installs the handlers (again: the same ones) and returns stop_flag().
std::atomic<int>& stop_on_signals();
// The first signal's number, 0 while none came.
std::atomic<int>& stop_flag();

// "SIGINT", "SIGTERM" or "signal N", for the line that says why the work stopped short.
std::string signal_name(int sig);

}  // namespace rrfp
