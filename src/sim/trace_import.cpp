#include "sim/trace_import.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <span>

#include "core/error.hpp"
#include "core/format.hpp"
#include "core/printable.hpp"
#include "sim/timeline.hpp"
#include "sim/trace_formats.hpp"
#include "sim/workload.hpp"

namespace rrfp {

namespace {

using trace::Doc;
using trace::parse_docs;
using trace::read_docs;

// The mapping that recognizes one file, by what only that tool writes; "" for none.
std::string detect_one(const Doc& d) {
  bool megatron = false, torch = false;
  size_t event = 0;
  for (const auto& e : trace::events_of(d)) {
    ++event;
    if (!e.is_object()) continue;
    const auto name = e.find("name");
    if (name == e.end() || !name->is_string()) continue;
    const std::string& n = name->get_ref<const std::string&>();
    if (n == "process_name" && trace::string_at(e, "ph", d.origin, event) == "M") {
      const auto args = e.find("args");
      if (args != e.end() && args->is_object() &&
          trace::string_at(*args, "name", d.origin, event, "args").find(" / stage ") !=
              std::string::npos)
        return "rrfp";
    }
    if (n == "forward-compute" || n == "backward-compute") megatron = true;
    if (n.rfind("PP:", 0) == 0 || n.rfind("ProfilerStep#", 0) == 0 || n.rfind("Forward ", 0) == 0 ||
        n.rfind("Backward ", 0) == 0)
      torch = true;
  }
  return megatron ? "megatron" : torch ? "torch" : "";
}

// The mapping that recognizes the files (auto): one for all. A folder of two tools' files was
// read as the first tool's, the others' tasks left out unsaid.
std::string detect(const std::vector<Doc>& docs) {
  std::string found;
  const Doc* first = nullptr;
  for (const Doc& d : docs) {
    const std::string f = detect_one(d);
    if (f.empty()) continue;
    if (!first) {
      found = f;
      first = &d;
    } else if (f != found) {
      throw InputError(first->origin + " is a trace of " + found + " and " + d.origin + " one of " +
                       f +
                       ": a replay reads one tool's traces (move the others out of the folder, "
                       "or name the tool with `trace_format`)");
    }
  }
  if (first) return found;
  throw InputError(docs.front().origin +
                   ": no mapping recognizes this trace: expected a trace rrfp wrote (processes "
                   "'RUN / stage S'), PyTorch profiler labels 'PP:<chunk><F|I|B|W><mb>' or "
                   "'Forward i' / 'Backward i', or Megatron timers 'forward-compute' / "
                   "'backward-compute' (docs/twin.md)");
}

// A split shape against a recording without W tasks: how to replay it (as a CSV says).
constexpr const char* kLacksW =
    " (the trace has no W tasks: it was recorded without the split backward; replay it with "
    "`split_backward` off)";
// Input halves (torch's "I") say it was recorded with the split backward, its W spans lost.
bool lacks_w(const WorkModel& m, std::span<const Timeline> steps) {
  return m.split() && std::none_of(steps.begin(), steps.end(), [](const Timeline& t) {
           return std::any_of(t.tasks.begin(), t.tasks.end(), [](const TimelineTask& k) {
             return k.task.kind == Kind::W || k.input_half;
           });
         });
}

ImportedRun import_docs(const std::vector<Doc>& docs, const WorkModel& m, int tp,
                        const TraceOptions& o) {
  // The subject of the errors below ("... has no step 2"): one file, or the trace of several.
  const std::string origin = docs.size() == 1
                                 ? docs.front().origin
                                 : "the trace in " + docs.front().origin + " and " +
                                       std::to_string(docs.size() - 1) +
                                       (docs.size() == 2 ? " more file" : " more files");
  check_trace_options(o);
  const std::string format = o.format == "auto" ? detect(docs) : o.format;
  std::vector<Timeline> steps;
  if (format == "rrfp")
    steps = trace::read_rrfp(docs, m);
  else if (format == "torch")
    steps = trace::read_torch(docs, m, tp);
  else if (format == "megatron")
    steps = trace::read_megatron(docs, m, tp);
  else
    throw InputError("`trace_format`: expected auto, rrfp, torch or megatron, got '" +
                     printable(o.format, 20) + "'");
  if (steps.empty()) throw InputError(origin + ": no " + format + " task events in this trace");
  for (Timeline& t : steps)
    trace::rebase(t, origin);
  if (o.step >= 0) {
    for (const Timeline& t : steps)
      if (t.step == o.step) {
        ImportedRun run;
        try {
          run = build_run(t, m, tp, o.message_us, origin);
        } catch (const MissingTasks& e) {
          if (!e.only_w || !lacks_w(m, {&t, 1})) throw;
          throw InputError(e.what() + std::string(kLacksW));
        }
        refuse_needless_message_us(run, o.message_us, origin);
        return run;
      }
    // A trace without step spans is one whole step (-1), which no --step names.
    if (std::all_of(steps.begin(), steps.end(), [](const Timeline& t) { return t.step < 0; }))
      throw InputError("`step`: " + origin +
                       " has no step spans (ProfilerStep#N): leave out `step` to replay the "
                       "whole trace");
    std::string have;
    for (size_t i = 0; i < steps.size() && i < 8; ++i)
      have += (i ? ", " : "") + std::to_string(steps[i].step);
    throw InputError("`step`: " + origin + " has no step " + std::to_string(o.step) + "; it has " +
                     have + (steps.size() > 8 ? ", ..." : ""));
  }
  // The first step that holds every task (a profiler window may cut the first or last one).
  // A step that lacks none but cannot be read (a task twice, a time out of range) is refused:
  // passed over, a later step was replayed in its place, exit 0.
  std::string first_error;
  bool only_w = false;  // a step lacks W tasks alone
  // Those lacking more than W tasks (the runs of a whole backward before a split one's are
  // other runs, not a step cut short), and the first's refusal.
  int cut = 0;
  std::string cut_why;
  for (const Timeline& t : steps) {
    ImportedRun run;
    try {
      run = build_run(t, m, tp, o.message_us, origin);
    } catch (const MissingTasks& e) {
      if (first_error.empty()) first_error = e.what();
      only_w = only_w || e.only_w;
      if (!e.only_w && cut++ == 0) cut_why = e.what();
      continue;
    }
    refuse_needless_message_us(run, o.message_us, origin);
    run.passed_over = cut;
    run.passed_over_why = std::move(cut_why);
    return run;
  }
  const std::string why = only_w && lacks_w(m, steps) ? kLacksW : "";
  throw InputError((steps.size() == 1 ? first_error
                                      : "no complete step among " + std::to_string(steps.size()) +
                                            "; the first: " + first_error) +
                   why);
}

// Fewer chunks than ranks, each chunk on a whole number of them: likely a stage's TP ranks,
// each with its file, read as stages of their own (twin.md: rank k is stage k / T).
std::string tp_hint(const trace::Shape& s, int tp) {
  if (tp > 1 || s.chunks >= s.pp || s.pp % s.chunks != 0) return "";
  return "; `tp` " + std::to_string(s.pp / s.chunks) + " where each stage's " +
         std::to_string(s.pp / s.chunks) + " tensor-parallel ranks have a file each";
}

}  // namespace

const std::vector<std::string>& trace_formats() {
  static const std::vector<std::string> names{"auto", "rrfp", "torch", "megatron"};
  return names;
}

void check_trace_options(const TraceOptions& o) {
  const auto& formats = trace_formats();
  if (std::find(formats.begin(), formats.end(), o.format) == formats.end())
    throw InputError("`trace_format`: expected auto, rrfp, torch or megatron, got '" +
                     printable(o.format, 20) + "'");
  // NaN passes every range check: it was refused as a workload's time ("lower the workload's
  // times or factors").
  if (std::isnan(o.message_us) || o.message_us > kMaxTaskUs)
    throw InputError("`message_us`: must be in [0, " + fmt("%g", kMaxTaskUs) + "] us, got " +
                     fmt_given(o.message_us));
}

bool trace_file_name(const std::string& p) {
  // In any case: "t.JSON" was read as a CSV ("line 1 has 54 KiB").
  return ends_with_ci(p, ".json") || ends_with_ci(p, ".json.gz");
}

bool is_trace_path(const std::string& path) {
  std::error_code ec;
  return trace_file_name(path) || std::filesystem::is_directory(path, ec);
}

ImportedRun import_trace_texts(const std::vector<std::pair<std::string, std::string>>& files,
                               const WorkModel& m, int tp, const TraceOptions& o) {
  return import_docs(parse_docs(files), m, tp, o);
}

ImportedRun import_trace(const std::string& path, const WorkModel& m, int tp,
                         const TraceOptions& o) {
  return import_docs(read_docs(path, o.option), m, tp, o);
}

PipelineConfig infer_trace_config(const std::string& path, int tp, const TraceOptions& o,
                                  int* tp_seen) {
  const std::vector<Doc> docs = read_docs(path, o.option);
  const std::string format = o.format == "auto" ? detect(docs) : o.format;
  const trace::Shape s = format == "rrfp"    ? trace::probe_rrfp(docs)
                         : format == "torch" ? trace::probe_torch(docs, tp)
                                             : trace::probe_megatron(docs, tp);
  if (s.pp < 1 || s.chunks < 1 || s.microbatches < 1)
    throw InputError(path + ": the " + format + " trace holds no task to tell its shape by");
  if (s.chunks % s.pp != 0)
    throw InputError(path + ": " + std::to_string(s.chunks) + " chunks on " + std::to_string(s.pp) +
                     " stages" +
                     (s.largest_chunk_at.empty() ? ""
                                                 : " (chunk " + std::to_string(s.chunks - 1) +
                                                       " first at " + s.largest_chunk_at + ")") +
                     ": give the shape (`pp`, `vpp`" + tp_hint(s, tp) + "), or mend the trace");
  if (tp_seen) *tp_seen = s.tp;
  PipelineConfig c;
  c.pp = s.pp;
  c.vpp = s.chunks / s.pp;
  c.microbatches = s.microbatches;
  c.split_backward = s.split;
  // The placement whose chunks sit where the trace's ran (V > 1: loop and V-shape differ).
  if (c.vpp == 2 && !s.stage_of_chunk.empty()) {  // V-shape is of two chunks a stage
    PipelineConfig v = c;
    v.placement = Placement::VShape;
    validate(v);
    const WorkModel vshape(v);
    if (std::all_of(s.stage_of_chunk.begin(), s.stage_of_chunk.end(), [&](const auto& cs) {
          return cs.first < vshape.chunks() && vshape.stage_of(cs.first) == cs.second;
        }))
      c.placement = Placement::VShape;
  }
  validate(c);
  return c;
}

RealizedWork parse_chrome_trace(const std::string& text, const WorkModel& m, int tp,
                                const std::string& origin) {
  return import_trace_texts({{origin, text}}, m, tp).work;
}

}  // namespace rrfp
