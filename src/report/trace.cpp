// Chrome trace (JSON array format): one process per run and stage, one thread per TP rank.
#include "report/report.hpp"

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

void write_chrome_trace(const std::string& path, const std::vector<ReportRun>& runs) {
  nlohmann::json events = nlohmann::json::array();
  for (size_t i = 0; i < runs.size(); ++i) {
    const auto& r = runs[i];
    const int pid_base = static_cast<int>(i) * 1000;
    for (int s = 0; s < r.result.pp; ++s) {
      events.push_back({{"name", "process_name"},
                        {"ph", "M"},
                        {"pid", pid_base + s},
                        {"args", {{"name", r.label + " / stage " + std::to_string(s)}}}});
      events.push_back({{"name", "process_sort_index"},
                        {"ph", "M"},
                        {"pid", pid_base + s},
                        {"args", {{"sort_index", pid_base + s}}}});
      for (int k = 0; k < r.result.tp; ++k)
        events.push_back({{"name", "thread_name"},
                          {"ph", "M"},
                          {"pid", pid_base + s},
                          {"tid", k},
                          {"args", {{"name", "tp rank " + std::to_string(k)}}}});
    }
    for (const auto& t : r.result.tasks) {
      const std::string kind(1, kind_char(t.task.kind));
      nlohmann::json args = {{"kind", kind}, {"chunk", t.task.chunk}, {"microbatch", t.task.mb}};
      if (t.send_ns > 0) args["send_us"] = t.send_ns / 1e3;
      // A measured step: when its input from another stage arrived. From there to its start the
      // rank was busy, or (idle) waking and dispatching.
      if (t.input_at >= 0) args["input_us"] = t.input_at / 1e3;
      events.push_back({{"name", to_string(t.task)},
                        {"cat", kind},
                        {"ph", "X"},
                        {"ts", t.start / 1e3},
                        {"dur", (t.compute_end - t.start) / 1e3},
                        {"pid", pid_base + t.stage},
                        {"tid", t.rank},
                        {"args", std::move(args)}});
    }
    for (const auto& b : r.result.blocked)
      events.push_back({{"name", reason_name(b.reason)},
                        {"cat", "blocked"},
                        {"ph", "X"},
                        {"ts", b.start / 1e3},
                        {"dur", (b.end - b.start) / 1e3},
                        {"pid", pid_base + b.stage},
                        {"tid", b.rank},
                        {"cname", "terrible"}});
  }
  nlohmann::json doc = {{"traceEvents", events}, {"displayTimeUnit", "ms"}};
  write_text_file(path, doc.dump() + "\n", "`trace`");
}

}  // namespace rrfp
