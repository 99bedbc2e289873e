// The mapping for PyTorch profiler traces (docs/twin.md). Each file (or each process of a
// merged file) is one rank; ranks in order of `distributedInfo.rank`, else of the files, are
// pipeline rank r / T and TP rank r % T (one pipeline, TP fastest). Tasks are record_function
// spans named like torch.distributed.pipelining's actions, "PP:<chunk><F|I|B|W><mb>" (I is the
// input half of a split backward, B a whole one) or its GPipe spans "Forward i" / "Backward i"
// (the rank's own chunk); "PP:<chunk>RECV_F<mb>" / "RECV_B" time the receives. A GPU trace's
// `gpu_user_annotation` spans are used where a rank has them (device time), else the CPU
// spans. Steps are "ProfilerStep#N" spans; the legacy exporter's clocks start per process, so
// its ranks are aligned at each step's start. The files are read into ranks in
// sim/trace_torch_ranks.cpp.
#include <algorithm>
#include <cctype>
#include <map>
#include <optional>
#include <set>
#include <string_view>

#include "core/error.hpp"
#include "core/printable.hpp"
#include "sim/trace_formats.hpp"
#include "sim/trace_torch.hpp"

namespace rrfp::trace {

namespace torch {

bool digits_at(const std::string& s, size_t& i, int& value) {
  const size_t from = i;
  long long v = 0;
  while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i])) && i - from < 9)
    v = v * 10 + (s[i++] - '0');
  value = static_cast<int>(v);
  return i > from && (i == s.size() || !std::isdigit(static_cast<unsigned char>(s[i])));
}

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

}  // namespace torch

namespace {

using Steps = std::map<int, std::pair<double, double>>;

// "0, 2" (at most 4, then "...").
std::string join_ids(const std::set<int>& ids) {
  std::string out;
  int n = 0;
  for (int id : ids) {
    if (n++ == 4) return out + ", ...";
    out += (out.empty() ? "" : ", ") + std::to_string(id);
  }
  return out.empty() ? "none" : out;
}

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
  const std::vector<torch::TorchProcess> procs = torch::processes_of(docs);
  if (procs.size() != static_cast<size_t>(m.pp()) * tp)
    throw InputError(docs.front().origin + ": " + std::to_string(procs.size()) +
                     " rank(s) with task spans, but the shape has " + std::to_string(m.pp()) +
                     " stage(s) x " + std::to_string(tp) +
                     " tp rank(s): give one file per rank of one pipeline");
  std::map<int, Timeline> steps;  // -1: the whole trace (no step spans)
  for (size_t k = 0; k < procs.size(); ++k) {
    const torch::TorchProcess& p = procs[k];
    const int stage = static_cast<int>(k) / tp, tp_rank = static_cast<int>(k) % tp;
    const bool gpu =
        std::any_of(p.spans.begin(), p.spans.end(), [](const torch::Span& s) { return s.gpu; });
    const StepOf step_of(p.steps);
    for (const torch::Span& s : p.spans) {
      if (s.gpu != gpu) continue;
      int step = -1;
      double zero = 0;
      if (!p.steps.empty()) {
        const auto in = step_of(s.ts);
        if (in == p.steps.end()) continue;  // between steps
        step = in->first;
        if (p.legacy) zero = in->second.first;  // a rough start; build_run aligns the ranks
      }
      const torch::Label l = *torch::parse_label(s.name, m.chunk_at(stage, 0));
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
      if (l.recv) {
        t.recvs.push_back({l.task, tp_rank, s.ts - zero, s.ts - zero + s.dur});
      } else {
        t.tasks.push_back({l.task, tp_rank, s.ts - zero, s.dur});
        t.tasks.back().whole_backward = l.task.kind == Kind::B && !l.input_half;
        t.tasks.back().input_half = l.input_half;
      }
    }
  }
  std::vector<Timeline> out;
  for (auto& [n, t] : steps)
    out.push_back(std::move(t));
  return out;
}

Shape probe_torch(const std::vector<Doc>& docs, int tp) {
  const std::vector<torch::TorchProcess> procs = torch::processes_of(docs);
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
  std::vector<std::set<int>> chunks_of(procs.size());  // each rank's
  for (size_t k = 0; k < procs.size(); ++k)
    for (const torch::Span& sp : procs[k].spans) {
      const torch::Label l = *torch::parse_label(sp.name, static_cast<int>(k) / std::max(1, tp));
      chunks_of[k].insert(l.task.chunk);
      const auto where = [&] { return procs[k].origin + ": event " + std::to_string(sp.event); };
      chunk_ids.saw(l.task.chunk, where);
      mb_ids.saw(l.task.mb, where);
      s.saw(l.task.chunk, l.task.mb, l.task.kind);
      s.split = s.split || l.input_half;
      // Where each chunk ran, so that a V-shape's trace is read as one (zero bubble's V
      // schedules): it was replayed as a loop's, refused for a chunk on the wrong stage. At
      // P=1 both placements put every chunk on the one stage: the default, loop, stays.
      if (s.pp > 1) s.stage_of_chunk.emplace(l.task.chunk, static_cast<int>(k) / std::max(1, tp));
    }
  // A stage's TP ranks run its chunks alike: files of other chunks are stages of their own (2
  // files at `tp` 2, each chunk's, were one stage lacking half its tasks on either rank).
  for (size_t k = 0; k + 1 < procs.size() && tp > 1; ++k)
    if (k % static_cast<size_t>(tp) + 1 < static_cast<size_t>(tp) &&
        chunks_of[k] != chunks_of[k + 1])
      throw InputError(procs[k + 1].origin + ": tp rank " + std::to_string((k + 1) % tp) +
                       " of stage " + std::to_string(k / tp) + " runs chunks " +
                       join_ids(chunks_of[k + 1]) + ", where tp rank " + std::to_string(k % tp) +
                       " (" + procs[k].origin + ") runs " + join_ids(chunks_of[k]) +
                       ": the tensor-parallel ranks of a stage run the same chunks; were the "
                       "files stages of their own (leave out `tp`)?");
  if (procs.empty()) return s;  // the caller says the trace holds no task
  // A stray id named a huge shape and blamed the flags. Chunks that no stage count divides are
  // named by the caller, with their event.
  if (s.pp < 1 || s.chunks % s.pp == 0) chunk_ids.check();
  mb_ids.check();
  s.largest_chunk_at = chunk_ids.at;
  return s;
}

}  // namespace rrfp::trace
