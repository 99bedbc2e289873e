#include "cli/stop_signal.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <initializer_list>
#include <iterator>
#include <limits>
#include <type_traits>

#include "cli/options.hpp"
#include "cli/stdout_stream.hpp"
#include "core/output_file.hpp"
#include "core/printable.hpp"
#include "core/progress_line.hpp"

namespace rrfp {

namespace {

std::atomic<int> g_stop{0};
// kStopSignals (core/format.hpp) are taken as a request to stop (stop_on_signals), or end the
// process at once (exit_on_signals), SIGPIPE aside, in the order of their lines' columns below
// (signal_index).
constexpr int kNumStopSignals = std::size(kStopSignals);
// A line a handler writes, built before the handler may read it, in storage nothing frees: held
// in std::string, the lines were freed by the static destructors at exit while a handler could
// still run, and a signal taken then wrote freed heap to stderr. A longer line is cut, its
// newline kept.
struct HandlerLine {
  char text[512];
  std::size_t size;
  void set(const std::string& line) {
    size = std::min(line.size(), sizeof text);
    std::memcpy(text, line.data(), size);
    if (size == sizeof text) text[size - 1] = '\n';
  }
};
static_assert(std::is_trivially_destructible_v<HandlerLine>);
// exit_on_signals: where the outputs stand, and the lines its handler writes for SIGINT and
// SIGTERM in each, built before it is installed (a handler may not allocate).
enum Outputs : int { kNone = 0, kWriting = 1, kWritten = 2 };
std::atomic<int> g_outputs{kNone};
HandlerLine g_exit_lines[3][kNumStopSignals];  // [Outputs][signal_index(sig)]
// And the line of the first signal while the outputs are written, which is heeded once they
// are: said at once (the command went on for a minute writing a large trace without a word, and
// a user who pressed Ctrl-C again lost the outputs).
HandlerLine g_writing_lines[kNumStopSignals];
// Under mpirun, the line of another rank than 0 for a signal sent to it alone, not passed on by
// mpirun (its parent): rank 0's line, for a signal the whole job got, said nothing of it (a
// SIGINT to rank 1 was reported as rank 0's SIGTERM, which mpirun sent as rank 1 ended).
HandlerLine g_alone_lines[kNumStopSignals];
std::string g_command;
// "; sweep.csv was there before it began": note_earlier_outputs(), said with "nothing written".
std::string g_earlier;
// stop_on_signals: the line its handler writes as it takes the first request, for each of
// kStopSignals, built before g_acknowledge is set (a handler may not allocate).
HandlerLine g_ack_lines[kNumStopSignals];
// And the line it writes as a second request ends the process (it ended without a word).
HandlerLine g_second_lines[kNumStopSignals];
std::atomic<bool> g_acknowledge{false};
// Under mpirun, on another rank than 0: its acknowledgements are of a signal sent to it alone
// (rank 0 says those mpirun passes to every process), and name the rank: one sent to rank 1
// alone was taken without a word until the job stopped after its step.
std::atomic<bool> g_acknowledge_alone_only{false};
// stop_at_once_until_work: the first request ends the process as exit_on_signals' do.
std::atomic<bool> g_at_once{false};

// When the first signal was taken (CLOCK_MONOTONIC ns); the largest value until it is known.
std::atomic<std::int64_t> g_first_ns{std::numeric_limits<std::int64_t>::max()};
static_assert(std::atomic<std::int64_t>::is_always_lock_free, "read in a signal handler");
// A second signal within this of the first is the first's echo: GNU timeout (without
// --foreground) sends its signal to the process, then to the process group it is in, the
// process again. Taken as a second request, it ended `timeout -s INT 20 rrfp train` at once,
// without its checkpoint, in a quarter of the runs.
constexpr std::int64_t kEchoNs = 250'000'000;

std::int64_t now_ns() {
  timespec t{};
  ::clock_gettime(CLOCK_MONOTONIC, &t);  // async-signal-safe
  return static_cast<std::int64_t>(t.tv_sec) * 1'000'000'000 + t.tv_nsec;
}

// What `sig` is, decided by one compare-and-swap: the first request to stop, the same signal
// again within kEchoNs of it (its echo, dropped), or a second request. Whether it was the first
// was read apart from the swap, and two threads taking a signal and its echo at once (a thread
// of the work, a progress line's) could both say it.
enum class Request { kFirst, kEcho, kSecond };
Request take_request(int sig) {
  const std::int64_t now = now_ns();
  int expected = 0;
  if (g_stop.compare_exchange_strong(expected, sig)) {
    g_first_ns.store(now);
    return Request::kFirst;
  }
  // A handler that interrupted the first's before it noted the time sees the largest value.
  return expected == sig && now - g_first_ns.load() < kEchoNs ? Request::kEcho : Request::kSecond;
}

// The column of g_exit_lines and g_ack_lines for each of kStopSignals (SIGPIPE: SIGINT's).
int signal_index(int sig) {
  for (int i = 0; i < kNumStopSignals; ++i)
    if (kStopSignals[i] == sig) return i;
  return 0;
}

// The lines of exit_on_signals' handler (and stop_on_signals' before the work), for `command`.
void build_exit_lines(const std::string& command) {
  g_command = command;
  // Under mpirun rank 0 says it for the job: mpirun passes a signal to every process, and ends
  // the others with SIGTERM once one exits non-zero (a refusal rank 0 printed came with their
  // "stopped by SIGTERM" lines). The others still exit 128 + the signal.
  if (another_rank_of_mpirun()) {
    for (auto& lines : g_exit_lines)
      for (HandlerLine& line : lines)
        line.set("");
    for (HandlerLine& line : g_writing_lines)
      line.set("");
    const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
    for (int sig : kStopSignals)
      g_alone_lines[signal_index(sig)].set("rrfp " + command + ": mpi rank " + rank +
                                           ": stopped by " + signal_name(sig) +
                                           " sent to this process alone; nothing written\n");
    return;
  }
  for (int sig : kStopSignals) {
    const std::string stopped = "rrfp " + command + ": stopped by " + signal_name(sig);
    g_exit_lines[kNone][signal_index(sig)].set(stopped + "; nothing written" + g_earlier + "\n");
    g_exit_lines[kWriting][signal_index(sig)].set(
        stopped +
        ", a second signal, while its outputs were written; some may be missing or "
        "incomplete\n");
    g_exit_lines[kWritten][signal_index(sig)].set(stopped + " after its outputs were written\n");
    g_writing_lines[signal_index(sig)].set(
        "rrfp " + command + ": " + signal_name(sig) +
        " taken: it stops once its outputs are written, complete; " +
        (sig == SIGXCPU ? "another" : "a second") +  // SIGXCPU's repeats are no second request
        " signal stops it at once, some of them missing or incomplete\n");
  }
}

// Writes `line` to stderr from a handler. SIGPIPE is ignored meanwhile: a stderr whose reader
// is gone (`2>&1 | tee` that the Ctrl-C ended too) killed a sweep with its points done unwritten.
void write_line(const HandlerLine& line) {
  struct sigaction ignore {
  }, old{};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  ::sigaction(SIGPIPE, &ignore, &old);  // async-signal-safe, as write is
  clear_progress_line_on_stderr();
  [[maybe_unused]] const ssize_t n = ::write(STDERR_FILENO, line.text, line.size);
  ::sigaction(SIGPIPE, &old, nullptr);
}

// Whether `info` says a user sent the signal to this process, not mpirun (its parent) passing it
// on.
bool sent_here(const siginfo_t* info) {
  return info != nullptr && info->si_code == SI_USER && info->si_pid != ::getppid();
}

// The line of a signal that ends the process at once, where its outputs stand at `outputs`.
// Under mpirun the others' lines are empty (rank 0 says it for the job), but one sent to this
// process alone, not by mpirun (its parent), names the rank: nothing was said of it.
const HandlerLine& exit_line(int sig, const siginfo_t* info, int outputs) {
  const HandlerLine& alone = g_alone_lines[signal_index(sig)];
  return alone.size > 0 && sent_here(info) ? alone : g_exit_lines[outputs][signal_index(sig)];
}

// A handler that returns leaves errno as it found it: the interrupted code may read it next,
// and write() or sigaction() here may set it (EPIPE on a stderr whose reader is gone).
struct KeepErrno {
  int saved = errno;
  ~KeepErrno() { errno = saved; }
};

// `info`: who sent it, where the kernel says (nullptr for a failed write's EPIPE).
void on_stop_signal(int sig, siginfo_t* info, void*) {
  const KeepErrno keep;
  if (sig == SIGPIPE) {
    // A reader of stdout gone (`| head`, a `| tee` the Ctrl-C ended first): a request to stop,
    // never a second one, as each later write raises it again. It ended `train` at once,
    // before its stop checkpoint, without a word.
    int none = 0;
    if (g_stop.compare_exchange_strong(none, sig)) g_first_ns.store(now_ns());
    return;
  }
  if (g_at_once.load()) {
    write_line(exit_line(sig, info, kNone));
    ::_exit(128 + sig);
  }
  // The kernel repeats SIGXCPU every second of CPU past the soft limit: never a second request
  // (the hard limit's SIGKILL ends what does not stop in time).
  if (sig == SIGXCPU && g_stop.load() != 0) return;
  const bool say = g_acknowledge.load() && (!g_acknowledge_alone_only.load() || sent_here(info));
  const Request request = take_request(sig);
  if (request == Request::kSecond) {
    remove_temporary_in_progress();  // a file being replaced keeps what it held
    // Past outputs_written() nothing is missing: the SIGTERM mpirun sends a process still
    // ending, after a stop, was said to have cut its outputs short.
    const HandlerLine& written = g_exit_lines[kWritten][signal_index(sig)];
    if (say)
      write_line(g_outputs.load() == kWritten && written.size > 0
                     ? written
                     : g_second_lines[signal_index(sig)]);
    ::_exit(128 + sig);  // async-signal-safe
  }
  if (request == Request::kFirst && say) write_line(g_ack_lines[signal_index(sig)]);
}

void on_exit_signal(int sig, siginfo_t* info, void*) {
  const KeepErrno keep;
  const int outputs = g_outputs.load();
  if (outputs == kWriting) {  // the first heeded once they are written, said now
    const Request request = take_request(sig);
    if (request == Request::kFirst) write_line(g_writing_lines[signal_index(sig)]);
    if (request != Request::kSecond) return;
  }
  if (outputs == kWriting && sig == SIGXCPU) return;  // its repeats alike (on_stop_signal)
  // The line says where the outputs stand: a second signal while they are written cuts that
  // short (it said "nothing written", with some outputs written), and past it they are there.
  remove_temporary_in_progress();
  write_line(exit_line(sig, info, outputs));
  ::_exit(128 + sig);
}

void install(struct sigaction sa, std::initializer_list<int> signals) {
  sa.sa_flags |= SA_RESTART;  // a write interrupted by the signal goes on
  sigemptyset(&sa.sa_mask);
  for (int sig : signals) {
    struct sigaction old {};
    ::sigaction(sig, nullptr, &old);
    if (old.sa_handler != SIG_IGN) ::sigaction(sig, &sa, nullptr);  // a background job's stays
  }
}

void install(void (*handler)(int), std::initializer_list<int> signals) {
  struct sigaction sa {};
  sa.sa_handler = handler;
  install(sa, signals);
}

// The handler told who sent the signal (SA_SIGINFO).
void install(void (*handler)(int, siginfo_t*, void*), std::initializer_list<int> signals) {
  struct sigaction sa {};
  sa.sa_sigaction = handler;
  sa.sa_flags = SA_SIGINFO;
  install(sa, signals);
}

}  // namespace

std::atomic<int>& stop_on_signals(bool pipe) {
  // SIGUSR1 too: mpirun forwards it to every process, where its own SIGINT and SIGTERM end the
  // job with SIGKILL a second after passing SIGTERM on (Open MPI's odls_base_sigkill_timeout),
  // which cuts a longer step short with nothing written.
  // SIGHUP too (a closed terminal or ssh session ended the work with nothing written), SIGXCPU
  // (a soft CPU time limit below the hard one, `ulimit -S -t`, as batch schedulers set: its
  // default action ended the work without a word, before the hard limit's SIGKILL), and where
  // asked SIGPIPE (on_stop_signal).
  for (int sig : kStopSignals)
    install(on_stop_signal, {sig});
  if (pipe) {
    install(on_stop_signal, {SIGPIPE});
    // SIGPIPE ignored (`trap '' PIPE`, a service manager), the failed write is all there is to
    // tell the reader is gone: it asks to stop the same way (train ran every step, then exit 1).
    on_stdout_failure([](int err) {
      if (err == EPIPE) on_stop_signal(SIGPIPE, nullptr, nullptr);
    });
  }
  return g_stop;
}

void acknowledge_stop_signals(const std::string& command, const std::string& until) {
  g_acknowledge.store(false);  // not read while the lines change
  const bool alone_only = another_rank_of_mpirun();
  const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
  const std::string who =
      "rrfp " + command + ": " +
      (alone_only ? "mpi rank " + std::string(rank != nullptr ? rank : "?") + ": " : "");
  // Rank 0 says what mpirun passes on, and mpirun sends SIGTERM too as it ends a job whose
  // process failed: "stopping after the current step" alone promised a stop that never came.
  const bool rank0_of_mpirun = !alone_only && rank != nullptr;
  for (int sig : kStopSignals) {
    const std::string name = signal_name(sig) + (alone_only ? ", sent to this process alone," : "");
    const std::string also =
        rank0_of_mpirun && sig == SIGTERM
            ? " (or mpirun ends the job for a process that failed, and its lines say which)"
            : "";
    g_ack_lines[signal_index(sig)].set(who + name + " taken: " + until + also +
                                       (sig == SIGXCPU  // its repeats are no second request
                                            ? "; another signal stops it at once\n"
                                            : "; a second signal stops it at once\n"));
    const std::string second = sig == SIGXCPU ? "another " : "a second ";
    g_second_lines[signal_index(sig)].set(who + "stopped at once by " + second + signal_name(sig) +
                                          (alone_only ? " sent to this process alone" : "") +
                                          "; what it had not yet written is missing" + g_earlier +
                                          "\n");
  }
  g_acknowledge_alone_only.store(alone_only);
  g_acknowledge.store(true);
}

void exit_on_signals(const std::string& command) {
  build_exit_lines(command);
  install(on_exit_signal, {SIGINT, SIGTERM, SIGUSR1, SIGHUP, SIGXCPU});
}

void quiet_signals() {
  for (int sig : kStopSignals)
    install(SIG_DFL, {sig});
  hold_stop_signals(false);  // one held back takes its default action now
}

void stop_at_once_until_work(const std::string& command) {
  g_at_once.store(false);  // not read while the lines change
  build_exit_lines(command);
  g_at_once.store(true);
}

void work_begins() {
  g_at_once.store(false);
}

std::vector<std::string> note_earlier_outputs(const std::vector<std::string>& paths) {
  std::vector<std::string> there;
  for (const std::string& p : paths) {
    std::error_code ec;
    if (!p.empty() && p != "-" && std::filesystem::exists(p, ec))
      there.push_back(visible(p.size() > 100 ? p.substr(0, 100) + "..." : p));
  }
  g_earlier.clear();
  for (std::size_t i = 0; i < there.size(); ++i)
    g_earlier += (i == 0 ? "; " : i + 1 == there.size() ? " and " : ", ") + there[i];
  if (!there.empty())
    g_earlier += there.size() == 1 ? " was there before it began" : " were there before it began";
  return there;
}

void outputs_written() {
  g_outputs.store(kWritten);
}

void hold_stop_signals(bool hold) {
  sigset_t set;
  sigemptyset(&set);
  for (int sig : kStopSignals)
    sigaddset(&set, sig);
  ::pthread_sigmask(hold ? SIG_BLOCK : SIG_UNBLOCK, &set, nullptr);
}

void write_then_heed_signals(const std::function<void()>& write) {
  g_outputs.store(kWriting);
  try {
    write();
  } catch (...) {
    g_outputs.store(kNone);
    throw;
  }
  g_outputs.store(kWritten);
  if (const int sig = g_stop.load()) {
    print_line("rrfp " + g_command + ": stopped by " + signal_name(sig) +
               " while its outputs were written; they are complete");
    throw QuietExit{128 + sig};
  }
}

std::atomic<int>& stop_flag() {
  return g_stop;
}

}  // namespace rrfp
