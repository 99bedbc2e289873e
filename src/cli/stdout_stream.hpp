#pragma once
// Standard output that remembers why it failed. std::cout reaches stdio's stdout as before (the
// same buffering: by line on a terminal, by block elsewhere), through a stream buffer that keeps
// the errno of the first write that fails: the check at the end of a command asked errno after
// its own flush, when the write that failed (a full buffer, long before) was gone, so a closed
// pipe under an ignored SIGPIPE was "writing standard output failed", exit 1, not the quiet 141.
namespace rrfp {

// Puts std::cout on that buffer; once, at start (cli_main).
void watch_stdout();
// Whether a write to standard output has failed, and the errno it failed with (0 if none said).
bool stdout_failed();
int stdout_errno();
// Called once, with that errno, from the thread whose write first failed: `train` takes a closed
// pipe (EPIPE) under an ignored SIGPIPE as the stop request the signal would have made.
void on_stdout_failure(void (*hook)(int err));

}  // namespace rrfp
