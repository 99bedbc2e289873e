#include "train/log_file.hpp"

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/error.hpp"

namespace rrfp::train {

LogFile::LogFile(const std::string& path, const std::string& header, bool append) : path_(path) {
  std::error_code ec;
  const bool continuing = append && std::filesystem::is_regular_file(path, ec);
  f_ = std::fopen(path.c_str(), continuing ? "a" : "w");
  if (!f_) throw Error("cannot write '" + path + "': " + std::strerror(errno));
  if (!continuing) add(header);
}

LogFile::~LogFile() {
  if (f_) std::fclose(f_);
}

void LogFile::add(const std::string& line) {
  errno = 0;
  if (std::fputs(line.c_str(), f_) < 0 || std::fputc('\n', f_) == EOF || std::fflush(f_) != 0)
    throw Error("writing '" + path_ +
                "' failed: " + (errno ? std::strerror(errno) : "short write"));
}

}  // namespace rrfp::train
