#pragma once
// Replay from a Chrome trace (docs/twin.md): the durations of a step read from the JSON trace
// `--trace` writes (rrfp simulate, run and train), next to the CSV of sim/replay.hpp.
//
// The mapping: a process whose `process_name` is "LABEL / stage S" is stage S of run LABEL
// (the first run in the file is replayed); its thread id is the TP rank; a complete event
// ("ph": "X") whose args carry kind (F, B, W), chunk and microbatch is that task on that rank,
// its `dur` (microseconds) the task's duration and its args' `send_us` the message its output
// sent. Other events (blocked spans, metadata) are skipped.
#include <string>

#include "sim/workload.hpp"

namespace rrfp {

// Throws InputError naming the origin and what is wrong: not a trace, no rrfp run in it, a
// task on the wrong stage or rank, a task twice, or, per stage, the tasks no event gave.
RealizedWork parse_chrome_trace(const std::string& text, const WorkModel& m, int tp,
                                const std::string& origin);

}  // namespace rrfp
