#include "train/log_file.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>

#include "core/error.hpp"
#include "core/format.hpp"
#include "core/input_file.hpp"
#include "core/output_file.hpp"

namespace rrfp::train {

namespace {

// A log's size and line caps when it is read back (a resume continues it).
const InputKind kLogInput{"out", 1ull << 30, 1u << 20};

// The fields of a CSV row without quoting (the log's own rows).
std::vector<std::string> fields_of(const std::string& row) {
  std::vector<std::string> out(1);
  for (char c : row)
    if (c == ',')
      out.emplace_back();
    else
      out.back() += c;
  return out;
}

// The step of a log row: its first field, digits only, where the row has the header's columns;
// -1 for anything else (a row cut short by a crash, stray bytes).
long long step_of(const std::vector<std::string>& fields, std::size_t columns) {
  const std::string& s = fields.front();
  if (fields.size() != columns || s.empty() || s.size() > 10 ||  // kMaxSteps has 10 digits
      !std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return -1;
  return std::atoll(s.c_str());
}

// A log's header and its whole rows by step, the last of a step written twice: stray bytes and
// rows cut short (a crash mid-write) are left out. The resume's check and the continued log
// read the same rows (the check read a step's last line, the log kept its first).
struct LogRows {
  std::string header;
  std::map<long long, std::string> rows;
};

LogRows whole_rows(const std::string& text) {
  LogRows out;
  std::size_t at = 0, columns = 0;
  for (bool first = true; at < text.size(); first = false) {
    std::size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(at, end - at);
    at = end + 1;
    const std::vector<std::string> f = fields_of(line);
    if (first) {
      columns = f.size();
      out.header = std::move(line);
    } else if (const long long step = step_of(f, columns); step >= 0) {
      out.rows[step] = std::move(line);
    }
  }
  return out;
}

std::string row_of(const std::vector<std::string>& fields) {
  std::string out;
  for (std::size_t i = 0; i < fields.size(); ++i)
    out += (i ? "," : "") + fields[i];
  return out;
}

}  // namespace

LogFile::LogFile(const std::string& path, const std::string& header, int resume_step,
                 const std::optional<std::string>& earlier, const RowFill& fill)
    : path_(path) {
  const bool continuing = resume_step >= 0 && earlier;
  if (continuing) {
    // Whole rows of the steps up to the resumed one, each once and in order: a row cut short,
    // stray bytes and a row written twice were kept and spliced into the continued log.
    LogRows old = whole_rows(*earlier);
    std::string kept = old.header + "\n";
    for (auto& [step, line] : old.rows) {
      if (step > resume_step) break;
      std::vector<std::string> f = fields_of(line);
      if (step == fill.step && fill.column < static_cast<int>(f.size()) && f[fill.column].empty()) {
        f[fill.column] = fill.value;
        line = row_of(f);
      }
      kept += line + "\n";
      earlier_.push_back(line);
    }
    const std::string tmp = path + ".tmp";
    const int t = open_output(tmp, "'" + path + "': its temporary '" + tmp + "'",
                              OutputMode{.named_by_user = false});
    try {
      write_all(t, kept, "cannot rewrite '" + path + "'");
    } catch (...) {
      ::close(t);
      std::remove(tmp.c_str());
      throw;
    }
    if (::close(t) != 0 || std::rename(tmp.c_str(), path.c_str()) != 0) {
      std::remove(tmp.c_str());
      throw Error("cannot rewrite '" + path + "': " + std::strerror(errno));
    }
  }
  const int fd =
      open_output(path, "'" + path + "'", OutputMode{.append = continuing, .named_by_user = false});
  f_ = ::fdopen(fd, continuing ? "a" : "w");
  if (!f_) {
    ::close(fd);
    throw Error("cannot write '" + path + "': " + std::strerror(errno));
  }
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

void plot_rows(const std::vector<std::string>& rows, PlotSeries& loss, PlotSeries& val) {
  for (const std::string& row : rows) {
    char* end = nullptr;
    const double step = std::strtod(row.c_str(), &end);
    if (*end != ',') continue;
    const char* l = end + 1;
    const double lv = std::strtod(l, &end);
    if (end == l || *end != ',') continue;
    loss.points.push_back({step, lv});
    const char* v = end + 1;
    const double vv = std::strtod(v, &end);
    if (end != v) val.points.push_back({step, vv});
  }
}

namespace {

// The fields of the log's row of `step` (its last, should there be several); none without the
// log or the row.
std::optional<std::vector<std::string>> row_of_step(const std::optional<std::string>& log,
                                                    int step) {
  if (!log) return std::nullopt;
  const LogRows rows = whole_rows(*log);
  const auto it = rows.rows.find(step);
  if (it == rows.rows.end()) return std::nullopt;
  return fields_of(it->second);
}

}  // namespace

std::optional<std::string> read_log(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return std::nullopt;
  return read_input_file(path, kLogInput);
}

bool log_field_empty(const std::optional<std::string>& text, int step, int column) {
  const auto row = row_of_step(text, step);
  return row && column < static_cast<int>(row->size()) && (*row)[column].empty();
}

void refuse_another_runs_log(const std::string& path, const std::optional<std::string>& text,
                             int step, double loss) {
  if (!text) return;
  const auto row = row_of_step(text, step);
  const std::string want = fmt("%.5f", loss), got = row && row->size() > 1 ? (*row)[1] : "";
  if (got == want) return;
  throw InputError("`out`: '" + path + "' is another run's log: " +
                   (got.empty() ? "it has no row for step " + std::to_string(step)
                                : "its step " + std::to_string(step) + " has loss " + got) +
                   " where the checkpoint's run had " + want +
                   "; resume into the folder of the run that wrote the checkpoint, or another "
                   "`out`");
}

}  // namespace rrfp::train
