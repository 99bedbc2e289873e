#pragma once
// Replay from a Chrome trace (docs/twin.md): a recorded step read from the JSON trace of rrfp's
// own --trace, the PyTorch profiler or Megatron-LM's timers, plain or gzipped, one file or a
// directory of them (one per rank), next to the CSV of sim/replay.hpp.
#include <string>
#include <utility>
#include <vector>

#include "sim/timeline.hpp"

namespace rrfp {

struct TraceOptions {
  std::string format = "auto";  // auto, rrfp, torch or megatron
  int step = -1;                // the step (run, iteration) to replay; -1: the first complete
  // The latency of every message the trace does not time; < 0: inferred from when the
  // consumers started (sim/timeline.hpp).
  double message_us = -1;
  const char* option = "replay";  // what errors about the path name (predict: TRACE)
};

const std::vector<std::string>& trace_formats();  // auto, rrfp, torch, megatron
// Refuses a `format` not among trace_formats() and a `message_us` that is NaN or past
// kMaxTaskUs (below 0: inferred), naming the option: what a replay reads with them.
void check_trace_options(const TraceOptions& o);

// True for what import_trace reads: a .json or .json.gz file (in any case), or a directory.
bool is_trace_path(const std::string& path);
// Whether a file's name is a trace's: .json or .json.gz, in any case (what a directory's trace
// is read from).
bool trace_file_name(const std::string& path);

// The bytes a trace written to `path` holds: `text` gzipped where the name ends in .gz (in any
// case), as import_trace and gzip's tools read it; else `text` itself.
std::string trace_file_bytes(const std::string& path, std::string text);

// Reads the trace at `path` (a file, or every .json / .json.gz file of a directory in name
// order) and builds the selected step (sim/timeline.hpp). Throws InputError naming the file and
// what is wrong: not a trace, no mapping recognizes it, a step it lacks, or, per stage, the
// tasks no event gave.
ImportedRun import_trace(const std::string& path, const WorkModel& m, int tp,
                         const TraceOptions& o = {});
// The same from texts in memory: (origin, text) per file, gzip or not.
ImportedRun import_trace_texts(const std::vector<std::pair<std::string, std::string>>& files,
                               const WorkModel& m, int tp, const TraceOptions& o = {});

// The shape a trace records (P, V from its chunks, M, a split backward when it has W tasks;
// placement loop), to run `rrfp predict` without shape flags. Throws InputError when the trace
// says too little (no task, chunks not a multiple of P). `tp_seen`, if given: the TP ranks an
// rrfp trace records (its task threads), 0 where the format does not say (the profilers' TP
// comes from `tp`).
PipelineConfig infer_trace_config(const std::string& path, int tp, const TraceOptions& o = {},
                                  int* tp_seen = nullptr);

// The durations of import_trace_texts of one file (kept for the CSV's sibling API).
RealizedWork parse_chrome_trace(const std::string& text, const WorkModel& m, int tp,
                                const std::string& origin);

}  // namespace rrfp
