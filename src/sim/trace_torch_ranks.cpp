// The PyTorch profiler's files read into ranks (sim/trace_torch.hpp): a file of one rank
// (Kineto's, with distributedInfo) or a merged file of several (a process a rank), the device's
// spans joined to their rank's, ranks without task spans refused, and each file's clock put on
// one shared by all.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <set>

#include "core/error.hpp"
#include "core/format.hpp"
#include "core/json_input.hpp"
#include "core/printable.hpp"
#include "sim/trace_formats.hpp"
#include "sim/trace_torch.hpp"

namespace rrfp::trace::torch {

namespace {

// The key of a ranked file's device spans, which no JSON pid dumps to.
const std::string kDevice = "device";

// A ranked file's device process (`dev`, at or after `first`) joined to the file's one process
// with spans on the CPU: its spans added, its copies of the steps taking the CPU's place (the
// device's time, as where one pid holds both). Its rank was split in two: 2 stages read from a
// rank's file, and a pipeline of 2 chunks "on 4 stages". Kept on its own where the file has no
// such process, or several (a merged file, whose device spans could be any one's).
void merge_device(std::vector<TorchProcess>& out, size_t first, size_t dev) {
  std::vector<size_t> cpu;
  for (size_t k = first; k < out.size(); ++k)
    if (k != dev && !out[k].spans.empty()) cpu.push_back(k);
  if (cpu.size() != 1) return;
  TorchProcess& p = out[cpu.front()];
  TorchProcess& d = out[dev];
  p.spans.insert(p.spans.end(), d.spans.begin(), d.spans.end());
  for (const auto& [step, span] : d.steps)
    p.steps[step] = span;
  out.erase(out.begin() + static_cast<std::ptrdiff_t>(dev));
  for (size_t k = dev; k < out.size(); ++k)
    out[k].order = k;
}

// The rank a merged file's pid names ("rank0", "Rank 1", "rank_2", as a JSON string), if any.
std::optional<long> rank_named(const std::string& pid_json) {
  if (pid_json.size() < 3 || pid_json.front() != '"' || pid_json.back() != '"') return {};
  std::string s = pid_json.substr(1, pid_json.size() - 2);
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  if (s.rfind("rank", 0) != 0) return {};
  size_t i = 4;
  while (i < s.size() && (s[i] == ' ' || s[i] == '_' || s[i] == '-'))
    ++i;
  if (i == s.size() || s.size() - i > 9 || s.find_first_not_of("0123456789", i) != s.npos)
    return {};
  return std::stol(s.substr(i));
}

// A merged file's processes, where each pid names a rank of its own ("rank0", "rank1"), are
// ordered by those ranks; else by first appearance. By appearance alone, a file whose rank 1
// came first was replayed with its stages swapped, and the clocks' alignment hid it.
void order_by_named_ranks(std::vector<TorchProcess>& out, size_t first,
                          const std::map<std::string, size_t>& by_pid) {
  std::map<long, size_t> by_rank;
  for (const auto& [pid, i] : by_pid) {
    const auto r = rank_named(pid);
    if (!r || !by_rank.emplace(*r, i).second) return;
  }
  size_t k = first;
  for (const auto& [r, i] : by_rank)
    out[i].order = k++;
}

// A rank without task spans timed nothing (its record_function labels missing), and the
// pipeline was replayed without its stage, P one less, exit 0: a file of a folder (a process
// without task spans, a data loader, is no rank; but a profiler's file of a rank, its
// distributedInfo or its steps, is), or in a file of several ranks (no distributedInfo: a merged
// or legacy file) a process that is a rank (its pid names one, or it has profiler steps on the
// CPU) beside processes with task spans.
void refuse_untimed_ranks(const std::vector<TorchProcess>& out, const std::vector<Doc>& docs) {
  if (docs.size() > 1)
    for (size_t f = 0; f < docs.size(); ++f) {
      auto of = [f](const TorchProcess& p) { return p.file == f; };
      auto timed = [f](const TorchProcess& p) { return p.file == f && !p.spans.empty(); };
      auto profiled = [f](const TorchProcess& p) {
        return p.file == f && (p.ranked || !p.steps.empty());
      };
      if (std::any_of(out.begin(), out.end(), of) && std::none_of(out.begin(), out.end(), timed) &&
          std::any_of(out.begin(), out.end(), profiled))
        throw InputError(docs[f].origin +
                         ": a profiler's trace of a rank without task spans "
                         "(PP:<chunk><F|I|B|W><mb>, or Forward i / Backward i): each file of a "
                         "folder is one rank of the pipeline, its tasks labelled");
    }
  for (const TorchProcess& p : out) {
    // Steps on the CPU: a device's process holds the GPU's copies of every step, and no rank.
    if (p.ranked || !p.spans.empty() || (p.cpu_steps.empty() && !rank_named(p.pid))) continue;
    const bool others_timed = std::any_of(out.begin(), out.end(), [&p](const TorchProcess& q) {
      return q.file == p.file && !q.spans.empty();
    });
    if (others_timed)
      throw InputError(p.origin + ": process " + printable(p.pid, 40) +
                       " is a rank of the pipeline (profiler steps or a rank's name) without "
                       "task spans (PP:<chunk><F|I|B|W><mb>, or Forward i / Backward i), beside "
                       "processes with them: each rank's tasks labelled, or its process left out");
  }
}

// What a file says of its rank and its clock, outside its events.
struct FileHeader {
  double rank = 0;                      // distributedInfo.rank, else the file's position
  bool ranked = false;                  // the rank is distributedInfo's
  long world = 0;                       // distributedInfo.world_size; 0: not given
  std::optional<std::int64_t> base_ns;  // baseTimeNanoseconds: where the file's ts count from
  double offset_us = 0;                 // added to its ts: the files' clocks made one
};

// A whole number in [least, most] at obj[key], or nullopt where absent; `what` names it.
std::optional<std::int64_t> whole_field(const nlohmann::json& obj, const char* key,
                                        std::int64_t least, std::int64_t most,
                                        const std::string& what) {
  const auto it = obj.find(key);
  if (it == obj.end()) return std::nullopt;
  // Compared as integers where the file gives one: as doubles, 4e18 + 1 was 4e18.
  std::optional<std::int64_t> v;
  if (it->is_number_unsigned()) {
    if (it->get<std::uint64_t>() <= static_cast<std::uint64_t>(most)) v = it->get<std::int64_t>();
  } else if (it->is_number_integer()) {
    v = it->get<std::int64_t>();
  } else if (it->is_number_float()) {
    const double d = it->get<double>();
    if (std::floor(d) == d && d >= -9e15 && d <= 9e15) v = static_cast<std::int64_t>(d);
  }
  if (!v || *v < least || *v > most)
    throw InputError(what + " must be a whole number in [" + std::to_string(least) + ", " +
                     std::to_string(most) + "], got " + brief(*it));
  return v;
}

// A rank given as "1", or as 2.5, was read as no rank, the files taken in name order; a world
// size is what the files must fill (a missing rank's file made a shorter pipeline, exit 0).
FileHeader header_of(const Doc& d, size_t f) {
  FileHeader h;
  h.rank = static_cast<double>(f);
  if (!d.json.is_object()) return h;
  constexpr std::int64_t kMaxRank = (1LL << 31) - 2;
  if (const auto info = d.json.find("distributedInfo"); info != d.json.end() && info->is_object()) {
    const std::string of = d.origin + ": distributedInfo.";
    const auto rank = whole_field(*info, "rank", 0, kMaxRank, of + "rank");
    const auto world = whole_field(*info, "world_size", 1, kMaxRank + 1, of + "world_size");
    if (rank && world && *rank >= *world)
      throw InputError(of + "rank is " + std::to_string(*rank) + ", past its world_size " +
                       std::to_string(*world) + " (ranks count from 0)");
    h.ranked = rank.has_value();
    if (rank) h.rank = static_cast<double>(*rank);
    if (world) h.world = static_cast<long>(*world);
  }
  // Kineto (PyTorch 2.2 on) counts ts from this, each process from its own start.
  h.base_ns = whole_field(d.json, "baseTimeNanoseconds", 0, 4'000'000'000'000'000'000LL,
                          d.origin + ": baseTimeNanoseconds (the epoch's, to the year 2096)");
  return h;
}

// Each file's clock on the earliest-started one's: Kineto counts a file's ts from its process's
// own start (baseTimeNanoseconds), and files read as if on one clock put a rank started 20 ms
// later 20 ms late in every step (a twin error of +67%, a rule 'saving' 6.6%, exit 0). Counted
// from the earliest start, not the epoch, so the times keep their digits.
std::vector<FileHeader> headers_of(const std::vector<Doc>& docs) {
  std::vector<FileHeader> out;
  for (size_t f = 0; f < docs.size(); ++f)
    out.push_back(header_of(docs[f], f));
  const auto with = std::find_if(out.begin(), out.end(), [](auto& h) { return h.base_ns; });
  const auto without = std::find_if(out.begin(), out.end(), [](auto& h) { return !h.base_ns; });
  if (with == out.end()) return out;
  if (without != out.end())
    throw InputError(docs[with - out.begin()].origin +
                     " counts its times from baseTimeNanoseconds and " +
                     docs[without - out.begin()].origin +
                     " gives none: the files of one run come from one profiler alike");
  std::int64_t earliest = *with->base_ns;
  for (const FileHeader& h : out)
    earliest = std::min(earliest, *h.base_ns);
  for (FileHeader& h : out)
    h.offset_us = static_cast<double>(*h.base_ns - earliest) / 1000.0;
  return out;
}

// A span named "ProfilerStep#..." (`s`), event n of d: its step's [start, end) in p.
void read_step_span(TorchProcess& p, const nlohmann::json& e, const std::string& s, const Doc& d,
                    size_t n, double offset_us) {
  const std::string where = d.origin + ": event " + std::to_string(n);
  size_t i = 13;
  int step = 0;
  // Skipped, its tasks were read as between steps, and a later step replayed, exit 0.
  if (!digits_at(s, i, step) || i != s.size())
    throw InputError(where + ": span '" + printable(s, 40) +
                     "' is no step span: ProfilerStep#<N>, N at most 9 digits");
  // A step's CPU span given twice: the later replaced the earlier silently. A device has a copy
  // of it on each stream its kernels ran on (Kineto's gpu_user_annotation), which take their
  // place as before.
  const bool gpu = string_at(e, "cat", d.origin, n) == "gpu_user_annotation";
  if (!gpu && !p.cpu_steps.insert(step).second)
    throw InputError(where + ": " + s +
                     " appears twice in one rank's trace; a step is one span there");
  const double ts = clock_at(e, "ts", where) + offset_us;
  p.steps[step] = {ts, ts + number_at(e, "dur", where)};
}

// File f's processes with their spans and steps, appended to `out`: a file of one rank
// (distributedInfo), its device's process joined to it, or a merged file's, one a rank.
void read_file(std::vector<TorchProcess>& out, const Doc& d, size_t f, const FileHeader& h) {
  std::map<std::string, size_t> by_pid;
  const size_t first = out.size();  // this file's processes: from here on
  size_t n = 0;
  for (const auto& e : events_of(d)) {
    ++n;
    if (!e.is_object()) continue;
    const auto name = e.find("name");
    if (name == e.end() || !name->is_string()) continue;
    const std::string& s = name->get_ref<const std::string&>();
    const std::string where = d.origin + ": event " + std::to_string(n);
    if (const std::string ph = string_at(e, "ph", d.origin, n); ph != "X") {
      // A task timed by a begin and an end event was left out unsaid.
      if ((ph == "B" || ph == "E") && names_a_task(s))
        throw InputError(where + ": task span '" + printable(s, 40) + "' has ph \"" + ph +
                         "\"; a replay reads complete spans (\"X\")");
      continue;
    }
    // Kineto gives a rank's device spans the device's pid (0 for cuda:0), not its process's:
    // in a file of one rank (distributedInfo) they are that rank's (kDevice, merged below).
    const bool device = h.ranked && string_at(e, "cat", d.origin, n) == "gpu_user_annotation";
    const std::string pid = device ? kDevice : e.contains("pid") ? e.at("pid").dump() : "";
    auto [it, fresh] = by_pid.emplace(pid, out.size());
    if (fresh) {
      TorchProcess p;
      p.rank = h.rank;
      p.ranked = h.ranked;
      p.file = f;
      p.order = out.size();
      p.legacy = e.contains("pid") && e.at("pid").is_string();
      p.origin = d.origin;
      p.pid = pid;
      out.push_back(p);
    }
    TorchProcess& p = out[it->second];
    if (s.rfind("ProfilerStep#", 0) == 0) {
      read_step_span(p, e, s, d, n, h.offset_us);
      continue;
    }
    // DualPipeV's overlapped forward and backward, one span: skipped, the step lacked both
    // tasks and the refusal blamed the shape.
    if (s.rfind("PP:(", 0) == 0)
      throw InputError(where + ": span '" + printable(s, 40) +
                       "' times several actions at once (OVERLAP_F_B); a replay reads one task "
                       "a span, PP:<chunk><F|I|B|W><microbatch>");
    if (!parse_label(s, 0)) {
      if (names_a_task(s))
        throw InputError(where + ": span '" + printable(s, 40) +
                         "' is no task label: PP:<chunk><F|I|B|W|RECV_F|RECV_B><microbatch>, "
                         "each id at most 9 digits");
      continue;
    }
    p.spans.push_back({clock_at(e, "ts", where) + h.offset_us, number_at(e, "dur", where), s,
                       string_at(e, "cat", d.origin, n) == "gpu_user_annotation", n});
  }
  order_by_named_ranks(out, first, by_pid);
  if (const auto dev = by_pid.find(kDevice); dev != by_pid.end())
    merge_device(out, first, dev->second);
}

// Where every rank read gives distributedInfo.world_size, the pipeline's ranks (its copies
// under data parallelism the others) must divide it: a rank's file left out was replayed as a
// pipeline one stage shorter, exit 0.
void check_world(const std::vector<TorchProcess>& ranks, const std::vector<Doc>& docs,
                 const std::vector<FileHeader>& headers) {
  long world = 0;
  for (const TorchProcess& p : ranks) {
    const long w = headers[p.file].world;
    if (!p.ranked || w == 0) return;
    if (world != 0 && w != world)
      throw InputError(docs[ranks.front().file].origin + " gives distributedInfo.world_size " +
                       std::to_string(world) + " and " + p.origin + " " + std::to_string(w) +
                       ": the files of one run share it");
    world = w;
  }
  if (ranks.empty() || world % static_cast<long>(ranks.size()) == 0) return;
  std::string given;
  for (size_t k = 0; k < ranks.size() && k < 16; ++k)
    given += (k ? ", " : "") + fmt("%.15g", ranks[k].rank);
  if (ranks.size() > 16) given += ", ...";
  throw InputError(docs.front().origin + (docs.size() > 1 ? " and the other files" : "") + ": " +
                   std::to_string(ranks.size()) + " ranks with task spans (" + given +
                   "), which do not divide distributedInfo.world_size " + std::to_string(world) +
                   " into copies of one pipeline: is a rank's file missing? Give one file per "
                   "rank of one pipeline");
}

}  // namespace

std::vector<TorchProcess> processes_of(const std::vector<Doc>& docs) {
  const std::vector<FileHeader> headers = headers_of(docs);
  std::vector<TorchProcess> out;
  for (size_t f = 0; f < docs.size(); ++f)
    read_file(out, docs[f], f, headers[f]);
  std::stable_sort(out.begin(), out.end(), [](const TorchProcess& a, const TorchProcess& b) {
    return a.rank != b.rank ? a.rank < b.rank : a.order < b.order;
  });
  refuse_untimed_ranks(out, docs);
  std::erase_if(out, [](const TorchProcess& p) { return p.spans.empty(); });
  // Two files of one rank replayed as a pipeline of two stages (a merged file's processes share
  // its rank and keep their order).
  for (size_t k = 1; k < out.size(); ++k) {
    const TorchProcess &a = out[k - 1], &b = out[k];
    if (a.ranked && b.ranked && a.rank == b.rank && a.file != b.file)
      throw InputError(a.origin + " and " + b.origin + " both give distributedInfo.rank " +
                       fmt("%.15g", a.rank) + "; give each rank's file once");
  }
  check_world(out, docs, headers);
  return out;
}

}  // namespace rrfp::trace::torch
