// The checks of the files a command writes, before its work (check_outputs, cli/options.hpp):
// each output its own file, none of them an input, stdout for --json alone.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <optional>
#include <string>

#include "cli/options.hpp"
#include "core/error.hpp"
#include "core/file_place.hpp"
#include "core/output_file.hpp"
#include "core/printable.hpp"
#include "core/progress_ticker.hpp"

namespace rrfp {

namespace {

// Whether outputs `a` and `b` name one file (same_place); standard output however given ('-',
// /dev/stdout: both were written there, the JSON report cut by the trace). A character device
// (/dev/null) is no file two outputs could clobber.
bool same_output(const std::string& a, const std::string& b) {
  namespace fs = std::filesystem;
  if (is_stdout(a) || is_stdout(b)) return is_stdout(a) && is_stdout(b);
  std::error_code ec;
  if (fs::is_character_file(a, ec) || fs::is_character_file(b, ec)) return false;
  return same_place(a, b);
}

// Whether writing output `out` replaces input `in`: the existing file itself, or a file inside
// an input folder (a trace of one file per rank, read whole). An input that does not exist is
// refused by its reader before anything is written.
bool overwrites_input(const std::string& out, const std::string& in) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(in, ec)) {
    const fs::path dir = fs::canonical(in, ec);
    const fs::path to = ec ? fs::path() : landing(out, ec);
    if (ec) return lands_inside(out, in);  // no absolute path: by walking up from `out`
    return std::mismatch(dir.begin(), dir.end(), to.begin(), to.end()).first == dir.end();
  }
  return fs::is_regular_file(in, ec) && fs::exists(out, ec) && fs::equivalent(out, in, ec) && !ec;
}

// Whether `path` is what descriptor `fd` has open (/dev/stdout or /dev/fd/1 for 1, the file
// it was sent to). A character device there (a terminal, /dev/null) counts only as such a
// spelling: /dev/null named beside `>/dev/null` clobbers nothing.
bool is_descriptor(const std::string& path, int fd, const char* dev_name) {
  struct stat named {
  }, held{};
  if (::stat(path.c_str(), &named) != 0 || ::fstat(fd, &held) != 0 || named.st_dev != held.st_dev ||
      named.st_ino != held.st_ino)
    return false;
  const std::string n = std::to_string(fd);
  return !S_ISCHR(named.st_mode) || path == dev_name || path == "/dev/fd/" + n ||
         path == "/proc/self/fd/" + n;
}

}  // namespace

// Whether `path` is standard output: '-', or what descriptor 1 has open.
bool is_stdout(const std::string& path) {
  return path == "-" || is_descriptor(path, STDOUT_FILENO, "/dev/stdout");
}

void check_outputs(NamedPaths outputs, NamedPaths inputs) {
  const bool json = std::any_of(outputs.begin(), outputs.end(),
                                [](const auto& o) { return std::string(o.second) == "--json"; });
  const bool json_on_stdout = std::any_of(outputs.begin(), outputs.end(), [](const auto& o) {
    return std::string(o.second) == "--json" && !o.first.empty() && is_stdout(o.first);
  });
  for (const auto& [path, flag] : outputs) {
    // Only a JSON report goes to stdout, where the human lines then leave it: another output
    // given '-' wrote a file named "-" (predict --svg, sweep --csv, plan --out...). A command
    // without --json (sweep, schedule show) prints only its own lines there.
    // Nor under another name (/dev/stdout, or the file `> FILE` sent stdout to): `plan --out
    // h.txt > h.txt` wrote the hint and the report into one file, which no longer read as a hint.
    if (!path.empty() && std::string(flag) != "--json" && is_stdout(path))
      throw InputError(std::string(flag) + ": '" + path + "' " +
                       (path == "-" ? "(stdout)" : "(where stdout goes)") + " is " +
                       (json ? "for --json only"
                             : "not taken (this command has no --json; stdout carries its "
                               "own lines)") +
                       "; give a file");
    // With the JSON on stdout the human lines go to stderr: an output there took them in
    // (`plan --json - --out h.txt 2>h.txt` wrote the report into the hint).
    if (!path.empty() && std::string(flag) != "--json" && json_on_stdout &&
        is_descriptor(path, STDERR_FILENO, "/dev/stderr"))
      throw InputError(std::string(flag) + ": '" + path +
                       "' (where stderr goes) takes the report's lines, which --json on "
                       "stdout sends there; give a file");
    if (!path.empty() && path != "-")
      check_output_path(path, std::string(flag) + ": '" + path + "'");
  }
  // Each output its own file: two given one were both reported written, and only the last
  // was there. Nor an input's: `predict t.json --json t.json` replaced the trace it read.
  for (auto a = outputs.begin(); a != outputs.end(); ++a) {
    if (a->first.empty()) continue;
    for (auto b = outputs.begin(); b != a; ++b)
      if (!b->first.empty() && same_output(a->first, b->first))
        throw InputError(std::string(a->second) + ": '" + a->first + "' is also given to " +
                         b->second + (b->first == a->first ? "" : " (as '" + b->first + "')") +
                         "; give each output a file of its own");
    if (a->first == "-") continue;
    for (const auto& [in, flag] : inputs)
      if (!in.empty() && overwrites_input(a->first, in))
        throw InputError(std::string(a->second) + ": '" + a->first + "' is the input " + flag +
                         " or inside it; writing it would replace what is read, give another "
                         "file");
  }
}

void WrittenOutputs::write(const char* flag, const std::string& path,
                           const std::function<void()>& write) {
  if (path.empty()) return;
  const auto said = [&](const std::exception& e) { return written_before(e.what(), written_); };
  // A trace or timeline of millions of tasks takes a minute to write, which was a minute without
  // a word after the report's last progress line.
  // Not where its own line would land inside it (stdout's JSON, a file given as stderr).
  std::optional<ProgressTicker> ticker;
  if (progress_ && !is_stdout(path) && !is_descriptor(path, STDERR_FILENO, "/dev/stderr"))
    ticker.emplace("writing " + std::string(flag) + " " + visible(path));
  try {
    write();
  } catch (const InputError& e) {
    if (written_.empty()) throw;
    throw InputError(said(e));
  } catch (const Error& e) {
    if (written_.empty()) throw;
    throw Error(said(e));
  }
  if (is_stdout(path)) return;
  written_ += (written_.empty() ? "" : ", ") + std::string(flag) + " " + shell_word(path);
}

}  // namespace rrfp
