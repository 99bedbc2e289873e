#include "core/hint.hpp"

#include <algorithm>
#include <filesystem>
#include <map>

#include "core/error.hpp"
#include "core/format.hpp"
#include "core/hint_io.hpp"
#include "core/printable.hpp"

namespace rrfp {

namespace {

const std::map<std::string, Rule>& rule_table() {
  static const std::map<std::string, Rule> t = {{"bf", Rule::BF},
                                                {"fb", Rule::FB},
                                                {"b-priority", Rule::BPriority},
                                                {"f-priority", Rule::FPriority},
                                                {"bfw", Rule::BFW},
                                                {"adaptive", Rule::Adaptive}};
  return t;
}

// A name that is no hint's own is a file when it looks like one or is there: a plan written
// to best.plan is read back by --hint best.plan (it was "unknown hint"). A hint's own name is
// never a file, whatever the working folder holds (a folder named `adaptive` took the hint's
// split backward away, silently).
bool looks_like_path(const std::string& s) {
  if (std::find(hint_names().begin(), hint_names().end(), s) != hint_names().end()) return false;
  std::error_code ec;
  return s.find('/') != std::string::npos || ends_with_ci(s, ".txt") || ends_with_ci(s, ".json") ||
         (!s.empty() && std::filesystem::exists(s, ec));
}

}  // namespace

bool is_hint_name(const std::string& name) {
  const auto& names = hint_names();
  return std::find(names.begin(), names.end(), name) != names.end();
}

std::string hint_names_listed() {
  std::string out;
  for (const auto& n : hint_names())
    out += (out.empty() ? "" : ", ") + n;
  return out;
}

const std::vector<std::string>& hint_names() {
  static const std::vector<std::string> names = {
      "gpipe", "1f1b", "interleaved-1f1b", "bfs",        "zb-h1", "zb-h2",   "zb-v",
      "bf",    "fb",   "b-priority",       "f-priority", "bfw",   "adaptive"};
  return names;
}

bool hint_path_is_json(const std::string& path) {
  return ends_with_ci(path, ".json");
}

bool is_rule_hint_name(const std::string& name) {
  return rule_table().count(name) > 0;
}

bool hint_wants_split(const std::string& name) {
  if (looks_like_path(name)) return hint_file_declares_split(name);
  return name == "zb-h1" || name == "zb-h2" || name == "zb-v" || name == "bfw" ||
         name == "adaptive";
}

bool hint_needs_split(const std::string& name) {
  return name != "adaptive" && hint_wants_split(name);
}

Hint make_hint(const std::string& name, const WorkModel& m) {
  Hint h;
  h.name = name;
  if (auto it = rule_table().find(name); it != rule_table().end()) {
    if (it->second == Rule::BFW && !m.split())
      throw InputError("`hint` bfw: needs `split_backward` on");
    h.body = it->second;
    return h;
  }
  if (name == "gpipe")
    h.body = gen_gpipe(m);
  else if (name == "1f1b")
    h.body = gen_1f1b(m);
  else if (name == "interleaved-1f1b")
    h.body = gen_interleaved_1f1b(m);
  else if (name == "bfs")
    h.body = gen_looped_bfs(m);
  else if (name == "zb-h1")
    h.body = gen_zb_h1(m);
  else if (name == "zb-h2")
    h.body = gen_zb_h2(m);
  else if (name == "zb-v")
    h.body = gen_zb_v(m);
  else if (looks_like_path(name)) {
    h.name = "file:" + name;
    h.body = read_hint_file(name, m);
  } else {
    throw InputError("`hint`: unknown hint '" + printable(name, 200) + "' (expected one of " +
                     hint_names_listed() + ", or a hint file: no file is there)");
  }
  return h;
}

namespace {

// Each stage's largest running sum of `count` over its order's prefixes: what the stage holds
// at its fullest when the list runs in fixed order.
template <class Count>
std::vector<int> order_peaks(const ListHint& hint, const WorkModel& m, Count count) {
  std::vector<int> peaks(m.pp(), 0);
  for (int s = 0; s < m.pp() && s < static_cast<int>(hint.stages.size()); ++s) {
    int held = 0;
    for (const TaskId& t : hint.stages[s]) {
      held += count(t);
      peaks[s] = std::max(peaks[s], held);
    }
  }
  return peaks;
}

int largest(const std::vector<int>& v) {
  return *std::max_element(v.begin(), v.end());
}

}  // namespace

std::vector<int> fixed_order_peaks(const ListHint& hint, const WorkModel& m) {
  return order_peaks(hint, m, [](const TaskId& t) {
    return t.kind == Kind::F ? 1 : t.kind == Kind::B ? -1 : 0;
  });
}

int fixed_order_peak(const ListHint& hint, const WorkModel& m) {
  return largest(fixed_order_peaks(hint, m));
}

int fixed_order_pending_w_peak(const ListHint& hint, const WorkModel& m) {
  if (!m.split()) return 0;
  return largest(order_peaks(hint, m, [](const TaskId& t) {
    return t.kind == Kind::B ? 1 : t.kind == Kind::W ? -1 : 0;
  }));
}

int default_limit(const Hint& hint, const WorkModel& m) {
  if (hint.is_list()) return std::max(1, fixed_order_peak(hint.list(), m));
  // Rule hints: 1F1B's stage-0 peak, or interleaved 1F1B's (its warm-up + 1), or under
  // the V-shaped placement ZB-V's, 2P half-size chunks (1F1B's activations): interleaved
  // 1F1B's 23 at P=8 let a V-shaped run hold 44% more than ZB-V, its fixed baseline, does.
  const int p = m.pp(), v = m.vpp(), mbs = m.microbatches();
  if (v == 1) return std::max(1, std::min(p, mbs));
  const int total = mbs * v;
  if (m.config().placement == Placement::VShape) return std::max(1, std::min(v * p, total));
  // Its rounds' size where it takes M; else (BFS the fixed baseline) Megatron's P.
  const int g = interleaved_1f1b_takes(p, mbs) ? interleaved_1f1b_round(p, mbs) : p;
  const int warmup = std::min(2 * (p - 1) + (v - 1) * g, total);
  return std::max(1, std::min(warmup + 1, total));
}

}  // namespace rrfp
