#pragma once
// A step recorded with the split backward, replayed on a run without it: each W's time joins
// its B's, which then does W's work too, and B's message stays B's (a W sends nothing). The
// replay CSV (sim/replay_csv.cpp), the timelines of traces (sim/timeline.cpp) and `rrfp
// predict`'s rules that run the backward whole (report/predict.cpp) all fold this way.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/work_model.hpp"

namespace rrfp {

// Whether `t`, a task of a recording, is a W that `m` folds into its B: `m` runs the backward
// whole and has that B.
inline bool folds_into_b(const WorkModel& m, const TaskId& t) {
  return t.kind == Kind::W && !m.split() && m.valid(TaskId{Kind::B, t.chunk, t.mb});
}

// The folded W times by slot of a RealizedWork (rank * num_tasks + the index of their B), kept
// apart until every task's own time is in: a B missing from the recording is then said to be
// missing, not hidden behind its W's time, and a W given twice is told from its B.
class FoldedW {
 public:
  explicit FoldedW(std::size_t slots) : ns_(slots, -1) {}
  // -1 until set.
  std::int64_t& operator[](std::size_t slot) { return ns_[slot]; }
  // Where some W was folded, every B needs its own: a recording that lacks one (cut, filtered)
  // replayed that B without its W's work, a step too short and no word (the split backward's
  // replay names the missing W). What is missing, or "" (`m`: the run's shape).
  std::string missing(const WorkModel& m) const {
    bool any = false;
    for (const std::int64_t ns : ns_)
      any = any || ns >= 0;
    const auto n = static_cast<std::size_t>(m.num_tasks());
    for (std::size_t i = 0; any && i < ns_.size(); ++i) {
      const TaskId b = m.task(static_cast<int>(i % n));
      if (b.kind == Kind::B && ns_[i] < 0)
        return "no duration for task " + to_string(TaskId{Kind::W, b.chunk, b.mb}) +
               (ns_.size() > n ? " on tp rank " + std::to_string(i / n) : std::string()) +
               ", where other W tasks have one: a replay that runs the backward whole adds each "
               "W's time to its B, and this B's would be short of it";
    }
    return "";
  }
  // Adds each folded W's time to its B's.
  void add_to(std::vector<std::int64_t>& compute_ns) const {
    for (std::size_t i = 0; i < ns_.size(); ++i)
      if (ns_[i] >= 0) compute_ns[i] += ns_[i];
  }

 private:
  std::vector<std::int64_t> ns_;
};

}  // namespace rrfp
