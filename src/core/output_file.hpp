#pragma once
// Every file rrfp writes goes through here, so that none can hang the process: a FIFO with no
// reader (or a socket) is refused at once instead of blocking in open(), and a directory or
// anything else that is not a file is named as such. Character devices pass (/dev/null, and
// /dev/full, by which the tests fill a disk). docs/reliability.md.
#include <string>
#include <string_view>

namespace rrfp {

struct OutputMode {
  bool append = false;  // keep what is there (a resumed log); else truncate
  // An output the user named (`--json FILE`): a FIFO that has a reader is accepted
  // (`--json >(jq .)` names a pipe), and a refusal is bad input (InputError). Files rrfp places
  // itself (its log, a checkpoint's temporary) refuse every FIFO: bad input before the work
  // (check_output_path), a failure of the run (Error) when open_output meets one mid-run.
  bool named_by_user = true;
};

// Opens `path` for writing (created 0644) and returns the descriptor, blocking again once open.
// Throws, starting with `what` (the option and path, e.g. "`json`: 'x.json'"), when it cannot:
// a FIFO with no reader, a FIFO where none is allowed, a socket, a directory, or the system's
// own reason.
int open_output(const std::string& path, const std::string& what, OutputMode mode = {});

// Throws InputError starting with `what` unless `path` (an output the user named) could be
// written now: its folder exists and takes files (a file is made there and removed at once:
// access() says yes to root where the file system says no, /proc), and an existing entry is no
// directory or socket and writable. A FIFO must have its reader now (or within a second: one
// started beside the command): it is opened here and held for open_output (opened and closed
// to look, it would tell a reader waiting in its open that the output had ended). A command checks
// its outputs before its work, so that a mistyped folder, a FIFO nobody reads or /proc does not
// cost the work first.
// A file rrfp places itself (mode.named_by_user false) refuses every FIFO here.
void check_output_path(const std::string& path, const std::string& what, OutputMode mode = {});

// Writes `bytes` as the whole of `path`, an output the user named, so that a failed write
// (a full disk, a file size limit) leaves what was there: into a temporary file in the same
// folder (hidden, `.rrfp-PID-N.tmp`), renamed over `path` once complete and removed on failure;
// an existing file keeps its mode, and a symbolic link its place (its target is replaced).
// What is no regular file (a pipe with a reader, /dev/null, /dev/full) is written in place,
// through open_output: there is nothing to keep, and a rename would replace the device. A path
// that names a descriptor the process has open for writing (/dev/stdout, /dev/stderr,
// /dev/fd/N, or the file stdout or stderr was redirected to) is written through it, after
// std::cout's and std::cerr's pending output, appending where the shell opened it so (a regular
// file opened read-write at its start, `3<>f`, is replaced instead): replaced, the file behind
// `>>all.txt` lost every earlier run's output. Throws
// as open_output (InputError) and write_all (Error) do, starting with `what`.
void replace_file(const std::string& path, const std::string& bytes, const std::string& what);

// A failed output's error, `error`, naming the outputs written before it (`written`, as the
// command names them), which stay: every command that writes several files says it so.
std::string written_before(const std::string& error, const std::string& written);

// The file `path` names through symbolic links, which a writer that renames its temporary over
// it replaces so that the link keeps its place; a dangling link's (its last link's target, the
// file to make there); `path` itself where it names no link.
std::string link_target(const std::string& path);

// Removes the temporary file being written, if any (replace_file's, or one a
// TemporaryInProgress names): for a signal handler that ends the process at once
// (async-signal-safe), which left a hidden `.rrfp-PID-N.tmp` behind, and `train` a checkpoint's
// temporary of the model's size.
void remove_temporary_in_progress();

// Names `tmp` as the temporary being written while it lives, for remove_temporary_in_progress:
// one at a time, on one thread at a time (a name too long for its buffer is not named: a signal
// then leaves it).
class TemporaryInProgress {
 public:
  explicit TemporaryInProgress(const std::string& tmp);
  ~TemporaryInProgress();
  TemporaryInProgress(const TemporaryInProgress&) = delete;
  TemporaryInProgress& operator=(const TemporaryInProgress&) = delete;
};

// Holds each standard stream the caller closed (`>&-`) with /dev/null opened the other way, so
// that it still fails as a closed one (EBADF) while no file opened later takes its number
// (`train` with stdout closed wrote its progress lines into loss.csv, which had taken 1). A
// path naming one (`--json /dev/stdout`) is refused by the functions above, InputError: opened
// anew it named /dev/null. Call first thing in main().
void hold_closed_standard_streams();

// Whether what is written to `fd` (a standard stream) reaches a terminal, for progress lines
// redrawn in place. Under mpirun each process writes to a pseudo-terminal of mpirun's whether
// or not mpirun's own output is a terminal, so there mpirun's stream decides (a run's output
// into a file got the redraws): a process mpirun started locally is its child; one started
// elsewhere writes plain lines.
bool is_terminal(int fd);

// Writes all of `bytes` to `fd` (retrying short writes and interrupted calls); throws Error
// starting with `what` and the system's reason ("No space left on device").
void write_all(int fd, std::string_view bytes, const std::string& what);

}  // namespace rrfp
