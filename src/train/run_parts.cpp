#include "train/run_parts.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "core/clock.hpp"
#include "core/error.hpp"
#include "core/file_place.hpp"
#include "core/format.hpp"
#include "core/output_file.hpp"
#include "sim/metrics.hpp"

namespace rrfp::train {

namespace {

// The folders of `dir` that do not exist yet, `dir` first: what making it makes. Walked as
// written, as create_directories walks it: normalised, `nx/../f/run` lost the `nx` it makes.
std::vector<std::filesystem::path> missing_folders(const std::string& dir) {
  std::vector<std::filesystem::path> missing;
  std::error_code ec;
  for (std::filesystem::path p(dir); !p.empty() && p.has_relative_path(); p = p.parent_path()) {
    const std::string name = p.filename().string();
    if (name.empty() || name == "." || name == "..") continue;  // "a/b/" names "a/b"
    if (std::filesystem::symlink_status(p, ec).type() != std::filesystem::file_type::not_found)
      break;
    missing.push_back(p);
  }
  return missing;
}

// Removes the folders a refused run made, `dir` first, where they exist: each is empty unless
// another process wrote there meanwhile, and rmdir leaves such a folder alone. (Only the last
// was removed, and none where making it failed: `--out new/run` under umask 777 left new/.)
void remove_made(const std::vector<std::filesystem::path>& made) {
  for (const auto& p : made)
    ::rmdir(p.c_str());
}

// Makes `dir` and checks it is a folder this process can write, before training starts; the
// folders it made, `dir` first.
std::vector<std::filesystem::path> prepare_out(const std::string& dir) {
  std::error_code ec;
  // A link to nothing: create_directories said "File exists", which hid the cause.
  if (const auto st = std::filesystem::symlink_status(dir, ec); std::filesystem::is_symlink(st)) {
    std::error_code follow;
    if (!std::filesystem::exists(dir, follow))
      throw InputError("`out`: '" + dir + "' is a symbolic link to '" +
                       std::filesystem::read_symlink(dir, ec).string() + "', " +
                       (follow ? "which cannot be followed (" + follow.message() + ")"
                               : std::string("which does not exist")) +
                       "; create it or choose another `out`");
  }
  const std::vector<std::filesystem::path> made = missing_folders(dir);
  std::filesystem::create_directories(dir, ec);
  std::string why = ec ? ec.message() : std::string();
  if (why.empty() && !std::filesystem::is_directory(dir, ec)) why = "not a directory";
  // The reason, where the folder exists but is not writable (it said nothing).
  if (why.empty() && access(dir.c_str(), W_OK) != 0) why = std::strerror(errno);
  if (!why.empty()) {
    remove_made(made);  // a refused run leaves no folder of its own behind
    throw InputError("`out`: cannot write to directory '" + dir + "': " + why);
  }
  return made;
}

// Whether OUT/checkpoint.bin is a file; what keeps it from being looked at (a loop of links, a
// folder it may not search, a name too long) refused as `out`'s, where it ended the run as an
// internal error.
bool holds_checkpoint(const std::string& out) {
  const std::string path = out + "/checkpoint.bin";
  std::error_code ec;
  const bool is = std::filesystem::is_regular_file(path, ec);
  if (ec && ec != std::errc::no_such_file_or_directory)
    throw InputError("`out`: cannot look at '" + path + "': " + ec.message());
  return is;
}

}  // namespace

OutLock::~OutLock() {
  if (fd_ >= 0) ::close(fd_);
}

void OutLock::lock(const std::string& out) {
  const std::string path = out + "/.rrfp-lock";
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) throw InputError("`out`: cannot create '" + path + "': " + std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0)
    throw InputError("`out`: '" + out +
                     "' is in use by another rrfp train; give each run its own `out`");
}

std::int64_t process_cpu_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

ReportRun report_of(const StepResult& r, const WorkModel& m, const TrainOptions& o) {
  ReportRun out;
  out.policy = to_string(o.runtime.arbiter.policy);
  out.hint = o.hint;
  out.comm = to_string(o.runtime.comm);
  // Its communication last, as the other commands' labels have it: a trace's reader takes a
  // blocking run from a label ending " (blocking)" (train's said neither, and `predict` replayed
  // a blocking run's trace as async: -21% where the blocking twin is -11%).
  out.label = out.policy + " " + o.hint + ", measured training step (" + out.comm + ")";
  out.cfg = m.config();
  out.result = r.run;
  out.metrics = compute_metrics(r.run, lower_bound(m, measured_work(m, r.run)));
  return out;
}

namespace {

// The run's outputs are none of its inputs: a hint file named as one of them was replaced by
// it, and an `out` that is the corpus folder put the run's files into the next run's corpus
// (one inside it does not: the corpus is read without its subfolders).
void refuse_outputs_over_inputs(const TrainRun& o, const std::vector<std::string>& names) {
  const TrainOptions& t = o.train;
  if (t.task == "text" && same_place(o.out, t.data_dir))
    throw InputError("`out`: '" + o.out + "' is the corpus folder `data` ('" + t.data_dir +
                     "'): the run's files would join the corpus that later runs read; choose "
                     "another `out` (a subfolder is not read)");
  std::error_code ec;
  if (!std::filesystem::is_regular_file(t.hint, ec)) return;  // a built-in hint's name
  for (const std::string& name : names)
    if (same_place(o.out + "/" + name, t.hint))
      throw InputError("`out`: '" + o.out + "/" + name + "' is the hint file `hint` the run " +
                       "reads; writing it would replace the hint, choose another `out`");
}

// What the run writes at its end besides loss.csv: a fresh run removes an earlier run's.
constexpr std::array<const char*, 4> kEndOutputs{"loss.svg", "trace.json", "timeline.svg",
                                                 "durations.csv"};

// The files the run writes at its end, checked before its steps (a directory at one of them
// failed the run once every step was done).
std::vector<std::string> output_names(const TrainRun& o) {
  std::vector<std::string> names{"loss.csv"};
  names.insert(names.end(), kEndOutputs.begin(), kEndOutputs.end());
  if (o.save_every > 0) names.push_back("checkpoint.bin");
  return names;
}

}  // namespace

// A million held-out batches: hours of validation for the default model on this project's
// reference VM, far past any use.
constexpr int kMaxEvalBatches = 1'000'000;

void check_run(const TrainRun& o) {
  validate(o.train);
  if (o.eval_every < 0)
    throw InputError("`eval_every`: must be at least 0, got " + std::to_string(o.eval_every));
  // Bounded as every input is: 2^31 - 1 batches started a validation that never ended.
  if (o.eval_batches < 1 || o.eval_batches > kMaxEvalBatches)
    throw InputError("`eval_batches`: must be between 1 and " + std::to_string(kMaxEvalBatches) +
                     ", got " + std::to_string(o.eval_batches));
  if (o.save_every < 0)
    throw InputError("`save_every`: must not be negative, got " + std::to_string(o.save_every));
  refuse_outputs_over_inputs(o, output_names(o));
  // A missing checkpoint, refused before `out` is made (the checkpoint is read once `out` is
  // locked); what else is wrong with it, its reader says.
  struct stat st {};
  if (!o.resume.empty() && ::stat(o.resume.c_str(), &st) != 0 && errno == ENOENT)
    throw InputError("`resume`: '" + o.resume + "' does not exist");
}

namespace {

// What OUT may not hold for this run (prepare_run_out).
void check_run_out(const TrainRun& o) {
  const bool held = holds_checkpoint(o.out);
  // A fresh run writes new logs beside it: a later resume from it would go on from the earlier
  // run and splice its steps into this one's log (and the earlier run's log is overwritten).
  if (o.resume.empty() && held)
    throw InputError("`out`: '" + o.out +
                     "' holds checkpoint.bin of an earlier run; pass `resume` with it to go on "
                     "from it, or move it away, or choose another `out`");
  // A resume replaces OUT/checkpoint.bin: one that is not the checkpoint resumed (another run's,
  // copied there) was overwritten without a word, where a fresh run is refused.
  std::error_code ec;
  if (!o.resume.empty() && held &&
      !std::filesystem::equivalent(o.resume, o.out + "/checkpoint.bin", ec) && !ec)
    throw InputError(
        "`out`: '" + o.out + "' holds a checkpoint.bin other than `resume` ('" + o.resume + "'), " +
        (o.save_every > 0 ? "which the run would replace"
                          : "beside which the run would write its logs (a resume from it would "
                            "splice them into another run's)") +
        "; move it away, or choose another `out`");
  for (const std::string& name : output_names(o))  // files it places itself: no FIFO
    check_output_path(o.out + "/" + name, "`out`: '" + o.out + "/" + name + "'",
                      OutputMode{false, false});
  // The checkpoint's temporary, written beside the file its path names (a link's target) and
  // renamed over it (save_checkpoint): a directory or FIFO there was met at the first save, the
  // steps before it lost.
  if (o.save_every > 0) {
    const std::string tmp = link_target(o.out + "/checkpoint.bin") + ".tmp";
    check_output_path(tmp, "`out`: '" + tmp + "'", OutputMode{false, false});
  }
}

}  // namespace

void prepare_run_out(const TrainRun& o) {
  const auto made = prepare_out(o.out);
  try {
    check_run_out(o);
  } catch (...) {
    remove_made(made);  // empty: refused before anything was written there
    throw;
  }
}

void remove_earlier_outputs(const std::string& out) {
  for (const char* name : kEndOutputs) {
    const std::string path = out + "/" + name;
    if (::unlink(path.c_str()) != 0 && errno != ENOENT)
      throw Error("`out`: cannot remove the earlier run's '" + path + "': " + std::strerror(errno));
  }
}

Progress::Progress(int steps) : steps_(steps), tty_(is_terminal(STDOUT_FILENO)) {}

void Progress::start(int first, bool quiet) {
  first_ = first;
  quiet_ = quiet;
  start_ns_ = last_line_ns_ = now_ns();
}

void Progress::step(int s, double loss, const std::string& val, double tokens_per_s,
                    double bubble) {
  const std::int64_t now = now_ns();
  if (quiet_ || !(tty_ || (s + 1) % 25 == 0 || s + 1 == steps_ || !val.empty() ||
                  now - last_line_ns_ >= kQuietNs))
    return;
  last_line_ns_ = now;
  const double elapsed = static_cast<double>(now - start_ns_) / 1e9;
  const double eta = elapsed / (s + 1 - first_) * (steps_ - s - 1);
  // On a terminal the line is redrawn in place and cleared first: a shorter one left the
  // longer one's tail ("ETA 13ss").
  std::cout << (tty_ ? "\r\033[K" : "") << bar_of(s) << "  loss " << fmt("%.3f", loss)
            << (val.empty() ? "" : "  val " + val) << "  " << fmt("%.0f", tokens_per_s)
            << " tok/s  bubble " << fmt("%.1f%%", 100 * bubble) << "  ETA " << fmt("%.0fs", eta)
            << (tty_ && val.empty() ? "" : "\n") << std::flush;
  open_ = tty_ && val.empty();
}

void Progress::validating(int s, int batches) const {
  if (quiet_ || !tty_) return;
  std::cout << "\r\033[K" << bar_of(s) << "  validating (" << batches
            << (batches == 1 ? " batch)" : " batches)") << std::flush;
  open_ = true;
}

void Progress::validated(int s, int done, int batches) {
  const std::int64_t now = now_ns();
  if (quiet_ || tty_ || now - last_line_ns_ < kQuietNs) return;
  last_line_ns_ = now;
  std::cout << bar_of(s) << "  validating: " << done << " of " << batches << " batches done"
            << std::endl;
}

void Progress::end() const {
  if (!quiet_ && open_) std::cout << "\n";
  open_ = false;
}

std::string Progress::bar_of(int s) const {
  const int bar = static_cast<int>(24LL * (s + 1) / steps_);  // in int, past 89M steps wrapped
  return "[" + std::string(bar, '#') + std::string(24 - bar, '.') + "] step " +
         std::to_string(s + 1) + "/" + std::to_string(steps_);
}

}  // namespace rrfp::train
