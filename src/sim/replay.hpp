#pragma once
// Replay: a CSV of measured durations, columns stage,chunk,microbatch,kind,duration_us and
// optionally tp_rank (else the row holds for every rank) and send_us (the message that task's
// output sends). Every task of the run needs a row.
#include <string>

#include "sim/workload.hpp"

namespace rrfp {

RealizedWork parse_replay_csv(const std::string& text, const WorkModel& m, int tp,
                              const std::string& origin);
RealizedWork read_replay_file(const std::string& path, const WorkModel& m, int tp);

}  // namespace rrfp
