#include "train/log_file.hpp"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "core/error.hpp"
#include "core/input_file.hpp"

namespace rrfp::train {

LogFile::LogFile(const std::string& path, const std::string& header, int resume_step)
    : path_(path) {
  std::error_code ec;
  const bool continuing = resume_step >= 0 && std::filesystem::is_regular_file(path, ec);
  if (continuing) {
    const std::string old = read_input_file(path, InputKind{"out", 1ull << 30, 1u << 20});
    std::string kept;
    std::size_t at = 0;
    for (bool first = true; at < old.size(); first = false) {
      std::size_t end = old.find('\n', at);
      if (end == std::string::npos) end = old.size();
      const std::string line = old.substr(at, end - at);
      at = end + 1;
      if (!first && (line.empty() || std::atoll(line.c_str()) > resume_step)) continue;
      kept += line + "\n";
    }
    const std::string tmp = path + ".tmp";
    std::FILE* t = std::fopen(tmp.c_str(), "w");
    const bool ok = t && std::fputs(kept.c_str(), t) >= 0 && std::fflush(t) == 0;
    if (t) std::fclose(t);
    if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
      std::remove(tmp.c_str());
      throw Error("cannot rewrite '" + path + "': " + std::strerror(errno));
    }
  }
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
