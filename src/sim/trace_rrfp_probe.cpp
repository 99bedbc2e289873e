// The shape rrfp's own --trace records (sim/trace_formats.hpp), read without one: its stages
// from the process names, its chunks, microbatches and TP ranks from the tasks' args and
// threads, each id bounded.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>

#include "core/error.hpp"
#include "core/modes.hpp"
#include "sim/trace_formats.hpp"

namespace rrfp::trace {

namespace {

// A task's id at args[key] below `below`, as the reader takes it (task_of's whole_at): an
// integer, or a float with nothing after the point (ids written 0.0 made no task here, and a
// trace the reader takes was refused as holding none).
std::optional<int> id_at(const nlohmann::json& args, const char* key, int below) {
  const auto it = args.find(key);
  if (it == args.end() || !it->is_number()) return std::nullopt;
  const double v = it->get<double>();
  if (!(v >= 0 && v < below) || std::floor(v) != v) return std::nullopt;
  return static_cast<int>(v);
}

}  // namespace

Shape probe_rrfp(const std::vector<Doc>& docs) {
  Shape s;
  IdsSeen chunk_ids{"chunk"}, mb_ids{"microbatch"};
  for (const Doc& d : docs) {
    // The processes first: a task may come before the event that names its process.
    std::map<long long, int> stage_of_pid;
    std::size_t event = 0;
    for (const auto& e : events_of(d)) {
      ++event;
      const auto args = e.is_object() ? e.find("args") : e.end();
      std::string label;
      int stage = 0;
      if (args == e.end() || !args->is_object() || string_at(e, "ph", d.origin, event) != "M" ||
          string_at(e, "name", d.origin, event) != "process_name" ||
          !split_process_name(string_at(*args, "name", d.origin, event, "args"), label, stage))
        continue;
      s.pp = std::max(s.pp, stage + 1);
      if (const auto pid = e.find("pid"); pid != e.end() && pid->is_number_integer())
        stage_of_pid[pid->get<long long>()] = stage;
    }
    event = 0;
    for (const auto& e : events_of(d)) {
      ++event;
      if (!e.is_object()) continue;
      const auto args = e.find("args");
      if (args == e.end() || !args->is_object()) continue;
      const auto c = id_at(*args, "chunk", 1 << 20), mb = id_at(*args, "microbatch", 1 << 24);
      if (string_at(e, "ph", d.origin, event) == "X" && c && mb) {
        // Events from 1, as read.
        const auto where = [&] { return d.origin + ": event " + std::to_string(event); };
        chunk_ids.saw(*c, where);
        mb_ids.saw(*mb, where);
        const bool w = string_at(*args, "kind", d.origin, event, "args") == "W";
        s.saw(*c, *mb, w ? Kind::W : Kind::F);
        const auto tid = e.find("tid");
        const int rank =
            tid != e.end() && tid->is_number_unsigned() && tid->get<std::uint64_t>() < kMaxTp
                ? tid->get<int>()
                : 0;
        s.tp = std::max({s.tp, 1, rank + 1});
        const auto pid = e.find("pid");
        if (pid != e.end() && pid->is_number_integer())
          if (const auto st = stage_of_pid.find(pid->get<long long>()); st != stage_of_pid.end())
            s.stage_of_chunk.emplace(*c, st->second);
      }
    }
  }
  if (chunk_ids.ids.empty()) return s;  // the caller says the trace holds no task
  // A stray id named a huge shape and blamed the flags. Chunks that no stage count divides are
  // named by the caller, with their event.
  if (s.pp < 1 || s.chunks % s.pp == 0) chunk_ids.check();
  mb_ids.check();
  s.largest_chunk_at = chunk_ids.at;
  return s;
}

}  // namespace rrfp::trace
