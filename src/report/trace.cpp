// Chrome trace (JSON array format): one process per run and stage, one thread per TP rank.
#include "core/json_input.hpp"
#include "report/report.hpp"
#include "sim/trace_import.hpp"

namespace rrfp {

namespace {
const char* reason_name(BlockReason r) {
  switch (r) {
    case BlockReason::Send:
      return "blocked: send";
    case BlockReason::Collective:
      return "blocked: collective";
    case BlockReason::Coordination:
      return "blocked: tp coordination";
  }
  return "blocked";
}
}  // namespace

// Written event by event: the document's text is what is held, not the parsed tree of every
// event, which took about 3 KB a task (6.9 GB for a step of 2M tasks). The text is the same as
// the whole document's dump: keys in order, "displayTimeUnit" before "traceEvents".
std::string chrome_trace(const std::vector<ReportRun>& runs) {
  std::string text = R"({"displayTimeUnit":"ms","traceEvents":[)";
  bool first = true;
  auto add = [&](const nlohmann::json& event) {
    if (!first) text += ',';
    first = false;
    text += json_text(event);
  };
  // Each run's stages take the pids from its index x `stride`: 1000 (run 1's stage 0 is pid
  // 1000) unless a run has more stages, then the next power of ten, so that no two runs' stages
  // share a pid (at P 1001, run 0's stage 1000 was run 1's stage 0, and the trace could not be
  // read back).
  std::int64_t stride = 1000;
  for (const auto& r : runs)
    while (stride < r.result.pp)
      stride *= 10;
  for (size_t i = 0; i < runs.size(); ++i) {
    const auto& r = runs[i];
    const std::int64_t pid_base = static_cast<std::int64_t>(i) * stride;
    for (int s = 0; s < r.result.pp; ++s) {
      // The run's ordering of forwards goes with it: a step that had them ordered (batch norm)
      // replayed without the ordering predicted gains the run could not have. So do payloads
      // carried on their offers, where they were (a replay without them missed by up to 7%).
      // Viewers show a process by args.name and ignore the rest.
      // The step from its start, as the run took it: a measured one begins with the runtime's
      // start-up, before any task's span (a replay's measured step starts at the first).
      nlohmann::json args = {{"name", r.label + " / stage " + std::to_string(s)},
                             {"ordered_forwards", r.cfg.ordered_forwards},
                             {"step_us", static_cast<double>(r.result.makespan) / 1e3}};
      if (r.offer_ack_ns) {
        args["offer_payload"] = true;
        args["offer_ack_us"] = static_cast<double>(*r.offer_ack_ns) / 1e3;
      }
      add({{"name", "process_name"}, {"ph", "M"}, {"pid", pid_base + s}, {"args", args}});
      add({{"name", "process_sort_index"},
           {"ph", "M"},
           {"pid", pid_base + s},
           {"args", {{"sort_index", pid_base + s}}}});
      for (int k = 0; k < r.result.tp; ++k)
        add({{"name", "thread_name"},
             {"ph", "M"},
             {"pid", pid_base + s},
             {"tid", k},
             {"args", {{"name", "tp rank " + std::to_string(k)}}}});
    }
    for (const auto& t : r.result.tasks) {
      const std::string kind(1, kind_char(t.task.kind));
      nlohmann::json args = {{"kind", kind}, {"chunk", t.task.chunk}, {"microbatch", t.task.mb}};
      if (t.send_ns >= 0) args["send_us"] = t.send_ns / 1e3;
      // A measured step: when its input from another stage arrived. From there to its start the
      // rank was busy, or (idle) waking and dispatching.
      if (t.input_at >= 0) args["input_us"] = t.input_at / 1e3;
      add({{"name", to_string(t.task)},
           {"cat", kind},
           {"ph", "X"},
           {"ts", t.start / 1e3},
           {"dur", (t.compute_end - t.start) / 1e3},
           {"pid", pid_base + t.stage},
           {"tid", t.rank},
           {"args", std::move(args)}});
    }
    for (const auto& b : r.result.blocked)
      add({{"name", reason_name(b.reason)},
           {"cat", "blocked"},
           {"ph", "X"},
           {"ts", b.start / 1e3},
           {"dur", (b.end - b.start) / 1e3},
           {"pid", pid_base + b.stage},
           {"tid", b.rank},
           {"cname", "terrible"}});
  }
  text += "]}\n";
  return text;
}

void write_chrome_trace(const std::string& path, const std::vector<ReportRun>& runs) {
  write_text_file(path, trace_file_bytes(path, chrome_trace(runs)), "`trace`");
}

}  // namespace rrfp
