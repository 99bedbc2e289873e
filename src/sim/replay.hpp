#pragma once
// Replay: a CSV of measured durations, columns stage,chunk,microbatch,kind,duration_us and
// optionally tp_rank (else the row holds for every rank) and send_us (the message that task's
// output sends). Every task of the run needs a row.
#include <string>

#include "sim/trace_import.hpp"
#include "sim/workload.hpp"

namespace rrfp {

RealizedWork parse_replay_csv(const std::string& text, const WorkModel& m, int tp,
                              const std::string& origin);
// A CSV, or a trace (sim/trace_import.hpp: .json, .json.gz or a directory) read with `trace`.
RealizedWork read_replay_file(const std::string& path, const WorkModel& m, int tp,
                              const TraceOptions& trace = {});

}  // namespace rrfp
