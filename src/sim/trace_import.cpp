#include "sim/trace_import.hpp"

#include <zlib.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <limits>
#include <span>

#include "core/error.hpp"
#include "core/format.hpp"
#include "core/input_file.hpp"
#include "core/json_input.hpp"
#include "core/memory.hpp"
#include "core/printable.hpp"
#include "sim/timeline.hpp"
#include "sim/trace_formats.hpp"
#include "sim/workload.hpp"

namespace rrfp {

namespace {

using trace::Doc;

// The most bytes one decompressed trace may hold: the replay's cap (core/input_file.hpp).
constexpr std::uint64_t kMaxTraceBytes = kReplayTrace.max_bytes;
constexpr size_t kMaxTraceFiles = 4096;

bool gzipped(const std::string& text) {
  return text.size() >= 2 && static_cast<unsigned char>(text[0]) == 0x1f &&
         static_cast<unsigned char>(text[1]) == 0x8b;
}

// Inflates every gzip member (`cat a.gz b.gz` and bgzip write several: the first alone was read,
// the rest dropped silently), refusing output past kMaxTraceBytes (a small file can expand a lot).
std::string gunzip(const std::string& in, const std::string& origin) {
  z_stream z{};
  if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK)
    throw InputError(origin + ": cannot start gzip decompression");
  std::string out;
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  z.avail_in = static_cast<uInt>(in.size());
  for (;;) {
    if (out.size() >= kMaxTraceBytes) {
      inflateEnd(&z);
      throw InputError(origin + ": decompresses to more than " +
                       std::to_string(kMaxTraceBytes >> 20) + " MiB (the replay's cap)");
    }
    const size_t at = out.size();
    out.resize(std::min<std::uint64_t>(kMaxTraceBytes, at + (1u << 20)));
    z.next_out = reinterpret_cast<Bytef*>(out.data() + at);
    z.avail_out = static_cast<uInt>(out.size() - at);
    const int rc = inflate(&z, Z_NO_FLUSH);
    out.resize(out.size() - z.avail_out);
    if (rc == Z_STREAM_END) {
      // Zero bytes after the last member are padding (block-padded copies), which gzip and
      // Python skip too.
      if (std::all_of(z.next_in, z.next_in + z.avail_in, [](Bytef b) { return b == 0; })) break;
      // Other bytes after a member that start no other were dropped without a word (the same
      // JSON uncompressed, with them, was refused).
      if (z.avail_in < 2 || z.next_in[0] != 0x1f || z.next_in[1] != 0x8b) {
        const std::size_t left = z.avail_in;
        inflateEnd(&z);
        throw InputError(origin + ": " + std::to_string(left) +
                         " byte(s) after the gzip stream that start no other gzip member");
      }
      inflateReset(&z);  // another member follows
      continue;
    }
    if (rc != Z_OK || (z.avail_in == 0 && z.avail_out != 0)) {
      inflateEnd(&z);
      throw InputError(origin + ": not a complete gzip stream (" +
                       (z.msg ? std::string(z.msg) : "truncated") + ")");
    }
  }
  inflateEnd(&z);
  return out;
}

// natural_less without its tie-break: <0, 0 or >0.
int natural_order(const std::string& a, const std::string& b) {
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (std::isdigit(static_cast<unsigned char>(a[i])) &&
        std::isdigit(static_cast<unsigned char>(b[j]))) {
      size_t ei = i, ej = j;
      while (ei < a.size() && std::isdigit(static_cast<unsigned char>(a[ei])))
        ++ei;
      while (ej < b.size() && std::isdigit(static_cast<unsigned char>(b[ej])))
        ++ej;
      const std::string_view x = std::string_view(a).substr(i, ei - i);
      const std::string_view y = std::string_view(b).substr(j, ej - j);
      const size_t zx = std::min(x.find_first_not_of('0'), x.size());
      const size_t zy = std::min(y.find_first_not_of('0'), y.size());
      if (x.size() - zx != y.size() - zy) return x.size() - zx < y.size() - zy ? -1 : 1;
      if (const int c = x.substr(zx).compare(y.substr(zy)); c != 0) return c;
      i = ei;
      j = ej;
    } else {
      if (a[i] != b[j])
        return static_cast<unsigned char>(a[i]) < static_cast<unsigned char>(b[j]) ? -1 : 1;
      ++i;
      ++j;
    }
  }
  const size_t ra = a.size() - i, rb = b.size() - j;
  return ra < rb ? -1 : ra > rb ? 1 : 0;
}

// Name order with digit runs compared as numbers: rank2 before rank10. Names alike but for
// leading zeros (r1, r01) fall back to byte order: equal, they kept the folder's listing order,
// which decides the steps a folder's traces number.
bool natural_less(const std::string& a, const std::string& b) {
  const int c = natural_order(a, b);
  return c != 0 ? c < 0 : a < b;
}

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
                   ": no mapping recognizes this trace: expected rrfp's --trace (processes "
                   "'RUN / stage S'), PyTorch profiler labels 'PP:<chunk><F|I|B|W><mb>' or "
                   "'Forward i' / 'Backward i', or Megatron timers 'forward-compute' / "
                   "'backward-compute' (docs/twin.md)");
}

// A split shape against a recording without W tasks: how to replay it (as a CSV says).
constexpr const char* kLacksW =
    " (the trace has no W tasks: it was recorded without the split backward; replay it with "
    "`split_backward` off)";
bool lacks_w(const WorkModel& m, std::span<const Timeline> steps) {
  return m.split() && std::none_of(steps.begin(), steps.end(), [](const Timeline& t) {
           return std::any_of(t.tasks.begin(), t.tasks.end(),
                              [](const TimelineTask& k) { return k.task.kind == Kind::W; });
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
                       " has no step spans (ProfilerStep#N): leave out --step to replay the "
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

namespace {

std::vector<Doc> parse_docs(const std::vector<std::pair<std::string, std::string>>& files) {
  if (files.empty()) throw InputError("no trace files to read");
  // Every file's parse is costed before any is parsed: together they must fit (three files of
  // `{}` objects each under the size cap ended in an uncaught bad_alloc).
  std::vector<std::string> unzipped(files.size());
  std::vector<std::string_view> texts(files.size());
  // The decompressed texts are held until parsed: their running total counts as it grows (20
  // files of 240 KB, each 250 MB unzipped, took 5.4 GB before the parse was costed).
  double bytes = 0, unzipped_bytes = 0;
  for (size_t i = 0; i < files.size(); ++i) {
    const auto& [origin, text] = files[i];
    if (gzipped(text)) unzipped[i] = gunzip(text, origin);
    texts[i] = gzipped(text) ? std::string_view(unzipped[i]) : std::string_view(text);
    bytes += json_parse_bytes(texts[i], origin);
    unzipped_bytes += static_cast<double>(unzipped[i].size());
    if (files.size() == 1 || unzipped[i].empty()) continue;  // one file: the check below
    check_memory(bytes + unzipped_bytes,
                 origin + ": decompressing and parsing " + std::to_string(i + 1) + " of " +
                     std::to_string(files.size()) + " trace files",
                 "", "the traces' size (fewer files, events, or steps)");
  }
  const std::string what =
      files.size() == 1 ? files[0].first : std::to_string(files.size()) + " trace files";
  check_memory(bytes, what + ": parsing the trace", "",
               "the trace's size (fewer events, or steps)");
  std::vector<Doc> docs;
  for (size_t i = 0; i < files.size(); ++i) {
    docs.push_back({files[i].first, parse_scanned_json(texts[i], files[i].first)});
    std::string().swap(unzipped[i]);  // texts[i] is not read again
  }
  return docs;
}

std::vector<Doc> read_docs(const std::string& path, const char* option) {
  const std::string flag = std::string("`") + option + "`: ";
  std::vector<std::string> paths;
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    for (const auto& entry : std::filesystem::directory_iterator(path, ec)) {
      const std::string p = entry.path().string();
      if (!trace_file_name(p)) continue;
      if (paths.size() == kMaxTraceFiles)
        throw InputError(flag + path + " holds more than " + std::to_string(kMaxTraceFiles) +
                         " trace files");
      paths.push_back(p);
    }
    if (ec) throw InputError(flag + "cannot list " + path + ": " + ec.message());
    if (paths.empty()) throw InputError(flag + path + " holds no .json or .json.gz trace file");
    std::sort(paths.begin(), paths.end(), natural_less);
  } else {
    paths.push_back(path);
  }
  // Every file is held until all are parsed: their sizes together must fit before the first is
  // read (a folder of 12 files of 250 MB took 3 GB before any check).
  if (paths.size() > 1) {
    double bytes = 0;
    for (const std::string& p : paths) {
      std::error_code size_ec;  // a file whose size is unknown is refused as it is read
      const std::uintmax_t n = std::filesystem::file_size(p, size_ec);
      if (!size_ec) bytes += static_cast<double>(n);
    }
    check_memory(bytes, path + ": reading its " + std::to_string(paths.size()) + " trace files", "",
                 "the traces' size (fewer files, events, or steps)");
  }
  std::vector<std::pair<std::string, std::string>> files;
  for (const std::string& p : paths)
    files.emplace_back(p, read_input_file(p, InputKind{option, kMaxTraceBytes, 0}));
  return parse_docs(files);
}

}  // namespace

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
                     ": give the shape (--pp, --vpp), or mend the trace");
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
