// The mapping for PyTorch profiler traces (docs/twin.md). Each file (or each process of a
// merged file) is one rank; ranks in order of `distributedInfo.rank`, else of the files, are
// pipeline rank r / T and TP rank r % T (one pipeline, TP fastest). Tasks are record_function
// spans named like torch.distributed.pipelining's actions, "PP:<chunk><F|I|B|W><mb>" (I is the
// input half of a split backward, B a whole one) or its GPipe spans "Forward i" / "Backward i"
// (the rank's own chunk); "PP:<chunk>RECV_F<mb>" / "RECV_B" time the receives. A GPU trace's
// `gpu_user_annotation` spans are used where a rank has them (device time), else the CPU
// spans. Steps are "ProfilerStep#N" spans; the legacy exporter's clocks start per process, so
// its ranks are aligned at each step's start.
#include <algorithm>
#include <cctype>
#include <map>
#include <optional>
#include <set>
#include <string_view>

#include "core/error.hpp"
#include "core/format.hpp"
#include "core/printable.hpp"
#include "sim/trace_formats.hpp"

namespace rrfp::trace {

namespace {

struct Label {
  bool recv = false;
  bool input_half = false;  // "I": the input half of a split backward
  TaskId task;              // the task, or the receive's consumer
};

bool digits_at(const std::string& s, size_t& i, int& value) {
  const size_t from = i;
  long long v = 0;
  while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i])) && i - from < 9)
    v = v * 10 + (s[i++] - '0');
  value = static_cast<int>(v);
  return i > from && (i == s.size() || !std::isdigit(static_cast<unsigned char>(s[i])));
}

// "PP:3F12" -> F c3 m12; "PP:1RECV_B4" -> the receive of B c1 m4; "Forward 7" -> F on the
// rank's own chunk (`own`); anything else: nullopt.
std::optional<Label> parse_label(const std::string& name, int own) {
  Label l;
  size_t i = 0;
  int chunk = own, mb = 0;
  std::string kind;
  if (name.rfind("PP:", 0) == 0) {
    i = 3;
    if (!digits_at(name, i, chunk)) return std::nullopt;
    for (const char* k : {"RECV_F", "RECV_B", "F", "I", "B", "W"})
      if (name.compare(i, std::string(k).size(), k) == 0) {
        kind = k;
        break;
      }
    if (kind.empty()) return std::nullopt;  // SEND_*, UNSHARD, REDUCE_GRAD, ...
    i += kind.size();
  } else if (name.rfind("Forward ", 0) == 0 || name.rfind("Backward ", 0) == 0) {
    kind = name[0] == 'F' ? "F" : "B";
    i = name[0] == 'F' ? 8 : 9;
  } else {
    return std::nullopt;
  }
  if (!digits_at(name, i, mb) || i != name.size()) return std::nullopt;
  l.recv = kind.rfind("RECV_", 0) == 0;
  l.input_half = kind == "I";
  const char k = kind.back();
  l.task = TaskId{k == 'F' ? Kind::F : k == 'W' ? Kind::W : Kind::B, chunk, mb};
  return l;
}

// Whether `name` is torch.distributed.pipelining's label of a compute action or a receive
// ("PP:", the chunk's digits, F, I, B, W, RECV_F or RECV_B) whatever follows: one parse_label
// refuses is a label gone wrong (an id past 9 digits, text after the microbatch, no chunk),
// where the other actions (SEND_F, UNSHARD, REDUCE_GRAD, ...) are no tasks.
bool names_a_task(const std::string& name) {
  if (name.rfind("PP:", 0) != 0) return false;
  size_t i = 3;
  while (i < name.size() && std::isdigit(static_cast<unsigned char>(name[i])))
    ++i;
  if (i == name.size()) return false;
  return std::string_view("FIBW").find(name[i]) != std::string_view::npos ||
         name.compare(i, 6, "RECV_F") == 0 || name.compare(i, 6, "RECV_B") == 0;
}

struct Span {
  double ts = 0, dur = 0;
  std::string name;
  bool gpu = false;
  size_t event = 0;  // its index in its file, from 1
};

struct TorchProcess {
  double rank = 0;      // distributedInfo.rank, else the file's position
  bool ranked = false;  // the rank is distributedInfo's
  size_t file = 0;
  size_t order = 0;
  bool legacy = false;
  std::vector<Span> spans;
  std::map<int, std::pair<double, double>> steps;  // N -> [start, end)
  std::set<int> cpu_steps;                         // the N of each ProfilerStep#N seen on the CPU
  std::string origin;
  std::string pid;  // as the JSON gives it (a merged file's "rank1")
};

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

// A span named "ProfilerStep#..." (`s`), event n of d: its step's [start, end) in p.
void read_step_span(TorchProcess& p, const nlohmann::json& e, const std::string& s, const Doc& d,
                    size_t n) {
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
  const double ts = clock_at(e, "ts", where);
  p.steps[step] = {ts, ts + number_at(e, "dur", where)};
}

std::vector<TorchProcess> processes_of(const std::vector<Doc>& docs) {
  std::vector<TorchProcess> out;
  for (size_t f = 0; f < docs.size(); ++f) {
    const Doc& d = docs[f];
    double rank = static_cast<double>(f);
    bool ranked = false;
    if (d.json.is_object()) {
      const auto info = d.json.find("distributedInfo");
      ranked = info != d.json.end() && info->is_object() && info->contains("rank") &&
               info->at("rank").is_number();
      if (ranked) rank = info->at("rank").get<double>();
    }
    std::map<std::string, size_t> by_pid;
    const size_t first = out.size();  // this file's processes: from here on
    size_t n = 0;
    for (const auto& e : events_of(d)) {
      ++n;
      if (!e.is_object()) continue;
      const auto name = e.find("name");
      if (name == e.end() || !name->is_string()) continue;
      const std::string where = d.origin + ": event " + std::to_string(n);
      if (const std::string ph = string_at(e, "ph", d.origin, n); ph != "X") {
        // A task timed by a begin and an end event was left out unsaid.
        if ((ph == "B" || ph == "E") && names_a_task(name->get_ref<const std::string&>()))
          throw InputError(where + ": task span '" + printable(name->get<std::string>(), 40) +
                           "' has ph \"" + ph + "\"; a replay reads complete spans (\"X\")");
        continue;
      }
      // Kineto gives a rank's device spans the device's pid (0 for cuda:0), not its process's:
      // in a file of one rank (distributedInfo) they are that rank's (kDevice, merged below).
      const bool device = ranked && string_at(e, "cat", d.origin, n) == "gpu_user_annotation";
      const std::string pid = device ? kDevice : e.contains("pid") ? e.at("pid").dump() : "";
      auto [it, fresh] = by_pid.emplace(pid, out.size());
      if (fresh) {
        TorchProcess p;
        p.rank = rank;
        p.ranked = ranked;
        p.file = f;
        p.order = out.size();
        p.legacy = e.contains("pid") && e.at("pid").is_string();
        p.origin = d.origin;
        p.pid = pid;
        out.push_back(p);
      }
      TorchProcess& p = out[it->second];
      const std::string& s = name->get_ref<const std::string&>();
      if (s.rfind("ProfilerStep#", 0) == 0) {
        read_step_span(p, e, s, d, n);
        continue;
      }
      if (!parse_label(s, 0)) {
        if (names_a_task(s))
          throw InputError(where + ": span '" + printable(s, 40) +
                           "' is no task label: PP:<chunk><F|I|B|W|RECV_F|RECV_B><microbatch>, "
                           "each id at most 9 digits");
        continue;
      }
      p.spans.push_back({clock_at(e, "ts", where), number_at(e, "dur", where), s,
                         string_at(e, "cat", d.origin, n) == "gpu_user_annotation", n});
    }
    order_by_named_ranks(out, first, by_pid);
    if (const auto dev = by_pid.find(kDevice); dev != by_pid.end())
      merge_device(out, first, dev->second);
  }
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
  return out;
}

using Steps = std::map<int, std::pair<double, double>>;

// The step a span starting at `ts` belongs to: the one whose [start, end) holds it, so that of
// back-to-back steps a task at their boundary is the later one's (closed at both ends, the
// earlier step took it, which then held that task twice and the later lacked it). A task at the
// end of a step that no other step starts at is still that step's (a zero-length one, last).
// Of several, the least step number's.
//
// Asked once a span: where the steps are disjoint and of some length, as a profiler writes
// them, their starts and their ends both increase, and at most one step holds `ts` or ends
// there: a binary search finds it. Otherwise every step is looked at (a trace of 40,000 steps
// scanned them all for each of its spans: 17 s, and a trace at the size limit an hour).
class StepOf {
 public:
  explicit StepOf(const Steps& steps) : steps_(steps) {
    for (auto it = steps.begin(); it != steps.end(); ++it)
      by_start_.push_back(it);
    std::sort(by_start_.begin(), by_start_.end(),
              [](const auto& a, const auto& b) { return a->second.first < b->second.first; });
    for (size_t k = 0; k < by_start_.size() && disjoint_; ++k) {
      const auto& [start, end] = by_start_[k]->second;
      disjoint_ =
          start < end && (k + 1 == by_start_.size() || end <= by_start_[k + 1]->second.first);
    }
  }

  Steps::const_iterator operator()(double ts) const {
    if (!disjoint_) return scan(ts);
    // The last step starting at or before ts holds it, if any does.
    auto at = std::upper_bound(by_start_.begin(), by_start_.end(), ts,
                               [](double t, const auto& st) { return t < st->second.first; });
    if (at != by_start_.begin() && ts < (*std::prev(at))->second.second) return *std::prev(at);
    // The first step ending at or after ts ends there, if any does.
    at = std::lower_bound(by_start_.begin(), by_start_.end(), ts,
                          [](const auto& st, double t) { return st->second.second < t; });
    return at != by_start_.end() && (*at)->second.second == ts ? *at : steps_.end();
  }

 private:
  Steps::const_iterator scan(double ts) const {
    const auto in = std::find_if(steps_.begin(), steps_.end(), [&](const auto& st) {
      return ts >= st.second.first && ts < st.second.second;
    });
    if (in != steps_.end()) return in;
    return std::find_if(steps_.begin(), steps_.end(),
                        [&](const auto& st) { return ts == st.second.second; });
  }

  const Steps& steps_;
  std::vector<Steps::const_iterator> by_start_;
  bool disjoint_ = true;
};

}  // namespace

std::vector<Timeline> read_torch(const std::vector<Doc>& docs, const WorkModel& m, int tp) {
  const std::vector<TorchProcess> procs = processes_of(docs);
  if (procs.size() != static_cast<size_t>(m.pp()) * tp)
    throw InputError(docs.front().origin + ": " + std::to_string(procs.size()) +
                     " rank(s) with task spans, but the shape has " + std::to_string(m.pp()) +
                     " stage(s) x " + std::to_string(tp) +
                     " tp rank(s): give one file per rank of one pipeline");
  std::map<int, Timeline> steps;  // -1: the whole trace (no step spans)
  for (size_t k = 0; k < procs.size(); ++k) {
    const TorchProcess& p = procs[k];
    const int stage = static_cast<int>(k) / tp, tp_rank = static_cast<int>(k) % tp;
    const bool gpu =
        std::any_of(p.spans.begin(), p.spans.end(), [](const Span& s) { return s.gpu; });
    const StepOf step_of(p.steps);
    for (const Span& s : p.spans) {
      if (s.gpu != gpu) continue;
      int step = -1;
      double zero = 0;
      if (!p.steps.empty()) {
        const auto in = step_of(s.ts);
        if (in == p.steps.end()) continue;  // between steps
        step = in->first;
        if (p.legacy) zero = in->second.first;  // a rough start; build_run aligns the ranks
      }
      const Label l = *parse_label(s.name, m.chunk_at(stage, 0));
      const std::string where = p.origin + ": span '" + printable(s.name, 40) + "'";
      if (l.task.chunk >= m.chunks() || m.stage_of(l.task.chunk) != stage)
        throw InputError(where + " is on rank " + std::to_string(k) + " (stage " +
                         std::to_string(stage) + "), but chunk " + std::to_string(l.task.chunk) +
                         " is not on that stage in this shape");
      Timeline& t = steps[step];
      if (t.format.empty()) {
        t.format = "torch";
        t.step = step;
        t.run = step >= 0 ? "ProfilerStep#" + std::to_string(step) : "the whole trace";
        t.clocks_aligned = !p.legacy;
      }
      if (l.recv)
        t.recvs.push_back({l.task, tp_rank, s.ts - zero, s.ts - zero + s.dur});
      else
        t.tasks.push_back({l.task, tp_rank, s.ts - zero, s.dur});
    }
  }
  std::vector<Timeline> out;
  for (auto& [n, t] : steps)
    out.push_back(std::move(t));
  return out;
}

Shape probe_torch(const std::vector<Doc>& docs, int tp) {
  const std::vector<TorchProcess> procs = processes_of(docs);
  // Each stage is `tp` ranks in file order: 2 ranks at --tp 3 made no stage, and the error
  // said the trace "holds no task to tell its shape by".
  if (tp > 1 && procs.size() % static_cast<size_t>(tp) != 0)
    throw InputError(docs.front().origin + (docs.size() > 1 ? " and the other files" : "") + ": " +
                     std::to_string(procs.size()) + " rank(s) with task spans, which `tp` " +
                     std::to_string(tp) +
                     " does not divide into stages (each stage is tp ranks, in file order)");
  Shape s;
  s.pp = static_cast<int>(procs.size()) / std::max(1, tp);
  IdsSeen chunk_ids{"chunk"}, mb_ids{"microbatch"};
  for (size_t k = 0; k < procs.size(); ++k)
    for (const Span& sp : procs[k].spans) {
      const Label l = *parse_label(sp.name, static_cast<int>(k) / std::max(1, tp));
      const auto where = [&] { return procs[k].origin + ": event " + std::to_string(sp.event); };
      chunk_ids.saw(l.task.chunk, where);
      mb_ids.saw(l.task.mb, where);
      s.saw(l.task.chunk, l.task.mb, l.task.kind);
      s.split = s.split || l.input_half;
    }
  if (procs.empty()) return s;  // the caller says the trace holds no task
  // A stray id named a huge shape and blamed the flags. Chunks that no stage count divides are
  // named by the caller, with their event.
  if (s.pp < 1 || s.chunks % s.pp == 0) chunk_ids.check();
  mb_ids.check();
  s.largest_chunk_at = chunk_ids.at;
  return s;
}

}  // namespace rrfp::trace
