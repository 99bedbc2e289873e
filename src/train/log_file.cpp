#include "train/log_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string_view>
#include <utility>

#include "core/error.hpp"
#include "core/format.hpp"
#include "core/input_file.hpp"
#include "core/output_file.hpp"
#include "core/printable.hpp"

namespace rrfp::train {

namespace {

// A log's size and line caps when it is read back (a resume continues it): 16 GiB, some 150M
// rows, whose index takes 16 bytes each.
const InputKind kLogInput{"out", 16ull << 30, 1u << 20};

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
// -1 for anything else (a row cut short by a crash, stray bytes). Counts the commas rather than
// splitting the row: a resume indexes every row of the log.
long long step_of(std::string_view row, std::size_t columns) {
  const std::size_t first = row.find(',');
  const std::string_view s = row.substr(0, first);
  if (static_cast<std::size_t>(std::count(row.begin(), row.end(), ',')) + 1 != columns ||
      s.empty() || s.size() > 10 ||  // kMaxSteps has 10 digits
      !std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return -1;
  long long step = 0;
  for (char c : s)
    step = step * 10 + (c - '0');
  return step;
}

std::string row_of(const std::vector<std::string>& fields) {
  std::string out;
  for (std::size_t i = 0; i < fields.size(); ++i)
    out += (i ? "," : "") + fields[i];
  return out;
}

// Reads the rows a continued log keeps, in the order of their steps, through a window of the
// file (they lie mostly in order: one read a window, not one a row).
class RowReader {
 public:
  explicit RowReader(const std::string& path) : path_(path) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd_ < 0) throw Error("cannot reread '" + path + "': " + std::strerror(errno));
  }
  ~RowReader() { ::close(fd_); }
  RowReader(const RowReader&) = delete;
  RowReader& operator=(const RowReader&) = delete;

  std::string row(const EarlierLog::Row& r) {
    if (r.at < at_ || r.at + r.size > at_ + buf_.size()) fill(r);
    return buf_.substr(static_cast<std::size_t>(r.at - at_), r.size);
  }

 private:
  void fill(const EarlierLog::Row& r) {
    buf_.resize(std::max<std::size_t>(kWindow, r.size));
    std::size_t got = 0;
    while (got < buf_.size()) {
      const ssize_t n =
          ::pread(fd_, buf_.data() + got, buf_.size() - got, static_cast<off_t>(r.at + got));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) throw Error("cannot reread '" + path_ + "': " + std::strerror(errno));
      if (n == 0) break;
      got += static_cast<std::size_t>(n);
    }
    buf_.resize(got);
    at_ = r.at;
    if (got < r.size) throw Error("cannot reread '" + path_ + "': it shrank while read");
  }

  static constexpr std::size_t kWindow = 1u << 20;
  std::string path_, buf_;
  std::uint64_t at_ = 0;
  int fd_ = -1;
};

// Rows up to the resumed step, in order, with the fill applied, to `out` (a file being
// written) and each to `kept`.
void copy_kept_rows(const EarlierLog& old, int resume_step, const RowFill& fill, int out,
                    const std::function<void(const std::string&)>& kept, const std::string& what) {
  RowReader in(old.path);
  std::string pending = old.header + "\n";
  for (const EarlierLog::Row& r : old.rows) {
    if (r.step > resume_step) break;
    std::string line = in.row(r);
    if (r.step == fill.step) {
      std::vector<std::string> f = fields_of(line);
      if (fill.column < static_cast<int>(f.size()) && f[fill.column].empty()) {
        f[fill.column] = fill.value;
        line = row_of(f);
      }
    }
    if (kept) kept(line);
    pending += line + "\n";
    if (pending.size() >= (1u << 20)) {
      write_all(out, pending, what);
      pending.clear();
    }
  }
  write_all(out, pending, what);
}

}  // namespace

LogFile::LogFile(const std::string& path, const std::string& header, int resume_step,
                 const std::optional<EarlierLog>& earlier, const RowFill& fill,
                 const std::function<void(const std::string&)>& kept)
    : path_(path) {
  const bool continuing = resume_step >= 0 && earlier;
  if (continuing) {
    // Whole rows of the steps up to the resumed one, each once and in order: a row cut short,
    // stray bytes and a row written twice were kept and spliced into the continued log. Written
    // beside the file a symbolic link names, and renamed over it: renamed over the link, the
    // log went on in `out` and the file the user linked to kept the rows before the resume.
    const std::string target = link_target(path);
    const std::string tmp = target + ".tmp";
    const int t = open_output(tmp, "'" + path + "': its temporary '" + tmp + "'",
                              OutputMode{.named_by_user = false});
    const TemporaryInProgress in_progress(tmp);  // a signal that ends the process removes it
    try {
      copy_kept_rows(*earlier, resume_step, fill, t, kept, "cannot rewrite '" + path + "'");
    } catch (...) {
      ::close(t);
      std::remove(tmp.c_str());
      throw;
    }
    if (::close(t) != 0 || std::rename(tmp.c_str(), target.c_str()) != 0) {
      std::remove(tmp.c_str());
      throw Error("cannot rewrite '" + path + "': " + std::strerror(errno));
    }
  }
  fd_ =
      open_output(path, "'" + path + "'", OutputMode{.append = continuing, .named_by_user = false});
  try {
    if (!continuing) add(header);
  } catch (...) {
    ::close(fd_);  // no destructor runs for a constructor that throws
    throw;
  }
}

LogFile::~LogFile() {
  if (fd_ >= 0) ::close(fd_);
}

// A row that reached the file in part (a full disk, a file size limit) is taken back, so that
// every row there is whole: it was left cut mid-row.
void LogFile::add(const std::string& line) {
  const off_t before = ::lseek(fd_, 0, SEEK_END);
  try {
    write_all(fd_, line + "\n", "writing '" + path_ + "' failed");
  } catch (...) {
    if (before >= 0) {
      [[maybe_unused]] const int r = ::ftruncate(fd_, before);  // else nothing more to do
    }
    throw;
  }
}

void Curve::add(double x, double y) {
  if (!std::isfinite(y)) return;  // no point of an SVG may be "nan" (a diverged step's row)
  last_ = {x, y};
  if (seen_++ % stride_ != 0) return;
  s_.points.emplace_back(x, y);
  if (s_.points.size() < 2 * kMaxPoints) return;
  std::size_t kept = 0;
  for (std::size_t i = 0; i < s_.points.size(); i += 2)
    s_.points[kept++] = s_.points[i];
  s_.points.resize(kept);
  stride_ *= 2;
}

PlotSeries Curve::series() const {
  PlotSeries out = s_;
  if (seen_ > 0 && (out.points.empty() || out.points.back() != last_)) out.points.push_back(last_);
  return out;
}

void plot_row(const std::string& row, Curve& loss, Curve& val) {
  char* end = nullptr;
  const double step = std::strtod(row.c_str(), &end);
  if (*end != ',') return;
  const char* l = end + 1;
  const double lv = std::strtod(l, &end);
  if (end == l || *end != ',') return;
  loss.add(step, lv);
  const char* v = end + 1;
  const double vv = std::strtod(v, &end);
  if (end != v) val.add(step, vv);
}

namespace {

// Indexes a log's lines as they come in pieces: the header, then each whole row of a step up
// to the resumed one (where it lies, not its text).
class LogIndexer {
 public:
  LogIndexer(EarlierLog& log, int resume_step) : log_(log), resume_(resume_step) {}

  void take(std::string_view piece) {
    for (std::size_t i = 0; i < piece.size();) {
      const std::size_t nl = piece.find('\n', i);
      const std::size_t end = nl == std::string_view::npos ? piece.size() : nl;
      // An over-long line is measured to its end, not kept, so that the error gives its size.
      length_ += end - i;
      if (length_ <= kLogInput.max_line) line_.append(piece.substr(i, end - i));
      if (nl == std::string_view::npos) break;
      end_line();
      i = nl + 1;
    }
  }

  // The last line, should the file not end in a newline.
  void finish() {
    if (!line_.empty()) end_line();
    // Rows in order of their steps, a step's last row kept (stable: file order within a step).
    auto& rows = log_.rows;
    const auto by_step = [](const auto& a, const auto& b) { return a.step < b.step; };
    // A log is in order as a rule (a resume drops the rows past its step): then no sort, and
    // no sort's buffer of half the index.
    if (!std::is_sorted(rows.begin(), rows.end(), by_step))
      std::stable_sort(rows.begin(), rows.end(), by_step);
    std::size_t kept = 0;
    for (std::size_t i = 0; i < rows.size(); ++i)
      if (i + 1 == rows.size() || rows[i + 1].step != rows[i].step) rows[kept++] = rows[i];
    rows.resize(kept);
    rows.shrink_to_fit();
  }

 private:
  void end_line() {
    if (length_ > kLogInput.max_line)
      throw InputError("`out`: '" + log_.path + "': line " + std::to_string(lines_ + 1) + " has " +
                       format_bytes(length_) + "; lines may have at most " +
                       format_bytes(kLogInput.max_line));
    const std::uint64_t at = offset_;
    offset_ += line_.size() + 1;
    if (lines_++ == 0) {
      columns_ = fields_of(line_).size();
      log_.header = std::move(line_);
    } else if (const long long step = step_of(line_, columns_); step >= 0 && step <= resume_) {
      log_.rows.push_back(EarlierLog::Row{static_cast<std::int32_t>(step),
                                          static_cast<std::uint32_t>(line_.size()), at});
      if (step == resume_) log_.resumed_row = fields_of(line_);
    }
    line_.clear();
    length_ = 0;
  }

  EarlierLog& log_;
  long long resume_;
  std::string line_;
  std::uint64_t offset_ = 0, length_ = 0;
  std::size_t lines_ = 0, columns_ = 0;
};

}  // namespace

std::optional<EarlierLog> read_log(const std::string& path, int resume_step) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return std::nullopt;
  EarlierLog log;
  log.path = path;
  LogIndexer index(log, resume_step);
  scan_input_file(path, kLogInput, [&](std::string_view piece) {
    index.take(piece);
    return true;
  });
  index.finish();
  return log;
}

std::string validation_left_behind(const std::string& resume, int step) {
  const std::filesystem::path parent = std::filesystem::path(resume).parent_path();
  const std::string folder = parent.empty() ? std::string(".") : parent.string();
  const std::string path = folder + "/loss.csv";
  try {
    if (!log_field_empty(read_log(path, step), 2)) return {};
  } catch (const std::exception&) {
    return {};
  }
  return "`resume`: step " + std::to_string(step) + "'s validation was cut short in " + path +
         ", and this run's log starts after it; to fill it in, resume with `out` '" + folder + "'";
}

bool log_field_empty(const std::optional<EarlierLog>& log, int column) {
  if (!log || !log->resumed_row) return false;
  const std::vector<std::string>& row = *log->resumed_row;
  return column < static_cast<int>(row.size()) && row[column].empty();
}

void refuse_other_columns(const std::optional<EarlierLog>& log, const std::string& header) {
  if (!log || log->header == header) return;
  throw InputError("`out`: '" + log->path + "' has the columns '" + printable(log->header, 160) +
                   "' where this run writes '" + header +
                   "': another build's log, or an edited one; resume into another `out`, or "
                   "move the file away");
}

void refuse_another_runs_log(const std::string& path, const std::optional<EarlierLog>& log,
                             int step, double loss) {
  if (!log) return;
  const auto& row = log->resumed_row;
  const std::string want = fmt("%.5f", loss), got = row && row->size() > 1 ? (*row)[1] : "";
  if (got == want) return;
  // A log without the row may also have been cut short (a full disk): its last row says which.
  const std::string last = log->rows.empty()
                               ? "it has no rows"
                               : "its last is step " + std::to_string(log->rows.back().step);
  throw InputError("`out`: '" + path + "' is another run's log: " +
                   (got.empty() ? "it has no row for step " + std::to_string(step) + " (" + last +
                                      "; or it was cut short)"
                                : "its step " + std::to_string(step) + " has loss " + got) +
                   " where the checkpoint's run had " + want +
                   "; resume into the folder of the run that wrote the checkpoint, or another "
                   "`out`");
}

}  // namespace rrfp::train
