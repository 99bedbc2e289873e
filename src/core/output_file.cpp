#include "core/output_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.hpp"

namespace rrfp {

int open_output(const std::string& path, const std::string& what, OutputMode mode) {
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

void check_output_path(const std::string& path, const std::string& what) {
  if (path.empty()) throw InputError(what + " is empty; give a file");
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) throw InputError(what + " is a directory, not a file");
    if (::access(path.c_str(), W_OK) != 0)
      throw InputError(what + " cannot be written: " + std::strerror(errno));
    return;
  }
  if (errno != ENOENT) throw InputError(what + " cannot be examined: " + std::strerror(errno));
  const auto slash = path.find_last_of('/');
  const std::string folder = slash == std::string::npos ? "."
                             : slash == 0               ? "/"
                                                        : path.substr(0, slash);
  if (::stat(folder.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    throw InputError(what + ": its folder '" + folder + "' does not exist");
  if (::access(folder.c_str(), W_OK | X_OK) != 0)
    throw InputError(what + ": its folder '" + folder +
                     "' takes no new file: " + std::strerror(errno));
}

void write_all(int fd, const std::string& bytes, const std::string& what) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw Error(what + ": " + (n < 0 ? std::strerror(errno) : "short write"));
    done += static_cast<std::size_t>(n);
  }
}

}  // namespace rrfp
