// Replay CSVs of measured durations (sim/replay.hpp): read into a run's RealizedWork, written
// from one, and probed for a split backward.
#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <sstream>

#include "core/error.hpp"
#include "core/format.hpp"
#include "core/input_file.hpp"
#include "core/modes.hpp"
#include "core/printable.hpp"
#include "sim/fold_w.hpp"
#include "sim/replay.hpp"
#include "sim/timeline.hpp"
#include "sim/trace_import.hpp"

namespace rrfp {

namespace {

// A row: its line number and where its line lies in the text the table was read from, which
// outlives the table; its cells are found as they are read (cell()). A vector of strings a row
// held 32 times the file's size (a 256 MiB replay took 8.3 GB before its second row was refused).
struct Row {
  int line;
  std::uint32_t begin, size;  // the text is at most kReplayFile bytes
};

// The file's header (column -> index) and its rows; with a `step` column, only the chosen
// step's rows (`step` < 0: the last).
struct Table {
  std::string_view text;
  std::map<std::string, int> col;
  std::vector<Row> rows;
};

// `s` without the blanks at its ends. Blanks inside stay, for the cell's reader to refuse: "10
// 00" was read as 1000.
std::string_view trimmed(std::string_view s) {
  const std::size_t first = s.find_first_not_of(" \t\r");
  if (first == std::string_view::npos) return {};
  return s.substr(first, s.find_last_not_of(" \t\r") - first + 1);
}

// The line's cells, trimmed.
std::vector<std::string> cells_of(std::string_view s) {
  std::vector<std::string> out;
  for (std::size_t start = 0;;) {
    const std::size_t comma = std::min(s.find(',', start), s.size());
    out.emplace_back(trimmed(s.substr(start, comma - start)));
    if (comma == s.size()) return out;
    start = comma + 1;
  }
}

// Cell `i` of `row` (the line holds as many as the header: read_table checks), trimmed.
std::string_view cell(const Table& t, const Row& row, int i) {
  std::string_view line = t.text.substr(row.begin, row.size);
  for (; i > 0; --i)
    line.remove_prefix(line.find(',') + 1);
  return trimmed(line.substr(0, line.find(',')));
}

std::map<std::string, int> header_of(const std::vector<std::string>& cells,
                                     const std::string& where) {
  static const std::set<std::string> known = {"step", "stage",       "chunk",   "microbatch",
                                              "kind", "duration_us", "tp_rank", "send_us"};
  std::map<std::string, int> col;
  for (size_t i = 0; i < cells.size(); ++i) {
    if (!known.count(cells[i]))
      throw InputError(where + ": unknown column '" + printable(cells[i], 30) +
                       "' (the columns are [step,]stage,chunk,microbatch,kind,duration_us"
                       "[,tp_rank][,send_us])");
    if (!col.emplace(cells[i], static_cast<int>(i)).second)
      throw InputError(where + ": column '" + cells[i] + "' given twice");
  }
  for (const char* need : {"stage", "chunk", "microbatch", "kind", "duration_us"})
    if (!col.count(need))
      throw InputError(where + ": replay header lacks column '" + need +
                       "' (need [step,]stage,chunk,microbatch,kind,duration_us[,tp_rank]"
                       "[,send_us])");
  return col;
}

// Keeps the rows of the chosen step; a file without a `step` column holds one step.
void keep_step(Table& t, const std::string& origin, int step) {
  if (!t.col.count("step")) {
    if (step >= 0) throw InputError("`step`: " + origin + " holds one step (no \"step\" column)");
    return;
  }
  const int at = t.col.at("step");
  long long first = -1, last = -1;
  const auto step_of = [&](const Row& r) { return std::stoll(std::string(cell(t, r, at))); };
  for (const Row& r : t.rows) {
    const std::string_view st = cell(t, r, at);
    if (st.empty() || st.size() > 9 || st.find_first_not_of("0123456789") != std::string::npos)
      throw InputError(origin + ":" + std::to_string(r.line) + ": column step: '" +
                       printable(st, 30) + "' is not a whole number in [0, 999999999]");
    const long long n = step_of(r);
    first = first < 0 ? n : std::min(first, n);
    last = std::max(last, n);
  }
  // By value, as `last` is: "02" is step 2 (a text match never found it, and dropped its rows).
  const long long chosen = step >= 0 ? step : last;
  const auto other = [&](const Row& r) { return step_of(r) != chosen; };
  if (std::all_of(t.rows.begin(), t.rows.end(), other)) {
    // Counted where refused only: "from 3 to 7" read as every step between where one is missing.
    std::set<long long> steps;
    for (const Row& r : t.rows)
      steps.insert(step_of(r));
    const std::string range = std::to_string(first) + " to " + std::to_string(last);
    throw InputError("`step`: " + origin + " has no step " + std::to_string(chosen) +
                     (first == last ? "; it has step " + std::to_string(first)
                      : static_cast<long long>(steps.size()) == last - first + 1
                          ? "; it has steps " + range
                          : "; it has " + std::to_string(steps.size()) + " steps, from " + range));
  }
  t.rows.erase(std::remove_if(t.rows.begin(), t.rows.end(), other), t.rows.end());
}

// `text` must outlive the table, whose rows point into it.
Table read_table(const std::string& text, const std::string& origin, int step) {
  // Compressed, its first bytes were named as an unknown column.
  if (text.starts_with("\x1f\x8b"))
    throw InputError(origin +
                     ": a gzip file: a replay CSV is read as text (gunzip it first); a trace "
                     "is read compressed under a name ending in .json.gz (a trace written as "
                     "NAME.gz: rename it)");
  Table t;
  // An editor's byte order mark was read into the first column's name ("unknown column
  // '\xEF\xBB\xBFstage'").
  t.text = skip_bom(text);
  int line_no = 0;
  bool header = false;
  for (std::size_t at = 0; at < t.text.size();) {
    const std::size_t end = std::min(t.text.find('\n', at), t.text.size());
    const std::string_view line = t.text.substr(at, end - at);
    const Row row{++line_no, static_cast<std::uint32_t>(at),
                  static_cast<std::uint32_t>(line.size())};
    at = end + 1;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos || line[0] == '#') continue;
    const std::size_t cells =
        static_cast<std::size_t>(std::count(line.begin(), line.end(), ',')) + 1;
    const std::string where = origin + ":" + std::to_string(line_no);
    if (!header) {
      t.col = header_of(cells_of(line), where);
      header = true;
    } else if (cells != t.col.size()) {
      throw InputError(where + ": expected " + std::to_string(t.col.size()) + " columns, got " +
                       std::to_string(cells));
    } else {
      t.rows.push_back(row);
    }
  }
  if (!header) throw InputError(origin + ": empty replay file (no header)");
  // A header alone: said so (it read "--step: ... has no step -1; its last is -1" without --step).
  if (t.rows.empty()) throw InputError(origin + ": no rows after its header");
  keep_step(t, origin, step);
  return t;
}

// A cell as a non-negative decimal number (whole and <= 1e9 when `integer`).
double number_at(const Table& t, const Row& row, const std::string& where, const char* name,
                 bool integer) {
  const std::string s(cell(t, row, t.col.at(name)));
  double v = 0;
  size_t used = 0;
  try {
    // Decimal only: stod also reads hexadecimal ("0x10" as 16), inf and nan. With a '.', in
    // whatever locale the process set.
    const ClassicNumbers classic;
    if (s.find_first_not_of("0123456789.eE+-") == std::string::npos) v = std::stod(s, &used);
  } catch (...) {
    used = 0;
  }
  if (used == 0 || used != s.size() || !std::isfinite(v))
    throw InputError(where + ": column " + name + ": '" + printable(s, 30) + "' is not a number");
  if (v < 0) throw InputError(where + ": column " + name + ": negative value " + printable(s, 30));
  if (integer && (v != std::floor(v) || v > 1e9))
    throw InputError(where + ": column " + name + ": '" + printable(s, 30) +
                     "' is not a whole number in [0, 1e9]");
  return v;
}

Kind kind_at(const Table& t, const Row& row, const std::string& where) {
  const std::string_view k = cell(t, row, t.col.at("kind"));
  if (k == "F") return Kind::F;
  if (k == "B") return Kind::B;
  if (k == "W") return Kind::W;
  throw InputError(where + ": column kind: '" + printable(k, 10) + "' is not F, B or W");
}

// What a CSV's shape error adds: the file does not say its run's shape (`also`: an option
// named first, with its comma).
std::string shape_untold(const std::string& also) {
  return " (a CSV does not say its run's shape: give the " + also +
         "`pp`, `vpp` and `microbatches` it was recorded with)";
}

// Every task of every rank needs a duration; folded W durations join their B.
void finish(RealizedWork& r, const FoldedW& folded_w, const WorkModel& m, const std::string& origin,
            bool saw_w) {
  for (int rank = 0; rank < r.tp; ++rank)
    for (int i = 0; i < r.num_tasks; ++i) {
      const size_t at = static_cast<size_t>(rank) * r.num_tasks + i;
      if (r.compute_ns[at] < 0)
        throw InputError(
            origin + ": no duration for task " + to_string(m.task(i)) +
            (r.tp > 1 ? " on tp rank " + std::to_string(rank) : std::string()) +
            (m.task(i).kind == Kind::W && !saw_w
                 ? " (the replay has no W tasks: it was recorded without the split backward; "
                   "replay it with `split_backward` off)"
                 // A CSV does not hold its run's shape: the run's flags' default (4 stages, 8
                 // microbatches) looked for tasks a smaller run never had, without a word why.
                 : shape_untold("")));
    }
  if (const std::string w = folded_w.missing(m); !w.empty()) throw InputError(origin + ": " + w);
  folded_w.add_to(r.compute_ns);
  check_total(r, origin, "lower its durations");
}

}  // namespace

RealizedWork parse_replay_csv(const std::string& text, const WorkModel& m, int tp,
                              const std::string& origin, int step, double message_us) {
  RealizedWork r;
  r.tp = checked_tp(tp);
  r.num_tasks = m.num_tasks();
  const size_t slots = static_cast<size_t>(tp) * r.num_tasks;
  r.compute_ns.assign(slots, -1);
  r.message_ns.assign(slots, 0);
  r.message_bytes.assign(r.num_tasks, 0);
  FoldedW folded_w(slots);
  bool saw_w = false;
  const Table table = read_table(text, origin, step);
  const bool timed = table.col.count("send_us") > 0;
  if (timed && message_us >= 0)
    throw InputError(origin +
                     ": its send_us column times every message, so `message_us` has "
                     "none to time; leave it out, or the column");
  // Untimed, a message takes message_us: it was taken and ignored (every message free).
  const std::int64_t untimed = message_us >= 0 ? duration_ns(message_us, "`message_us`") : 0;
  for (const Row& row : table.rows) {
    const std::string where = origin + ":" + std::to_string(row.line);
    auto num = [&](const char* name, bool integer) {
      return number_at(table, row, where, name, integer);
    };
    TaskId t{kind_at(table, row, where), 0, 0};
    const int stage = static_cast<int>(num("stage", true));
    t.chunk = static_cast<int>(num("chunk", true));
    t.mb = static_cast<int>(num("microbatch", true));
    saw_w = saw_w || t.kind == Kind::W;
    const bool fold = folds_into_b(m, t);
    if (fold) t.kind = Kind::B;
    if (!m.valid(t))
      throw InputError(where + ": task " + to_string(t) + " does not exist in this run");
    if (m.stage_of(t) != stage)
      throw InputError(where + ": task " + to_string(t) + " runs on stage " +
                       std::to_string(m.stage_of(t)) + ", not " + std::to_string(stage));
    const std::string at_dur = where + ": column duration_us", at_send = where + ": column send_us";
    const auto dur = duration_ns(num("duration_us", false), at_dur.c_str());
    const auto send = timed ? duration_ns(num("send_us", false), at_send.c_str()) : untimed;
    // A message no task of this shape takes came from a stage it lacks (as a trace's: refused).
    if (timed && send > 0)
      sends_across(m, fold ? TaskId{Kind::W, t.chunk, t.mb} : t, where,
                   ": the rows come from a run of other stages (where a task sends nothing, give "
                   "0)");
    int lo = 0, hi = tp;
    if (table.col.count("tp_rank")) {
      lo = static_cast<int>(num("tp_rank", true));
      if (lo >= tp)
        throw InputError(where + ": tp_rank " + std::to_string(lo) + " >= `tp` " +
                         std::to_string(tp) + shape_untold("`tp`, "));
      hi = lo + 1;
    }
    for (int rank = lo; rank < hi; ++rank) {
      const size_t at = static_cast<size_t>(rank) * r.num_tasks + m.index(t);
      std::int64_t& into = fold ? folded_w[at] : r.compute_ns[at];
      if (into >= 0)
        throw InputError(where + ": task " + to_string(fold ? TaskId{Kind::W, t.chunk, t.mb} : t) +
                         " appears twice" +
                         (tp > 1 ? " on tp rank " + std::to_string(rank) : std::string()));
      into = dur;
      if (!fold) r.message_ns[at] = send;
    }
  }
  finish(r, folded_w, m, origin, saw_w);
  return r;
}

std::string replay_csv(const WorkModel& m, const std::vector<std::pair<int, RealizedWork>>& steps) {
  if (steps.empty()) return "";
  const bool stepped = steps.size() > 1 || steps.front().first >= 0;
  const int tp = steps.front().second.tp;
  std::string out = std::string(stepped ? "step," : "") +
                    "stage,chunk,microbatch,kind,duration_us," + (tp > 1 ? "tp_rank," : "") +
                    "send_us\n";
  for (const auto& [step, w] : steps)
    for (int rank = 0; rank < w.tp; ++rank)
      for (int i = 0; i < w.num_tasks; ++i) {
        const TaskId t = m.task(i);
        out += (stepped ? std::to_string(step) + "," : std::string()) +
               std::to_string(m.stage_of(t)) + "," + std::to_string(t.chunk) + "," +
               std::to_string(t.mb) + "," + kind_char(t.kind) + "," +
               fmt("%.3f", static_cast<double>(w.compute(rank, i)) / 1e3) + "," +
               (w.tp > 1 ? std::to_string(rank) + "," : "") +
               fmt("%.3f", static_cast<double>(w.message(rank, i)) / 1e3) + "\n";
      }
  return out;
}

RealizedWork read_replay_file(const std::string& path, const WorkModel& m, int tp,
                              const TraceOptions& trace, bool* coordination_measured) {
  if (coordination_measured) *coordination_measured = false;
  if (is_trace_path(path)) {
    ImportedRun run = import_trace(path, m, tp, trace);
    if (coordination_measured) *coordination_measured = run.coordination_measured;
    return std::move(run.work);
  }
  check_trace_options(trace);  // a `message_us` of NaN was taken as none
  // A CSV has one mapping, its own columns: a format was taken and ignored.
  if (trace.format != "auto")
    throw InputError("`trace_format` " + trace.format + ": maps a trace's events to tasks; '" +
                     path + "' is a CSV, read by its columns (leave it out)");
  return parse_replay_csv(read_input_file(path, kReplayFile), m, tp, path, trace.step,
                          trace.message_us);
}

int replay_csv_last_step(const std::string& path) {
  const std::string text = read_input_file(path, kReplayFile);
  const Table table = read_table(text, path, -1);
  if (!table.col.count("step") || table.rows.empty()) return -1;
  return std::stoi(std::string(cell(table, table.rows.front(), table.col.at("step"))));
}

bool replay_records_split(const std::string& path, int tp, const TraceOptions& trace) {
  if (is_trace_path(path)) {
    // A probe: a trace that says too little is reported by the read that follows, in its words.
    try {
      PipelineConfig c = infer_trace_config(path, tp, trace);
      if (!c.split_backward) return false;
      // W tasks somewhere in the file: the step replayed decides (--step's, or the first
      // complete one), as predict's does. A step without them was refused for lacking them, and
      // the message said the trace had none.
      c.split_backward = false;
      return import_trace(path, WorkModel(c), tp, trace).has_w;
    } catch (const InputError&) {
      return false;
    }
  }
  const std::string text = read_input_file(path, kReplayFile);
  const Table table = read_table(text, path, trace.step);
  for (const Row& row : table.rows)
    if (cell(table, row, table.col.at("kind")) == "W") return true;
  return false;
}

}  // namespace rrfp
