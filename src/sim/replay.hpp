#pragma once
// Replay: a CSV of measured durations, columns [step,]stage,chunk,microbatch,kind,duration_us and
// optionally tp_rank (else the row holds for every rank) and send_us (the message that task's
// output sends). Every task of the run needs a row.
#include <string>
#include <utility>
#include <vector>

#include "sim/trace_import.hpp"
#include "sim/workload.hpp"

namespace rrfp {

// Steps as a replay CSV (every column, tp_rank when TP > 1, step when there are several or a
// step number >= 0 is given): parse_replay_csv reads each back.
std::string replay_csv(const WorkModel& m, const std::vector<std::pair<int, RealizedWork>>& steps);

// With a `step` column the file holds several steps: `step` picks one (-1: the last). A CSV
// without a send_us column times no message: each takes `message_us` (>= 0), else nothing. With
// the column every message is timed there, and a `message_us` >= 0 is refused (InputError).
RealizedWork parse_replay_csv(const std::string& text, const WorkModel& m, int tp,
                              const std::string& origin, int step = -1, double message_us = -1);
// A CSV, or a trace (sim/trace_import.hpp: .json, .json.gz or a directory) read with `trace`.
// `coordination_measured`, when given: whether the file measured the TP coordination's latency
// (work.coord_ns: rrfp's own traces; a CSV never does).
RealizedWork read_replay_file(const std::string& path, const WorkModel& m, int tp,
                              const TraceOptions& trace = {},
                              bool* coordination_measured = nullptr);
// The step a replay CSV of several steps replays by default, its last; -1: it holds one step.
int replay_csv_last_step(const std::string& path);
// Whether the replay at `path` was recorded with the split backward (its step, `trace.step`'s
// or a trace's first complete one, holds W tasks): what `split_backward` auto follows when a
// run is given one.
bool replay_records_split(const std::string& path, int tp, const TraceOptions& trace = {});

}  // namespace rrfp
