#include "core/input_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/error.hpp"
#include "core/format.hpp"

namespace rrfp {

namespace {

// Closes the descriptor on every path out.
struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// Opens `path` as read_input_file does and checks what it is: a regular file of at most the
// kind's bytes. Returns its size.
std::uint64_t open_checked(const std::string& path, const InputKind& kind, const std::string& what,
                           Fd& f) {
  const std::uint64_t cap = kind.max_bytes;
  // O_NONBLOCK: opening a FIFO must not wait for a writer; the type check below refuses it.
  f.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (f.fd < 0 && errno == ENOENT) throw MissingInputError(what + " does not exist");
  const std::string not_regular = " is not a regular file (a device, FIFO or socket); give a file";
  struct stat st {};
  // A socket cannot be opened at all (ENXIO): told by its type, as a device or FIFO is.
  if (f.fd < 0 && errno == ENXIO && ::stat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode))
    throw InputError(what + not_regular);
  if (f.fd < 0) throw InputError(what + " cannot be read: " + std::strerror(errno));
  if (::fstat(f.fd, &st) != 0) throw InputError(what + " cannot be read: " + std::strerror(errno));
  if (S_ISDIR(st.st_mode)) throw InputIsDirectoryError(what + " is a directory, not a file");
  if (!S_ISREG(st.st_mode)) throw InputError(what + not_regular);
  const auto size = static_cast<std::uint64_t>(st.st_size);
  if (size > cap) {
    // In bytes where the rounded sizes read alike ("has 1.0 GiB; at most 1.0 GiB").
    const bool alike = format_bytes(size) == format_bytes(cap);
    auto shown = [&](std::uint64_t n) {
      return alike ? std::to_string(n) + " bytes" : format_bytes(n);
    };
    const std::string reason =
        kind.cap_reason.empty() ? "" : " (" + std::string(kind.cap_reason) + ")";
    throw InputError(what + " has " + shown(size) + "; at most " + shown(cap) + " is read for `" +
                     kind.option + "`" + reason);
  }
  return size;
}

// Up to `n` bytes into `at`; 0 at the end of the file.
std::size_t read_some(const Fd& f, char* at, std::size_t n, const std::string& what) {
  for (;;) {
    const ssize_t got = ::read(f.fd, at, n);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) throw InputError(what + " cannot be read: " + std::strerror(errno));
    return static_cast<std::size_t>(got);
  }
}

std::string what_of(const std::string& path, const InputKind& kind) {
  return std::string("`") + kind.option + "`: '" + path + "'";
}

}  // namespace

std::string read_input_file(const std::string& path, const InputKind& kind) {
  const std::string what = what_of(path, kind);
  Fd f{-1};
  const std::uint64_t size = open_checked(path, kind, what, f);
  std::string out(size, '\0');
  std::size_t got = 0;
  while (got < size) {
    const std::size_t n = read_some(f, out.data() + got, size - got, what);
    if (n == 0) break;  // shrank meanwhile: take what is there
    got += n;
  }
  out.resize(got);
  check_line_lengths(out, kind, path);
  return out;
}

void scan_input_file(const std::string& path, const InputKind& kind,
                     const std::function<bool(std::string_view)>& take) {
  const std::string what = what_of(path, kind);
  Fd f{-1};
  std::uint64_t left = open_checked(path, kind, what, f);
  std::string piece(std::min<std::uint64_t>(left, kScanPiece), '\0');
  while (left > 0) {
    const std::size_t n =
        read_some(f, piece.data(),
                  static_cast<std::size_t>(std::min<std::uint64_t>(left, piece.size())), what);
    if (n == 0) return;  // shrank meanwhile
    left -= n;
    if (!take(std::string_view(piece.data(), n))) return;
  }
}

void check_line_lengths(std::string_view text, const InputKind& kind, const std::string& path) {
  if (kind.max_line == 0) return;
  std::size_t line = 1, start = 0;
  for (std::size_t i = 0; i <= text.size(); ++i) {
    if (i < text.size() && text[i] != '\n') continue;
    if (i - start > kind.max_line)
      throw InputError("`" + std::string(kind.option) + "`: '" + path + "': line " +
                       std::to_string(line) + " has " + format_bytes(i - start) +
                       "; lines may have at most " + format_bytes(kind.max_line));
    ++line;
    start = i + 1;
  }
}

}  // namespace rrfp
