#include "plan/exact.hpp"

#include <algorithm>
#include <bit>
#include <chrono>
#include <limits>
#include <tuple>

#include "core/error.hpp"
#include "core/format.hpp"
#include "plan/graph.hpp"

namespace rrfp {

namespace {

using Clock = std::chrono::steady_clock;
constexpr std::int64_t kNone = std::numeric_limits<std::int64_t>::max();

struct Candidate {
  std::int64_t est;
  int task;
};

class BranchAndBound {
 public:
  BranchAndBound(const PlanProblem& p, const ExactOptions& opt)
      : p_(p), m_(p.m()), opt_(opt), g_(make_graph(p.m(), p.w())), t0_(Clock::now()) {
    if (auto why = exact_unsupported(p); !why.empty()) throw InputError("`exact`: " + why);
    done_.assign(g_.n, 0);
    end_.assign(g_.n, 0);
    head_.assign(g_.n, 0);
    free_.assign(m_.pp(), 0);
    d_.assign(m_.pp(), 0);
    pw_.assign(m_.pp(), 0);
    order_.assign(m_.pp(), {});
    best_ = opt.upper > 0 ? opt.upper : kNone;
    // The clock and the stop flag are read every so many nodes, about a million tasks' worth of
    // bounds apart: every 4,096 nodes, a node of a large order taking milliseconds, overran a
    // 1 s budget by 26 s, and a signal waited as long.
    const int per_check =
        std::clamp(std::bit_floor(static_cast<unsigned>((1 << 20) / std::max(1, g_.n))), 1U, 4096U);
    check_mask_ = static_cast<std::int64_t>(per_check) - 1;
  }

  ExactResult run() {
    res_.root_bound = bound();
    aborted_ = false;
    if (best_ == kNone || best_ > opt_.lower)
      dfs(-1, -1, -1, g_.n);
    else
      reached_lower_ = true;
    res_.proven = !aborted_ || reached_lower_;
    res_.met_lower = reached_lower_;
    res_.makespan = best_ == kNone ? 0 : best_;
    res_.seconds = std::chrono::duration<double>(Clock::now() - t0_).count();
    return std::move(res_);
  }

 private:
  // The best makespan any completion of the current partial schedule can reach, at least.
  std::int64_t bound() {
    std::int64_t lb = 0;
    for (int j : g_.topo) {
      if (done_[j]) {
        lb = std::max(lb, end_[j] + g_.tail[j]);
        continue;
      }
      std::int64_t r = free_[g_.stage[j]];
      for (int k = 0; k < 2; ++k) {
        const int d = g_.deps[j][k];
        if (d >= 0) r = std::max(r, g_.arrival(j, k, done_[d] ? end_[d] : head_[d] + g_.dur[d]));
      }
      head_[j] = r;
      lb = std::max(lb, r + g_.dur[j] + g_.tail[j]);
    }
    // One stage at a time: the tasks released at or after r must all run after r, and the
    // last of them to finish still has its tail ahead.
    for (int s = 0; s < m_.pp(); ++s) {
      jobs_.clear();
      for (int j = 0; j < g_.n; ++j)
        if (!done_[j] && g_.stage[j] == s) jobs_.push_back(j);
      if (jobs_.empty()) continue;
      std::sort(jobs_.begin(), jobs_.end(), [&](int a, int b) { return head_[a] < head_[b]; });
      std::int64_t sum = 0, min_tail = kNone;
      for (auto it = jobs_.rbegin(); it != jobs_.rend(); ++it) {
        sum += g_.dur[*it];
        min_tail = std::min(min_tail, g_.tail[*it]);
        lb = std::max(lb, head_[*it] + sum + min_tail);
      }
      std::sort(jobs_.begin(), jobs_.end(), [&](int a, int b) { return g_.tail[a] > g_.tail[b]; });
      std::int64_t min_head = kNone;
      sum = 0;
      for (int j : jobs_) {
        sum += g_.dur[j];
        min_head = std::min(min_head, head_[j]);
        lb = std::max(lb, min_head + sum + g_.tail[j]);
      }
    }
    return lb;
  }

  bool eligible(int j) const {
    if (done_[j]) return false;
    for (int k = 0; k < 2; ++k)
      if (g_.deps[j][k] >= 0 && !done_[g_.deps[j][k]]) return false;
    const int s = g_.stage[j];
    switch (m_.task(j).kind) {
      case Kind::F:
        return d_[s] + 1 <= p_.d_bound();
      case Kind::B:
        return !m_.split() || pw_[s] + 1 <= p_.max_pending_w;
      case Kind::W:
        return true;
    }
    return false;
  }

  std::int64_t est(int j) const {
    std::int64_t r = free_[g_.stage[j]];
    for (int k = 0; k < 2; ++k)
      if (g_.deps[j][k] >= 0) r = std::max(r, g_.arrival(j, k, end_[g_.deps[j][k]]));
    return r;
  }

  // Starting `c` now means every candidate that would start earlier (in the enumeration's
  // order) waits behind a later task of its own stage. A candidate that would have finished
  // before `c` starts, and whose kind only loosens memory prefixes (a W; a whole B), can be
  // put back in front of that task without delaying anything: the schedule with it first is
  // at least as good, and is enumerated in its own branch.
  bool dominated(const Candidate& c, const std::vector<Candidate>& all) const {
    for (const Candidate& k : all) {
      if (k.task == c.task) continue;
      if (k.est >= c.est) break;  // sorted by start: no later candidate finishes in time
      if (k.est + g_.dur[k.task] > c.est) continue;
      const Kind kind = m_.task(k.task).kind;
      if (kind == Kind::W || (kind == Kind::B && !m_.split())) return true;
    }
    return false;
  }

  void apply(int j, int sign) {
    const int s = g_.stage[j];
    const Kind kind = m_.task(j).kind;
    const int dd = kind == Kind::F ? 1 : kind == Kind::B ? -1 : 0;
    const int dw = kind == Kind::B && m_.split() ? 1 : kind == Kind::W ? -1 : 0;
    d_[s] += sign * dd;
    pw_[s] += sign * dw;
  }

  void dfs(std::int64_t last_start, int last_stage, int last_task, int remaining) {
    if (aborted_) return;
    if (opt_.max_nodes > 0 && res_.nodes == opt_.max_nodes) {  // at the very node: reproducible
      res_.stopped_by = ExactStop::NodeCap;
      aborted_ = true;
      return;
    }
    if ((++res_.nodes & check_mask_) == 0) {
      if (opt_.stop != nullptr && opt_.stop->load(std::memory_order_relaxed) != 0)
        res_.stopped_by = ExactStop::Signal;
      const double t = std::chrono::duration<double>(Clock::now() - t0_).count();
      if (res_.stopped_by == ExactStop::None && t >= opt_.budget_s)
        res_.stopped_by = ExactStop::Budget;
      if (res_.stopped_by != ExactStop::None) {
        aborted_ = true;
        return;
      }
      // A second apart: every 2^20 nodes, a step of thousands of tasks said "its first nodes
      // under way" for minutes.
      if (opt_.progress && t >= next_progress_s_) {
        next_progress_s_ = t + 1;
        opt_.progress(res_.nodes, best_ == kNone ? 0 : best_);
      }
    }
    if (remaining == 0) {
      std::int64_t ms = 0;
      for (int s = 0; s < m_.pp(); ++s)
        ms = std::max(ms, free_[s]);
      if (ms < best_) {
        best_ = ms;
        res_.found = true;
        res_.order.stages.assign(m_.pp(), {});
        for (int s = 0; s < m_.pp(); ++s)
          for (int j : order_[s])
            res_.order.stages[s].push_back(m_.task(j));
        if (best_ <= opt_.lower) aborted_ = reached_lower_ = true;  // nothing can be better
      }
      return;
    }
    if (bound() >= best_) return;
    std::vector<Candidate> cands;
    for (int j = 0; j < g_.n; ++j) {
      if (!eligible(j)) continue;
      const std::int64_t e = est(j);
      // Start-time order, ties by (stage, task): each schedule is built exactly one way.
      if (std::make_tuple(e, g_.stage[j], j) <= std::make_tuple(last_start, last_stage, last_task))
        continue;
      cands.push_back(Candidate{e, j});
    }
    std::sort(cands.begin(), cands.end(), [&](const Candidate& a, const Candidate& b) {
      return a.est != b.est ? a.est < b.est : g_.tail[a.task] > g_.tail[b.task];
    });
    for (const Candidate& c : cands) {
      if (dominated(c, cands)) continue;
      const int j = c.task, s = g_.stage[j];
      const std::int64_t saved_free = free_[s];
      done_[j] = 1;
      end_[j] = c.est + g_.dur[j];
      free_[s] = end_[j];
      apply(j, +1);
      order_[s].push_back(j);
      dfs(c.est, s, j, remaining - 1);
      order_[s].pop_back();
      apply(j, -1);
      free_[s] = saved_free;
      done_[j] = 0;
      if (aborted_) return;
    }
  }

  const PlanProblem& p_;
  const WorkModel& m_;
  ExactOptions opt_;
  TaskGraph g_;
  Clock::time_point t0_;
  double next_progress_s_ = 1;  // when progress is next told, in seconds from t0_
  std::vector<char> done_;
  std::vector<std::int64_t> end_, head_, free_;
  std::vector<int> d_, pw_, jobs_;
  std::vector<std::vector<int>> order_;
  std::int64_t best_;
  std::int64_t check_mask_ = 4095;  // of the node count: when to read the clock
  bool aborted_ = false;
  bool reached_lower_ = false;  // stopped at an order meeting ExactOptions::lower: optimal
  ExactResult res_;
};

// The exact search takes a message as its producer's end plus its own latency. The simulator's
// other message costs depend on what else is in flight or idle at that instant (shared links,
// one copy at a time per receiver, a slowdown while two move, an idle rank's wake-up): an order
// the search found optimal would simulate slower than it said. Each is refused by its field.
std::string message_model_unsupported(const RealizedWork& w) {
  const std::string alone = ", and the exact search takes each message alone";
  if (w.links > 0) return "the workload's comm_links is " + fmt("%g", w.links) + alone;
  if (w.serial_receive) return "the workload's comm_serial_receive is true" + alone;
  if (w.two_slowdown > 1)
    return "the workload's comm_two_slowdown is " + fmt("%g", w.two_slowdown) + alone;
  if (w.wake_ns != 0)
    return "the workload's comm_wake_us is " + fmt("%g", static_cast<double>(w.wake_ns) / 1e3) +
           ", and the exact search models no wake-up";
  return {};
}

}  // namespace

std::string exact_unsupported(const PlanProblem& p) {
  if (p.m().num_tasks() > kMaxExactTasks)
    return "takes at most " + std::to_string(kMaxExactTasks) +
           " tasks (its search goes a level deeper a task); this step has " +
           std::to_string(p.m().num_tasks());
  if (p.w().tp != 1) return "needs `tp` 1";
  if (p.comm != CommMode::Async) return "needs `comm` async";
  if (auto why = message_model_unsupported(p.w()); !why.empty()) return why;
  for (int j = 0; j < p.m().num_tasks(); ++j)
    if (p.w().compute(0, j) + p.w().collective_after(p.m().task(j).kind) <= 0)
      return "task " + to_string(p.m().task(j)) +
             " takes no time; the exact search needs positive durations";
  return {};
}

ExactResult exact_schedule(const PlanProblem& p, const ExactOptions& opt) {
  return BranchAndBound(p, opt).run();
}

}  // namespace rrfp
