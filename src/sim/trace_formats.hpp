#pragma once
// Inside the trace importer (sim/trace_import.hpp): the files as parsed JSON, and one reader per
// tool's mapping, each turning the files into one Timeline per step it finds (docs/twin.md).
#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "sim/timeline.hpp"

namespace rrfp::trace {

struct Doc {
  std::string origin;  // the file's path, for messages
  nlohmann::json json;
};

// The files as parsed JSON (sim/trace_files.cpp): gzip inflated, the whole set's parse costed
// first. read_docs takes a file or a folder of .json / .json.gz files (digit runs in their names
// ordered as numbers: rank2 before rank10); `option` names the flag or argument in messages.
std::vector<Doc> parse_docs(const std::vector<std::pair<std::string, std::string>>& files);
std::vector<Doc> read_docs(const std::string& path, const char* option);

// The event array of a document: the document itself or its `traceEvents`.
const nlohmann::json& events_of(const Doc& d);

// The longest time a trace spans, in microseconds (1e13: four months), and the latest clock
// reading it may hold: epoch microseconds (Kineto's ~1.7e15 in 2024) up to the year 2096. A
// double holds such a reading to 0.5 us at most; rebase then measures from the step's earliest.
constexpr double kMaxSpanUs = 1e13;
constexpr double kMaxClockUs = 4e15;

// A non-negative number at obj[key], at most kMaxSpanUs (a duration, or a count); throws
// InputError "<where>: `key` ...".
double number_at(const nlohmann::json& obj, const char* key, const std::string& where);
// A recorded wait's duration at obj[key] (a "blocked" span's `dur`): non-negative, at most
// kMaxTaskUs, as a task's (past 9.2e12 us the step's sums overflowed into a negative step).
double wait_at(const nlohmann::json& obj, const char* key, const std::string& where);
// A clock reading (`ts`) at obj[key]: non-negative, at most kMaxClockUs.
double clock_at(const nlohmann::json& obj, const char* key, const std::string& where);
// Puts the step's earliest event at 0 and refuses a step whose events span more than
// kMaxSpanUs, naming `origin` and the step.
void rebase(Timeline& t, const std::string& origin);
// A whole number in [0, 1e9] at obj[key].
int whole_at(const nlohmann::json& obj, const char* key, const std::string& where);
// The string at obj[key] ("" when absent), of event `event` (from 1) of `origin`; `parent` names
// the object holding it ("args"). One of another type is refused, naming the field: nlohmann's
// value() threw its type_error, which ended as an "internal error".
const std::string& string_at(const nlohmann::json& obj, const char* key, const std::string& origin,
                             size_t event, const char* parent = nullptr);
// The first of `keys` present in obj (nullptr: none).
const char* first_key(const nlohmann::json& obj, std::initializer_list<const char*> keys);

// What a trace says of its shape, read without one (the probes below).
struct Shape {
  int pp = 0, chunks = 0, microbatches = 0;
  int tp = 0;  // the TP ranks the trace records (rrfp's: task threads); 0: it does not say
  std::map<int, int> stage_of_chunk;  // where the trace says (rrfp's: the process of a chunk)
  bool split = false;
  // Where the largest chunk first appeared ("FILE: event N"; empty where the format does not
  // say): a shape that cannot hold it names that event, not only the flags.
  std::string largest_chunk_at;
  void saw(int chunk, int mb, Kind k) {
    chunks = std::max(chunks, chunk + 1);
    microbatches = std::max(microbatches, mb + 1);
    split = split || k == Kind::W;
  }
};

// The ids of one field the events carry: the largest, the event carrying it, and how many
// distinct ones there are.
struct IdsSeen {
  explicit IdsSeen(const char* f) : field(f) {}
  const char* field;
  std::set<int> ids;
  int top = 0;
  std::string at;
  // `where()` names the event; it is asked only for a new largest id, not for every event.
  template <class Where>
  void saw(int v, const Where& where) {
    ids.insert(v);
    if (v > top || at.empty()) top = v, at = where();
  }
  // A complete step holds every id below the largest: one the events skip leaves none complete.
  // The shape is not probed from such an id (one model_chunk_id of 1048575 in a 10 KB trace made
  // a shape of 33.5 million tasks: 10 s, 3.4 GB, then a line naming 16.7 million; a stray
  // microbatch id blamed --pp, --vpp and --microbatches, flags never given).
  void check() const {
    if (top >= static_cast<int>(ids.size()))
      throw InputError(at + ": " + field + " " + std::to_string(top) +
                       ": a complete step needs all " + std::to_string(top + 1) +
                       " of them, but the trace's events carry " + std::to_string(ids.size()) +
                       " (an id out of range?)");
  }
};

// rrfp's process names: "LABEL / stage S" -> (LABEL, S); false for any other name.
bool split_process_name(const std::string& name, std::string& label, int& stage);

Shape probe_rrfp(const std::vector<Doc>& docs);
Shape probe_torch(const std::vector<Doc>& docs, int tp);
Shape probe_megatron(const std::vector<Doc>& docs, int tp);

// rrfp's --trace: one Timeline per run (process group "LABEL / stage S"), `step` = its index.
std::vector<Timeline> read_rrfp(const std::vector<Doc>& docs, const WorkModel& m);
// The PyTorch profiler (Kineto or the legacy exporter), with record_function labels
// "PP:<chunk><F|I|B|W><mb>" or torch.distributed.pipelining's "Forward i" / "Backward i": one
// Timeline per ProfilerStep#N (one in all without step spans).
std::vector<Timeline> read_torch(const std::vector<Doc>& docs, const WorkModel& m, int tp);
// Megatron-LM timer timelines: forward-compute / backward-compute events with args iteration,
// microbatch and model chunk, a thread per rank: one Timeline per iteration.
std::vector<Timeline> read_megatron(const std::vector<Doc>& docs, const WorkModel& m, int tp);

}  // namespace rrfp::trace
