#pragma once
// A log written a line at a time and flushed after each, so that a run that is stopped (a
// signal, a crash, a full disk) keeps every line it finished: OUT/loss.csv.
#include <cstdint>
#include <cstdio>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "report/report.hpp"

namespace rrfp::train {

// A value to write into an existing row as a continued log is rewritten: `column` (0-based)
// of the row of `step`.
struct RowFill {
  int step = -1, column = 0;
  std::string value;
};

// What a resume needs of the log it continues, read once in pieces: its header, where each
// whole row of a step up to the resumed one lies (a step's last row, should it have several),
// and the fields of the resumed step's row. (The log was read whole and its rows parsed into a
// map, three times: at 13.5M rows a resume took 7.1 GB; now 16 bytes a row.)
struct EarlierLog {
  struct Row {
    std::int32_t step;
    std::uint32_t size;  // without the newline
    std::uint64_t at;    // its first byte's offset in the file
  };
  std::string path, header;
  std::vector<Row> rows;  // by step, each step once
  std::optional<std::vector<std::string>> resumed_row;
};

// The log at `path` as a resume from step `resume_step` finds it (nullopt: no file there);
// bounded in size and line length.
std::optional<EarlierLog> read_log(const std::string& path, int resume_step);

class LogFile {
 public:
  // Starts `path` afresh with `header`; or, with `resume_step` >= 0 and `earlier` the file as
  // read_log found it, continues it after dropping the rows of steps past `resume_step` (a run
  // that died after its last checkpoint logged steps the resumed run does again), each kept
  // row handed to `kept` (without its newline). A row starts with its step. Throws Error naming
  // the path when it cannot be written. `fill`: a kept row's empty field given its value (a
  // validation a stop left out, done by the resumed run).
  LogFile(const std::string& path, const std::string& header, int resume_step,
          const std::optional<EarlierLog>& earlier, const RowFill& fill = {},
          const std::function<void(const std::string&)>& kept = {});
  ~LogFile();
  LogFile(const LogFile&) = delete;
  LogFile& operator=(const LogFile&) = delete;

  // Writes one line (with its newline) to the file at once. Throws Error ("no space left on
  // device") when the bytes do not reach the file, having cut back what of the line did.
  void add(const std::string& line);

 private:
  std::string path_;
  int fd_ = -1;
};

// A curve for loss.svg that stays small however long the run: past 2 x kMaxPoints points every
// other one is dropped and only every stride-th point from then on is kept (a run of millions
// of steps drew every one, and its loss.svg took 148 MB), and the last point added always ends
// it (the run's last step and its final validation). loss.csv keeps every step.
class Curve {
 public:
  static constexpr std::size_t kMaxPoints = 5000;
  Curve(std::string name, std::string colour) : s_{std::move(name), std::move(colour), {}} {}
  void add(double x, double y);
  PlotSeries series() const;

 private:
  PlotSeries s_;
  std::pair<double, double> last_{};
  std::int64_t stride_ = 1, seen_ = 0;
};

// A resumed run's plot starts with the steps its log kept (a row of step, loss, val_loss, ...):
// loss.svg showed only the steps since the resume.
void plot_row(const std::string& row, Curve& loss, Curve& val);

// Whether the resumed step's row in the log has an empty field `column` (0-based).
bool log_field_empty(const std::optional<EarlierLog>& log, int column);

// A resume from checkpoint `resume` at `step` into another folder (its log starts after the
// step): the warning that its folder's loss.csv has no val_loss in the row of `step`, a
// validation a stop cut short, which a resume into that folder fills in and this one does not.
// Empty where that row has one (or the log cannot be read: it is the other run's).
std::string validation_left_behind(const std::string& resume, int step);

// A resumed run's rows go under the log's header: one other than `header` (another build's
// columns, or an edited file) is refused, naming both (InputError): the rows were appended
// with more fields than it names, and read back shifted.
void refuse_other_columns(const std::optional<EarlierLog>& log, const std::string& header);
// A resumed run continues the log at `path` (`log`, if there is one): it must be the log of
// the checkpoint's run, whose row for `step` holds the loss the checkpoint recorded (as "%.5f").
// Throws InputError naming the file otherwise: another run's log was continued, its rows and
// the resumed run's spliced into one file without a word.
void refuse_another_runs_log(const std::string& path, const std::optional<EarlierLog>& log,
                             int step, double loss);

}  // namespace rrfp::train
