#pragma once
// A log written a line at a time and flushed after each, so that a run that is stopped (a
// signal, a crash, a full disk) keeps every line it finished: OUT/loss.csv.
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "report/report.hpp"

namespace rrfp::train {

// A value to write into an existing row as a continued log is rewritten: `column` (0-based)
// of the row of `step`.
struct RowFill {
  int step = -1, column = 0;
  std::string value;
};

class LogFile {
 public:
  // Starts `path` afresh with `header`; or, with `resume_step` >= 0 and `earlier` the file's
  // text (read_log), continues it after dropping the rows of steps past `resume_step` (a run
  // that died after its last checkpoint logged steps the resumed run does again). A row starts
  // with its step. Throws Error naming the path when it cannot be written. `fill`: a kept
  // row's empty field given its value (a validation a stop left out, done by the resumed run).
  LogFile(const std::string& path, const std::string& header, int resume_step,
          const std::optional<std::string>& earlier, const RowFill& fill = {});
  ~LogFile();
  LogFile(const LogFile&) = delete;
  LogFile& operator=(const LogFile&) = delete;

  // Writes and flushes one line (with its newline). Throws Error ("no space left on device")
  // when the bytes do not reach the file.
  void add(const std::string& line);
  // The rows a continued log kept from before (empty for a fresh one), without newlines.
  const std::vector<std::string>& earlier_rows() const { return earlier_; }

 private:
  std::string path_;
  std::vector<std::string> earlier_;
  std::FILE* f_ = nullptr;
};

// A resumed run's plot starts with the steps its log kept (rows of step, loss, val_loss, ...):
// loss.svg showed only the steps since the resume.
void plot_rows(const std::vector<std::string>& rows, PlotSeries& loss, PlotSeries& val);

// The text of the log at `path` as a resume finds it, read once for what follows (nullopt: no
// file there); bounded in size and line length.
std::optional<std::string> read_log(const std::string& path);

// Whether the log's text has a row of `step` whose `column` (0-based) is empty.
bool log_field_empty(const std::optional<std::string>& text, int step, int column);

// A resumed run continues the log at `path` (`text`, if there is one): it must be the log of
// the checkpoint's run, whose row for `step` holds the loss the checkpoint recorded (as "%.5f").
// Throws InputError naming the file otherwise: another run's log was continued, its rows and
// the resumed run's spliced into one file without a word.
void refuse_another_runs_log(const std::string& path, const std::optional<std::string>& text,
                             int step, double loss);

}  // namespace rrfp::train
