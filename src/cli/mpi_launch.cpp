#include "cli/mpi_launch.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "cli/options.hpp"
#include "cli/stop_signal.hpp"
#include "core/error.hpp"
#include "core/fnv.hpp"
#include "core/format.hpp"
#include "core/input_file.hpp"
#include "core/mpirun_env.hpp"
#include "core/printable.hpp"
#include "dist/job.hpp"
#ifdef RRFP_HAVE_MPI
#include "dist/mpi_world.hpp"
#endif
#include "runtime/errors.hpp"
#include "sim/trace_import.hpp"

namespace rrfp {

namespace {

#ifdef RRFP_HAVE_MPI  // the command line's comparison, which only a job makes
// NUL-ended strings (a last one without its NUL too), as the kernel gives a command line.
std::vector<std::string> split_nul(std::string_view all) {
  std::vector<std::string> out;
  for (std::size_t at = 0; at < all.size();) {
    const std::size_t end = std::min(all.find('\0', at), all.size());
    out.emplace_back(all.substr(at, end - at));
    at = end + 1;
  }
  return out;
}

// This process's arguments after the program's name (/proc/self/cmdline).
std::vector<std::string> own_arguments() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  const std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> args = split_nul(all);
  if (!args.empty()) args.erase(args.begin());
  return args;
}

// FNV-1a over the arguments.
double fingerprint(const std::vector<std::string>& args) {
  std::uint64_t h = kFnv1aOffset;
  for (const std::string& a : args)
    h = fnv1a(h, std::string_view(a.c_str(), a.size() + 1));
  return job_digest(h);
}
#endif

// The most bytes of one input file compared between processes: more than any input rrfp
// reads of a run it can train or emulate (a trace's 256 MiB), and a bound on the time.
constexpr std::uint64_t kMaxComparedBytes = 1ull << 30;

// Adds the bytes of the file at `path` to `h`; false where its reader would refuse it (missing,
// a FIFO or device, over kMaxComparedBytes) or it cannot be read. The files are compared before
// they are read (train's hint): a FIFO named as --hint held every process in its open, a
// /dev/zero in its read, past --timeout, where the reader refuses both at once.
bool hash_file(std::uint64_t& h, const std::filesystem::path& path) {
  try {
    scan_input_file(path.string(), InputKind{"input", kMaxComparedBytes, 0},
                    [&](std::string_view piece) {
                      h = fnv1a(h, piece);
                      return true;
                    });
    return true;
  } catch (const InputError&) {
    return false;
  }
}

// A digest of the bytes at `path`: a file's, or a folder's files' (a trace of one file per
// rank), each with its name, in name order; -1 where it cannot be read, which its reader
// refuses in its own words (under the job's input agreement).
double content_digest(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::uint64_t h = kFnv1aOffset;
  if (!fs::is_directory(path, ec)) return hash_file(h, path) ? job_digest(h) : -1;
  // The files a folder of traces is read from (.json, .json.gz): another file beside them on
  // one node is no difference of input.
  std::vector<fs::path> files;
  try {
    for (const auto& entry : fs::directory_iterator(path, ec))
      if (entry.is_regular_file(ec) && trace_file_name(entry.path().filename().string()))
        files.push_back(entry.path());
  } catch (const fs::filesystem_error&) {
    return -1;  // unreadable here: its reader refuses it in its own words
  }
  if (ec) return -1;
  std::sort(files.begin(), files.end());
  for (const fs::path& p : files) {
    const std::string name = p.filename().string();
    h = fnv1a(h, std::string_view(name.c_str(), name.size() + 1));
    if (!hash_file(h, p)) return -1;
  }
  return job_digest(h);
}

#ifdef RRFP_HAVE_MPI
// Every process of the job must run the same command line: one with another --lr or --steps
// trained on silently (different losses) or failed on a message of the wrong size. Refused on
// every process; rank 0 names the first argument that differs and the ranks it differs on.
void refuse_other_command_lines(Job& job) {
  const std::vector<std::string> mine = own_arguments();
  const double f = fingerprint(mine);
  const auto every = job.all_gather(std::span(&f, 1));
  std::vector<int> other;
  for (int r = 0; r < static_cast<int>(every.size()); ++r)
    if (every[r].empty() || every[r][0] != every[0][0]) other.push_back(r);
  if (other.empty()) return;
  std::string text;  // NUL-ended, as the kernel gives them: no argument holds a NUL
  for (const std::string& a : mine)
    text += a + '\0';
  const auto lines = job.gather_to_root(std::as_bytes(std::span(text.data(), text.size())));
  if (job.rank() != 0) throw InputError("mpirun: the processes run different command lines");
  auto args_of = [&](int r) {
    return split_nul(
        std::string_view(reinterpret_cast<const char*>(lines[r].data()), lines[r].size()));
  };
  const std::vector<std::string> first = args_of(0), theirs = args_of(other.front());
  std::size_t i = 0;
  while (i < first.size() && i < theirs.size() && first[i] == theirs[i])
    ++i;
  auto at = [](const std::vector<std::string>& v, std::size_t k) {
    return k < v.size() ? "'" + printable(v[k], 60) + "'" : std::string("nothing");
  };
  throw InputError("mpirun: every process must run the same command line; rank(s) " +
                   rank_list(other) + " differ from rank 0's at argument " + std::to_string(i + 1) +
                   ": " + at(theirs, i) + " where rank 0 has " + at(first, i));
}

// Every process of the job leaves together, exiting `code` through the shutdown barrier, once
// the one that speaks has printed its line. The SIGTERM mpirun sends once the first process has
// left (rank 0 too, still in the shutdown) then ends a process without a "stopped by" line
// after that one.
[[noreturn]] void leave_together(int code) {
  quiet_signals();
  throw QuietExit{code};
}

// How long a process told of another's failure waits for that one to end the job: its step's
// threads join first, and a task under way ends at its next check.
constexpr std::chrono::seconds kTellerEndsJobWithin{5};
#endif

}  // namespace

void refuse_other_input_files(Job& job, const InputFiles& files) {
  std::vector<double> mine;
  for (const InputFile& f : files)
    mine.push_back(f.path.empty() ? 0 : content_digest(f.path));
  // The first rank that read a file holds the others to it. Every process sees every
  // digest: all refuse alike, and rank 0 says it.
  const std::vector<Differing> differ = differing_over_job(job, mine);
  for (std::size_t i = 0; i < files.size(); ++i)
    if (!differ[i].other.empty())
      throw InputError("mpirun: every process must read the same " + files[i].flag + "; '" +
                       printable(files[i].path, 100) + "' holds other bytes on rank(s) " +
                       rank_list(differ[i].other) + " than on rank " +
                       std::to_string(differ[i].first) +
                       " (each process reads its own copy, from its working folder on its node)");
}

// Said by every process so started, naming its rank: where only some of the job's command lines
// lack --transport mpi (an mpirun with several app contexts), this process's is one of them,
// which the job's comparison of the command lines, made over MPI, never reaches.
void refuse_inproc_under_mpirun() {
  const char* size = std::getenv("OMPI_COMM_WORLD_SIZE");
  if (size == nullptr || std::strtol(size, nullptr, 10) < 2) return;
  const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
  throw InputError("--transport inproc on mpi rank " + printable(rank ? rank : "?", 12) +
                   ": mpirun started " + printable(size, 12) +
                   " processes, and each given no --transport mpi would run the whole job in "
                   "its own threads; give --transport mpi (one process per rank) to every "
                   "process, or run without mpirun");
}

void run_as_mpi_process(std::int64_t timeout_ms, const std::function<void(Job&)>& body) {
#ifdef RRFP_HAVE_MPI
  if (!launched_by_mpirun())
    throw InputError("--transport mpi: start rrfp under mpirun (see docs/mpi.md)");
  // Told of another process's failure, a process's stop signals go quiet: mpirun's SIGTERM, as
  // the failing process ends the job, is no user's stop (rank 0 said "stopped by SIGTERM;
  // nothing written" under that process's line).
  MpiWorld world(MpiWorldOptions{.timeout_ms = timeout_ms, .on_peer_failure = quiet_signals});
  try {
    refuse_other_command_lines(world);
    body(world);
  } catch (const JobInputError& e) {
    // A refusal agreed over the job (dist/job.hpp): its first refusing rank says it, here too,
    // before the shutdown barrier.
    if (e.speaks()) print_input_error(e);
    leave_together(2);
  } catch (const InputError& e) {
    // Rank 0 says it here, before the shutdown barrier lets any process leave: once one exits
    // non-zero, mpirun ends the others, and a line rank 0 wrote after the world was gone was
    // lost so (in CI, when every rank refused the same bad layout at once).
    if (world.rank() == 0) print_input_error(e);
    leave_together(2);
  } catch (const JobError& e) {
    // Every process failed alike, knowing it: one line, and the exit as a refusal's.
    if (world.rank() == 0)
      print_line("rrfp: run failed: " + as_flags(one_line(first_line(e.what()))));
    leave_together(1);
  } catch (const std::exception& e) {
    // A failure another process told this one of: that process says it and ends the job, so
    // this one waits for that, its signals quiet (every relaying rank printed it again, and
    // rank 0, ended by mpirun's SIGTERM, added "stopped by SIGTERM; nothing written"). Said
    // here after all where the job has not ended by then: the teller may be gone.
    if (from_peer(e)) {
      quiet_signals();
      std::this_thread::sleep_for(kTellerEndsJobWithin);
    }
    // One write: ranks failing together share mpirun's stderr, and a line written piece by
    // piece interleaves with theirs (a watchdog's report lost its rank prefix so, in CI).
    print_line("rrfp: run failed on mpi rank " + std::to_string(world.rank()) + ": " +
               as_flags(one_line(first_line(e.what()))));
    world.abort(1);
  }
#else
  (void)timeout_ms;
  (void)body;
  throw InputError(
      "--transport mpi: this rrfp was built without Open MPI: configure with it "
      "(RRFP_WITH_MPI AUTO or ON, no sanitizer; scripts/install-deps.sh installs "
      "libopenmpi-dev) and rebuild");
#endif
}

}  // namespace rrfp
