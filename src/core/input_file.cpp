#include "core/input_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

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

}  // namespace

std::string read_input_file(const std::string& path, const InputKind& kind) {
  const std::string what = std::string("`") + kind.option + "`: '" + path + "'";
  const std::uint64_t cap = kind.max_bytes;
  // O_NONBLOCK: opening a FIFO must not wait for a writer; the type check below refuses it.
  Fd f{::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK)};
  if (f.fd < 0)
    throw InputError(what + (errno == ENOENT ? " does not exist" : " cannot be read: ") +
                     (errno == ENOENT ? "" : std::strerror(errno)));
  struct stat st {};
  if (::fstat(f.fd, &st) != 0) throw InputError(what + " cannot be read: " + std::strerror(errno));
  if (S_ISDIR(st.st_mode)) throw InputError(what + " is a directory, not a file");
  if (!S_ISREG(st.st_mode))
    throw InputError(what + " is not a regular file (a device, FIFO or socket); give a file");
  const auto size = static_cast<std::uint64_t>(st.st_size);
  if (size > cap)
    throw InputError(what + " has " + format_bytes(size) + "; at most " + format_bytes(cap) +
                     " is read for `" + kind.option + "`");
  std::string out(size, '\0');
  std::size_t got = 0;
  while (got < size) {
    const ssize_t n = ::read(f.fd, out.data() + got, size - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw InputError(what + " cannot be read: " + std::strerror(errno));
    if (n == 0) break;  // shrank meanwhile: take what is there
    got += static_cast<std::size_t>(n);
  }
  out.resize(got);
  check_line_lengths(out, kind, path);
  return out;
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
