#include "core/output_file.hpp"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "core/error.hpp"
#include "core/mpirun_env.hpp"

namespace rrfp {

namespace {

std::string folder_of(const std::string& path) {
  const auto slash = path.find_last_of('/');
  return slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
}

// Writes `bytes` to `fd` and closes it, closing it also when the write fails.
void write_and_close(int fd, const std::string& bytes, const std::string& what) {
  try {
    write_all(fd, bytes, what + ": writing failed");
  } catch (...) {
    ::close(fd);
    throw;
  }
  if (::close(fd) != 0) throw Error(what + ": writing failed: " + std::strerror(errno));
}

// The temporary replace_file is writing, for remove_temporary_in_progress() in a signal
// handler: a buffer nothing frees, and whether it names one now.
char g_temporary[4096];
std::atomic<bool> g_temporary_held{false};
static_assert(std::atomic<bool>::is_always_lock_free, "read in a signal handler");

// A new file beside `target` that no other writer has (O_EXCL), with `mode`; its name in `tmp`.
// A short name of its own, not `target`'s plus a suffix, which could pass NAME_MAX. -1 and
// errno when the folder takes none.
int open_temporary(const std::string& target, mode_t mode, std::string& tmp) {
  const std::string stem = folder_of(target) + "/.rrfp-" + std::to_string(::getpid()) + "-";
  for (int n = 0; n < 100; ++n) {
    tmp = stem + std::to_string(n) + ".tmp";
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
    if (fd >= 0 || errno != EEXIST) return fd;
  }
  return -1;
}

// Writes `bytes` over the regular file `path` in place, for a file whose folder takes no new
// one or no rename. Its size limit is checked and its blocks reserved before a byte changes, so
// that `ulimit -f` or a full disk fails with the file as it was: truncated first, it was left
// cut short, the earlier output lost.
void write_in_place(const std::string& path, const std::string& bytes, const std::string& what) {
  rlimit lim{};
  if (::getrlimit(RLIMIT_FSIZE, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY &&
      bytes.size() > lim.rlim_cur)
    throw Error(what + ": writing failed: " + std::strerror(EFBIG) + " (nothing written)");
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw InputError(what + " cannot be written: " + std::strerror(errno));
  // Reserved, then cut to the new size: the write then needs no block it has not got.
  const auto size = static_cast<off_t>(bytes.size());
  const bool reserved = bytes.empty() || ::fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, size) == 0 ||
                        errno == EOPNOTSUPP || errno == ENOSYS;
  if (!reserved || ::ftruncate(fd, size) != 0) {
    const int err = errno;
    ::close(fd);
    throw Error(what + ": writing failed: " + std::strerror(err) + " (nothing written)");
  }
  write_and_close(fd, bytes, what);
}

// The N of /dev/fd/N, /proc/self/fd/N or /proc/PID/fd/N of this process, or -1.
int numbered_descriptor(const std::string& path) {
  const std::string own = "/proc/" + std::to_string(::getpid()) + "/fd/";
  for (const std::string& prefix : {std::string("/dev/fd/"), std::string("/proc/self/fd/"), own}) {
    if (path.rfind(prefix, 0) != 0) continue;
    const std::string digits = path.substr(prefix.size());
    if (!digits.empty() && digits.size() <= 9 &&
        digits.find_first_not_of("0123456789") == std::string::npos)
      return std::stoi(digits);
  }
  return -1;
}

// The descriptor of this process open for writing that `path` names, or -1: /dev/stdout,
// /dev/stderr, /dev/fd/N, /proc/self/fd/N, or the very file standard output or error was sent
// to (`--json all.txt >>all.txt`). Such a path is written through that descriptor, as the
// shell set it up (appending, or at its offset): opened anew, it was truncated, and a
// temporary renamed over it replaced the file the shell had redirected to, earlier runs' output
// lost. `st` is the path's stat.
int descriptor_named(const std::string& path, const struct stat& st) {
  for (const int fd : {numbered_descriptor(path), STDOUT_FILENO, STDERR_FILENO}) {
    struct stat held {};
    const int flags = fd < 0 ? -1 : ::fcntl(fd, F_GETFL);
    if (flags == -1 || (flags & O_ACCMODE) == O_RDONLY || ::fstat(fd, &held) != 0 ||
        held.st_dev != st.st_dev || held.st_ino != st.st_ino)
      continue;
    // A regular file is written through only where what is written lands after what it holds
    // (appended, or at its end): a descriptor opened read-write at its start (`3<>f`) kept the
    // old tail after the report. Such a file is replaced, as any other.
    if (!S_ISREG(held.st_mode) || (flags & O_APPEND) != 0 ||
        ::lseek(fd, 0, SEEK_CUR) == held.st_size)
      return fd;
    return -1;
  }
  return -1;
}

// Which of 0..2 hold_closed_standard_streams() found closed (and holds with /dev/null).
std::atomic<bool> g_closed[3];

// The standard stream `path` names (/dev/stdout, /dev/fd/1, /proc/self/fd/1...), or -1.
int standard_stream_named(const std::string& path) {
  if (path == "/dev/stdin") return 0;
  if (path == "/dev/stdout") return 1;
  if (path == "/dev/stderr") return 2;
  const int n = numbered_descriptor(path);
  return n <= 2 ? n : -1;
}

// A path naming a standard stream the caller closed is refused: /dev/null holds its number,
// and opened anew the path wrote the report there, lost, with exit 0.
void refuse_closed_stream(const std::string& path, const std::string& what) {
  const int fd = standard_stream_named(path);
  if (fd < 0 || !g_closed[fd].load()) return;
  static const char* const names[] = {"standard input", "standard output", "standard error"};
  throw InputError(what + " names " + names[fd] + ", which is closed");
}

// Writes `bytes` through `fd`, a descriptor the process had open (descriptor_named), after what
// std::cout and std::cerr hold, so that the output lands where it was written in the run.
// Standard output's through std::cout: a failed write there ends the command as any of its
// (a closed pipe quietly, with 141), where one through the descriptor failed the run.
void write_through(int fd, const std::string& bytes, const std::string& what) {
  std::cerr.flush();
  if (fd == STDOUT_FILENO) {
    std::cout << bytes << std::flush;
    return;
  }
  std::cout.flush();
  write_all(fd, bytes, what + ": writing failed");
}

// FIFOs check_output_path opened, by path, for open_output to take.
std::mutex held_mu;
std::map<std::string, int> held_fifos;

// The FIFO held for `path`, or -1. One that `path` no longer names (the FIFO replaced by a
// file between the check and the write) is let go, and the path opened afresh.
int take_held_fifo(const std::string& path) {
  std::lock_guard lk(held_mu);
  const auto it = held_fifos.find(path);
  if (it == held_fifos.end()) return -1;
  const int fd = it->second;
  held_fifos.erase(it);
  struct stat held {
  }, now{};
  if (::fstat(fd, &held) == 0 && ::stat(path.c_str(), &now) == 0 && held.st_dev == now.st_dev &&
      held.st_ino == now.st_ino)
    return fd;
  ::close(fd);
  return -1;
}

// A reader started beside the command (`rrfp ... --json f & jq . <f`) may open the FIFO a little
// after the command looks: it is given kFifoGraceMs to.
constexpr int kFifoGraceMs = 1000;

void hold_fifo(const std::string& path, const std::string& what) {
  std::lock_guard lk(held_mu);
  if (held_fifos.count(path) > 0) return;
  for (int waited = 0;; waited += 10) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd >= 0) {
      held_fifos[path] = fd;
      return;
    }
    const int err = errno;
    if (err != ENXIO) throw InputError(what + " cannot be written: " + std::strerror(err));
    if (waited >= kFifoGraceMs)
      throw InputError(what + " is a FIFO with no reader (none came within " +
                       std::to_string(kFifoGraceMs / 1000) + " s); give a file");
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

// Whether a folder's refusal of a new file (errno `err`) is for want of permission, where a
// writable file in it is written in place instead.
bool in_place_instead(int err) {
  return err == EACCES || err == EPERM || err == EROFS;
}

// 0 where the folder of `target` takes a new file (one made and removed at once), else errno.
int folder_refuses(const std::string& target) {
  std::string tmp;
  const int fd = open_temporary(target, 0600, tmp);
  if (fd < 0) return errno == 0 ? EEXIST : errno;
  ::close(fd);
  ::unlink(tmp.c_str());
  return 0;
}

}  // namespace

std::string link_target(const std::string& path) {
  if (char* real = ::realpath(path.c_str(), nullptr)) {
    const std::string target = real;
    std::free(real);
    return target;
  }
  // A dangling link (a link made before the first save, to a larger disk): the file its last
  // link names, made where it points as a shell's redirection makes it (it was replaced by the
  // file, and the disk it named got nothing). A loop is left to the open, which says so.
  std::string at = path;
  for (int hop = 0; hop < 40; ++hop) {
    std::vector<char> buf(PATH_MAX);
    const ssize_t n = ::readlink(at.c_str(), buf.data(), buf.size() - 1);
    if (n < 0) return at;  // no link: the file to make
    std::string next(buf.data(), static_cast<std::size_t>(n));
    at = next.starts_with('/') ? next : folder_of(at) + "/" + next;
  }
  return path;
}

int open_output(const std::string& path, const std::string& what, OutputMode mode) {
  refuse_closed_stream(path, what);
  if (const int held = take_held_fifo(path); held >= 0) {
    ::fcntl(held, F_SETFL, ::fcntl(held, F_GETFL) & ~O_NONBLOCK);
    return held;
  }
  auto refuse = [&](const std::string& why) {
    if (mode.named_by_user) throw InputError(what + " " + why);
    throw Error(what + " " + why);
  };
  // O_NONBLOCK: opening a FIFO for writing fails at once (ENXIO) when nobody reads it, where a
  // blocking open waited forever, deaf to SIGTERM (its handler restarts the call).
  const int flags =
      O_WRONLY | O_CREAT | O_CLOEXEC | O_NONBLOCK | (mode.append ? O_APPEND : O_TRUNC);
  const int fd = ::open(path.c_str(), flags, 0644);
  if (fd < 0) {
    const int err = errno;
    if (err == ENXIO) refuse("is a FIFO with no reader (or a socket); give a file");
    if (err == EISDIR) refuse("is a directory, not a file");
    refuse(std::string("cannot be written: ") + std::strerror(err));
  }
  struct stat st {};
  const bool ok = ::fstat(fd, &st) == 0;
  const char* refused = !ok                                           ? "cannot be examined"
                        : S_ISDIR(st.st_mode)                         ? "is a directory, not a file"
                        : S_ISSOCK(st.st_mode)                        ? "is a socket, not a file"
                        : S_ISFIFO(st.st_mode) && !mode.named_by_user ? "is a FIFO, not a file"
                                                                      : nullptr;
  if (refused) {
    ::close(fd);
    refuse(refused);
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);  // from here on, writes may wait
  return fd;
}

void check_output_path(const std::string& path, const std::string& what, OutputMode mode) {
  refuse_closed_stream(path, what);
  if (path.empty()) throw InputError(what + " is empty; give a file");
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) throw InputError(what + " is a directory, not a file");
    if (descriptor_named(path, st) >= 0) return;  // written through the process's own
    if (S_ISSOCK(st.st_mode)) throw InputError(what + " is a socket, not a file");
    // Before the work a FIFO in the way is the input's (as a directory there is), so that every
    // process of a job agrees on the refusal; met mid-run by open_output, it fails the run.
    if (S_ISFIFO(st.st_mode) && !mode.named_by_user)
      throw InputError(what + " is a FIFO, not a file");
    if (S_ISFIFO(st.st_mode)) return hold_fifo(path, what);
    if (::access(path.c_str(), W_OK) != 0)
      throw InputError(what + " cannot be written: " + std::strerror(errno));
    if (!S_ISREG(st.st_mode)) return;  // a device: written in place
    // replace_file writes a temporary beside the file it names and renames it over, or, where
    // the folder takes none for want of permission, writes in place.
    const std::string target = link_target(path);
    const int err = folder_refuses(target);
    if (err != 0 && !in_place_instead(err))
      throw InputError(what + " cannot be written: its folder '" + folder_of(target) +
                       "' takes no new file: " + std::strerror(err));
    return;
  }
  if (errno != ENOENT) throw InputError(what + " cannot be examined: " + std::strerror(errno));
  const std::string target = link_target(path);  // a dangling link's file, made where it points
  const std::string folder = folder_of(target);
  if (::stat(folder.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    throw InputError(what + ": its folder '" + folder + "' does not exist");
  if (const int err = ::access(folder.c_str(), W_OK | X_OK) != 0 ? errno : folder_refuses(target))
    throw InputError(what + ": its folder '" + folder +
                     "' takes no new file: " + std::strerror(err));
}

std::string written_before(const std::string& error, const std::string& written) {
  return error + " (" + written + " written before it, and kept)";
}

void replace_file(const std::string& path, const std::string& bytes, const std::string& what) {
  refuse_closed_stream(path, what);
  struct stat st {};
  const bool exists = ::stat(path.c_str(), &st) == 0;
  if (const int fd = exists ? descriptor_named(path, st) : -1; fd >= 0)
    return write_through(fd, bytes, what);
  if (exists && !S_ISREG(st.st_mode)) return write_and_close(open_output(path, what), bytes, what);
  // A file the user may not write stays refused, as an open for writing refused it: the
  // rename needs only the folder's permission.
  if (exists && ::access(path.c_str(), W_OK) != 0)
    throw InputError(what + " cannot be written: " + std::strerror(errno));
  const std::string target = link_target(path);
  std::string tmp;
  const int fd = open_temporary(target, exists ? st.st_mode & 07777 : 0644, tmp);
  if (fd < 0) {
    // A writable file in a folder that takes no new one is written in place, as it was.
    if (exists && in_place_instead(errno)) return write_in_place(path, bytes, what);
    throw InputError(what + " cannot be written: " + std::strerror(errno));
  }
  const TemporaryInProgress in_progress(tmp);
  try {
    if (exists) ::fchmod(fd, st.st_mode & 07777);  // the umask took bits off the old mode
    write_and_close(fd, bytes, what);
    if (std::rename(tmp.c_str(), target.c_str()) != 0) {
      // Another user's writable file in a sticky folder (/tmp) takes no rename: in place.
      if (exists && (errno == EPERM || errno == EACCES)) {
        ::unlink(tmp.c_str());
        return write_in_place(path, bytes, what);
      }
      throw Error(what + ": cannot rename its temporary '" + tmp +
                  "' over it: " + std::strerror(errno));
    }
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
}

TemporaryInProgress::TemporaryInProgress(const std::string& tmp) {
  if (tmp.size() >= sizeof g_temporary) return;
  g_temporary_held.store(false);  // not read half rewritten
  std::memcpy(g_temporary, tmp.c_str(), tmp.size() + 1);
  g_temporary_held.store(true);
}

TemporaryInProgress::~TemporaryInProgress() {
  g_temporary_held.store(false);
}

void remove_temporary_in_progress() {
  const int saved = errno;  // a handler returning to the interrupted write must leave it
  if (g_temporary_held.exchange(false)) ::unlink(g_temporary);
  errno = saved;
}

void hold_closed_standard_streams() {
  for (int fd = 0; fd <= 2; ++fd)
    if (::fcntl(fd, F_GETFD) == -1 && errno == EBADF) {
      // The lowest free number, fd, unless /dev/null cannot be opened (nothing to do then).
      const int held = ::open("/dev/null", (fd == 0 ? O_WRONLY : O_RDONLY) | O_CLOEXEC);
      if (held == fd) g_closed[fd].store(true);
      if (held >= 0 && held != fd) ::close(held);
    }
}

void write_all(int fd, std::string_view bytes, const std::string& what) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw Error(what + ": " + (n < 0 ? std::strerror(errno) : "short write"));
    done += static_cast<std::size_t>(n);
  }
}

bool is_terminal(int fd) {
  if (::isatty(fd) == 0) return false;
  if (!launched_by_mpirun()) return true;
  // mpirun's stream, as this process's parent holds it; opened only to ask (no controlling
  // terminal taken, a FIFO not waited on).
  const std::string parents = "/proc/" + std::to_string(::getppid()) + "/fd/" + std::to_string(fd);
  const int theirs = ::open(parents.c_str(), O_RDONLY | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
  if (theirs < 0) return false;
  const bool tty = ::isatty(theirs) != 0;
  ::close(theirs);
  return tty;
}

}  // namespace rrfp
