#pragma once
// SIGINT, SIGTERM, SIGUSR1 and SIGHUP for the commands whose work is long and worth keeping
// (`train`, `plan`, `sweep`): the first signal asks the work to stop at its next safe point,
// where the command writes what it has (a step's log row and checkpoint, the best order so far,
// the grid points done) and exits 128 + the signal (130, 143, 138, 129); a second signal ends
// the process at once, with a line saying so and the temporary of a file being replaced
// removed (remove_temporary_in_progress), unless it is the first one again within a quarter
// second (its echo: GNU timeout sends it to the process and then to its group). SIGUSR1 is the
// one mpirun forwards to every process as it is. With `pipe` (train, whose steps print as they
// end), SIGPIPE (stdout's reader gone) asks to stop too, and is never a second request: every
// later write to stdout raises it again, and fails; where SIGPIPE is ignored, a write to stdout
// failing with EPIPE asks the same. Elsewhere it keeps its default action (exit 141): plan and
// sweep print at the end, when their files are written. SIGXCPU (the soft CPU time limit) is
// taken as the others are, its repeats (one a second past the limit) never a second request.
#include <atomic>
#include <functional>
#include <string>
#include <vector>

namespace rrfp {

// Installs the handlers (again: the same ones) and returns stop_flag().
std::atomic<int>& stop_on_signals(bool pipe = false);
// Has the first request acknowledged at once on stderr, where the work's safe point may be far
// (a long step, a large grid point: a user pressing Ctrl-C saw nothing, and pressed it again):
// "rrfp COMMAND: SIGINT taken: UNTIL; a second signal stops it at once". Under mpirun every
// process calls it: rank 0 says what mpirun passes to every process, another rank only what was
// sent to it alone ("rrfp COMMAND: mpi rank 1: SIGTERM, sent to this process alone, taken: ...").
void acknowledge_stop_signals(const std::string& command, const std::string& until);
// Until work_begins(), a stop_on_signals() signal ends the process at once, as exit_on_signals'
// do ("rrfp COMMAND: stopped by SIGTERM; nothing written"): the set-up before the work has
// nothing to keep and no point to stop at (plan's model of a large run took minutes, deaf to
// SIGTERM; a sweep's first grid point likewise).
void stop_at_once_until_work(const std::string& command);
void work_begins();
// The command's outputs are whole (train, once its run has returned): a second signal from here
// says so. Under mpirun, after a stop, the SIGTERM mpirun sends a process still ending was
// taken as a second request, whose line said what had not been written was missing.
void outputs_written();
// Which of `paths` (a command's outputs) exist now, said with the line of a signal that ends
// the command before it wrote any ("; sweep.csv was there before it began"): an earlier run's
// complete file, left as it was, read as this run's. Called before the lines are made
// (acknowledge_stop_signals, stop_at_once_until_work). Returns those there, as messages show
// them.
std::vector<std::string> note_earlier_outputs(const std::vector<std::string>& paths);
// Blocks (holds pending) or unblocks the signals stop_on_signals takes but SIGPIPE, for this
// thread and what it starts or becomes: `rrfp train` holds them across its exec of
// `rrfp-train`, which releases them once its handlers are in place, so a signal in the half
// second LibTorch takes to load is taken as one during set-up (it ended the process without a
// word, exit 143).
void hold_stop_signals(bool hold);
// The first signal's number, 0 while none came.
std::atomic<int>& stop_flag();

// SIGINT, SIGTERM, SIGUSR1, SIGHUP and SIGXCPU for `simulate`, `run`, `predict`, `schedule show`
// and `calibrate`, whose work has no point to stop at and keeps nothing worth writing half done:
// a signal ends the process at once, exit 128 + the signal, with the line "rrfp COMMAND: stopped
// by SIGINT; nothing written" (they died without a word; SIGUSR1, which mpirun passes on to
// every process, did so until it was taken too).
void exit_on_signals(const std::string& command);
// The default actions again for every signal the functions above take: a process of an mpirun
// job whose refusal rank 0 prints, ended by mpirun's SIGTERM once rank 0 exits, then ends
// without a word (it added "stopped by SIGTERM; nothing written" to rank 0's one line).
void quiet_signals();
// Runs `write` (the command's outputs) with exit_on_signals' signals held back, so that none is
// left half written; one that came meanwhile is then heeded (QuietExit, 128 + the signal) with
// a line saying the outputs were written. A second signal still ends the process at once (but
// for the first's echo, as above).
void write_then_heed_signals(const std::function<void()>& write);

}  // namespace rrfp
