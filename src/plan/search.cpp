#include "plan/search.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>
#include <utility>

#include "core/error.hpp"
#include "plan/graph.hpp"
#include "sim/rng.hpp"

namespace rrfp {

namespace {

Hint priority_hint(const PlanProblem& p, const std::vector<double>& priority) {
  const WorkModel& m = p.m();
  ListHint lists;
  lists.stages.resize(m.pp());
  // Higher priority first, ties in the stage's task order: (-priority, position) pairs sorted
  // give the order a stable sort by priority gives, without indexing each task at every
  // comparison (the sort was a twelfth of an annealing's time).
  std::vector<std::pair<double, int>> keyed;
  for (int s = 0; s < m.pp(); ++s) {
    const auto tasks = m.stage_tasks(s);
    keyed.resize(tasks.size());
    for (std::size_t i = 0; i < tasks.size(); ++i)
      keyed[i] = {-priority[m.index(tasks[i])], static_cast<int>(i)};
    std::sort(keyed.begin(), keyed.end());
    auto& out = lists.stages[s];
    out.reserve(tasks.size());
    for (const auto& [key, i] : keyed)
      out.push_back(tasks[i]);
  }
  Hint h;
  h.name = "list";
  h.body = std::move(lists);
  return h;
}

}  // namespace

ListHint list_schedule(const PlanProblem& p, const std::vector<double>& priority) {
  return realized_order(p.m(), simulate(p.m(), priority_hint(p, priority), p.w(),
                                        sim_options(p, Policy::Ready, true)));
}

std::optional<std::int64_t> list_makespan(const PlanProblem& p,
                                          const std::vector<double>& priority) {
  return simulated_makespan(p.m(), priority_hint(p, priority), p.w(),
                            sim_options(p, Policy::Ready, false));
}

namespace {

using Clock = std::chrono::steady_clock;

class Searcher {
 public:
  Searcher(const PlanProblem& p, const SearchOptions& opt)
      : p_(p), opt_(opt), g_(make_graph(p.m(), p.w())), rng_(mix64(opt.seed)), t0_(Clock::now()) {}

  SearchResult run() {
    starts();
    // Every rule's order can deadlock (a V-shape under blocking comm at the default limit did),
    // and the plan was refused; one microbatch at a time finishes under any of them. Tried only
    // then: as a start always, it took an evaluation from every search.
    if (!res_.found) start("serial", serial_order());
    if (!res_.found)
      throw InputError("plan: no feasible starting order, not even one microbatch at a time (" +
                       std::to_string(res_.starts.size()) + " tried)");
    improve();
    res_.seconds = seconds();
    return std::move(res_);
  }

 private:
  double seconds() const { return std::chrono::duration<double>(Clock::now() - t0_).count(); }
  // Once a limit is reached it stays reached (evaluations and time only grow, a signal's flag
  // stays set): the first one is kept, to say what stopped the search.
  bool spent() {
    if (spent_) return true;
    if (opt_.max_evaluations > 0 && res_.evaluations >= opt_.max_evaluations)
      res_.stopped_by = SearchStop::Evaluations;
    else if (seconds() >= opt_.budget_s)
      res_.stopped_by = SearchStop::Budget;
    else if (opt_.stop != nullptr && opt_.stop->load(std::memory_order_relaxed) != 0)
      res_.stopped_by = SearchStop::Signal;
    else
      return false;
    return spent_ = true;
  }
  double uniform() { return unit_open(rng_ = mix64(rng_)); }

  std::optional<std::int64_t> eval(const ListHint& o) {
    if (opt_.progress && seconds() >= next_progress_) {  // the orders done, before this one
      next_progress_ = seconds() + 0.25;
      opt_.progress(SearchProgress{res_.evaluations, res_.makespan, res_.found, seconds()});
    }
    ++res_.evaluations;
    if (!order_violation(p_, o).empty() || !entry_kept(o)) return std::nullopt;
    return evaluate(p_, o);
  }

  bool entry_kept(const ListHint& o) const {
    if (!opt_.entry_in_order) return true;
    int next = 0;
    for (const TaskId& t : o.stages[0])
      if (t.kind == Kind::F && t.chunk == 0 && t.mb != next++) return false;
    return true;
  }

  // With entry_in_order, the first chunk's forward priorities are re-dealt in microbatch order.
  void keep_entry(std::vector<double>& key) const {
    if (!opt_.entry_in_order) return;
    const WorkModel& m = p_.m();
    std::vector<double> k;
    for (int mb = 0; mb < m.microbatches(); ++mb)
      k.push_back(key[m.index(TaskId{Kind::F, 0, mb})]);
    std::sort(k.begin(), k.end(), std::greater<>());
    for (int mb = 0; mb < m.microbatches(); ++mb)
      key[m.index(TaskId{Kind::F, 0, mb})] = k[mb];
  }

  void offer(const ListHint& o, std::int64_t makespan, const std::string& by) {
    if (!res_.found || makespan < res_.makespan) {
      res_.found = true;
      res_.order = o;
      res_.makespan = makespan;
      res_.found_by = by;
    }
  }

  void start(const std::string& name, const ListHint& o) {
    const auto ms = eval(o);
    res_.starts.push_back(StartPoint{name, ms.has_value(), ms.value_or(0)});
    if (ms) offer(o, *ms, name);
  }

  ListHint realized(const Hint& h) {
    return realized_order(p_.m(),
                          simulate(p_.m(), h, p_.w(), sim_options(p_, Policy::Ready, true)));
  }

  // What `run` returns, none where its run under the ready policy does not finish: it
  // deadlocks, or under tp_protocol none its TP ranks diverge (which ended the whole plan).
  template <class Run>
  static auto if_finishes(const Run& run) -> std::optional<decltype(run())> {
    try {
      return run();
    } catch (const DeadlockError&) {
    } catch (const CollectiveMismatchError&) {
    }
    return std::nullopt;
  }

  // A start from a run under the ready policy; infeasible where it does not finish.
  void start_ready(const std::string& name, const std::optional<ListHint>& o) {
    if (o)
      start(name, *o);
    else
      res_.starts.push_back(StartPoint{name, false, 0});
  }

  // Each microbatch through every chunk and back before the next enters.
  ListHint serial_order() const {
    const WorkModel& m = p_.m();
    ListHint o;
    o.stages.resize(m.pp());
    const auto add = [&](Kind k, int c, int mb) {
      o.stages[m.stage_of(TaskId{k, c, mb})].push_back(TaskId{k, c, mb});
    };
    for (int mb = 0; mb < m.microbatches(); ++mb) {
      for (int c = 0; c < m.chunks(); ++c)
        add(Kind::F, c, mb);
      for (int c = m.chunks() - 1; c >= 0; --c) {
        add(Kind::B, c, mb);
        if (m.split()) add(Kind::W, c, mb);
      }
    }
    return o;
  }

  // Past the budget with a feasible order in hand: the rest of the starts are skipped.
  bool starts_spent(int left) {
    if (!spent() || !res_.found) return false;
    res_.starts_skipped += left;
    return true;
  }

  void starts() {
    const WorkModel& m = p_.m();
    // The hints that fit this shape (not zb-* without a split, interleaved with V = 1, ...),
    // and whether each is a list, first: the starts skipped are counted among those (it counted
    // every hint's name). Made again below, not held: at a large shape, each is the step's size.
    std::vector<std::pair<std::string, bool>> fits;
    for (const std::string& name : hint_names()) {
      try {
        fits.emplace_back(name, make_hint(name, m).is_list());
      } catch (const InputError&) {
      }
    }
    // The start points from hint i on: its fixed and ready ones, and the list schedule's last.
    std::vector<int> left(fits.size() + 1, 1);
    for (size_t i = fits.size(); i-- > 0;)
      left[i] = left[i + 1] + (fits[i].second ? 2 : 1);
    for (size_t i = 0; i < fits.size(); ++i) {
      const std::string& name = fits[i].first;
      if (starts_spent(left[i])) return;
      const Hint h = make_hint(name, m);
      // What the hint's order would do under the fixed policy, and what rrfp makes of it.
      if (h.is_list()) start("fixed " + name, h.list());
      if (starts_spent(left[i + 1] + 1)) return;
      start_ready("ready " + name, if_finishes([&] { return realized(h); }));
    }
    if (starts_spent(1)) return;
    std::vector<double> prio(g_.n);
    for (int j = 0; j < g_.n; ++j)
      prio[j] = static_cast<double>(g_.tail[j] + g_.dur[j]);
    keep_entry(prio);
    start_ready("list critical-path", if_finishes([&] { return list_schedule(p_, prio); }));
  }

  // Start and end times of the order's tasks (TP rank 0's), by task index.
  struct Timed {
    std::vector<std::int64_t> start, end;
    std::int64_t makespan = 0;
  };
  Timed timed(const ListHint& o) {
    const StepRecord r = simulate_order(p_, o, "plan");
    Timed t;
    t.start.assign(g_.n, 0);
    t.end.assign(g_.n, 0);
    for (const TaskRecord& x : r.tasks)
      if (x.rank == 0) {
        const int i = p_.m().index(x.task);
        t.start[i] = x.start;
        t.end[i] = x.end;
      }
    t.makespan = r.makespan;
    return t;
  }

  // The critical path, from the task that ends last back to the start: at each task, the
  // dependency whose arrival set its start, or else the task before it on its stage.
  std::vector<int> critical_path(const ListHint& o, const Timed& t) {
    const WorkModel& m = p_.m();
    std::vector<int> pos(g_.n, 0);
    for (int s = 0; s < m.pp(); ++s)
      for (int i = 0; i < static_cast<int>(o.stages[s].size()); ++i)
        pos[m.index(o.stages[s][i])] = i;
    int x = static_cast<int>(std::max_element(t.end.begin(), t.end.end()) - t.end.begin());
    std::vector<int> path;
    for (int guard = 0; guard <= g_.n && x >= 0; ++guard) {
      path.push_back(x);
      int next = -1;
      for (int k = 0; k < 2 && next < 0; ++k) {
        const int d = g_.deps[x][k];
        if (d >= 0 && g_.arrival(x, k, t.end[d]) == t.start[x]) next = d;
      }
      const int s = g_.stage[x], i = pos[x];
      if (next < 0 && i > 0 && t.end[m.index(o.stages[s][i - 1])] <= t.start[x])
        next = m.index(o.stages[s][i - 1]);
      x = next;
    }
    return path;
  }

  static ListHint moved(const ListHint& o, int s, int from, int to) {
    ListHint out = o;
    auto& v = out.stages[s];
    const TaskId t = v[from];
    v.erase(v.begin() + from);
    v.insert(v.begin() + to, t);
    return out;
  }

  // First-improvement descent: move a task of the critical path up to kReach places earlier
  // or later on its stage; stop when no such move shortens the step.
  static constexpr int kReach = 8;
  std::pair<ListHint, std::int64_t> descend(ListHint cur, std::int64_t ms) {
    const WorkModel& m = p_.m();
    for (;;) {
      if (spent() || ms <= opt_.lower) return {cur, ms};
      const Timed t = timed(cur);
      bool better = false;
      for (int x : critical_path(cur, t)) {
        const int s = g_.stage[x];
        auto& v = cur.stages[s];
        const int n = static_cast<int>(v.size());
        const int i = static_cast<int>(std::find(v.begin(), v.end(), m.task(x)) - v.begin());
        for (int k = 1; k <= kReach && !better; ++k)
          for (int to : {i - k, i + k}) {
            if (to < 0 || to >= n) continue;
            ListHint cand = moved(cur, s, i, to);
            if (auto c = eval(cand); c && *c < ms) {
              cur = std::move(cand);
              ms = *c;
              better = true;
              break;
            }
            if (spent()) return {cur, ms};
          }
        if (better) break;
      }
      if (!better) return {cur, ms};
    }
  }

  // How far the search is through its budget, 0..1; with max_evaluations, through those alone:
  // where the cap ends the search, its rounds end and cool at the same evaluations on every
  // machine. (The larger of the two fractions let a budget near the cap's time move them: at P=6
  // M=24, 2 runs of 40 stopped by the cap gave other orders.) A budget spent first still ends
  // the search, then in the midst of a round.
  double used() const {
    const double f = opt_.max_evaluations > 0
                         ? static_cast<double>(res_.evaluations) / opt_.max_evaluations
                         : seconds() / opt_.budget_s;
    return std::min(1.0, f);
  }

  // One random move in priority space: two microbatches trade places everywhere, or one task
  // moves just ahead of another task of its stage.
  void mutate(std::vector<double>& key) {
    const WorkModel& m = p_.m();
    if (uniform() < 0.3 && m.microbatches() > 1) {
      const int a = static_cast<int>(uniform() * m.microbatches());
      const int b = static_cast<int>(uniform() * m.microbatches());
      for (int j = 0; j < g_.n; ++j) {
        const TaskId t = m.task(j);
        if (t.mb == a) std::swap(key[j], key[m.index(TaskId{t.kind, t.chunk, b})]);
      }
      return;
    }
    const auto& tasks = by_stage_[static_cast<int>(uniform() * m.pp())];
    const int x = tasks[static_cast<size_t>(uniform() * tasks.size())];
    const int y = tasks[static_cast<size_t>(uniform() * tasks.size())];
    key[x] = key[y] + (uniform() - 0.25) * 1e-3;
  }

  // Simulated annealing over priorities, each evaluated by list scheduling under the ready
  // policy (so every candidate keeps the limit and adapts every stage's order to the change),
  // until `until` of the budget is used; then the best priorities' order is polished and
  // offered.
  void anneal(double until) {
    const Timed t = timed(res_.order);
    std::vector<double> key(g_.n), best_key;
    for (int j = 0; j < g_.n; ++j)
      key[j] = -static_cast<double>(t.start[j]);
    keep_entry(key);
    const auto first = list_makespan(p_, key);
    if (!first) {  // counted, so that rounds that all fail still spend --max-evaluations
      ++res_.evaluations;
      return;
    }
    std::int64_t cur = *first, best = cur;
    best_key = key;
    const double temp0 = 0.01 * static_cast<double>(cur), from = used();
    while (!spent() && used() < until && best > opt_.lower) {
      std::vector<double> cand = key;
      mutate(cand);
      keep_entry(cand);
      ++res_.evaluations;
      const auto ran = list_makespan(p_, cand);
      if (!ran) continue;
      const std::int64_t c = *ran;
      const double temp =
          temp0 * std::max(0.0, 1.0 - (used() - from) / std::max(1e-9, until - from));
      if (c <= cur || (temp > 0 && uniform() < std::exp(-static_cast<double>(c - cur) / temp))) {
        key = std::move(cand);
        cur = c;
        if (c < best) {
          best = c;
          best_key = key;
        }
      }
    }
    ListHint o = list_schedule(p_, best_key);
    if (auto c = eval(o)) {
      auto [o2, c2] = descend(std::move(o), *c);
      offer(o2, c2, "annealed priorities + local search");
    }
  }

  // The best order meets the lower bound: nothing is left to find.
  bool optimal() {
    if (!res_.found || res_.makespan > opt_.lower) return false;
    if (!spent_) res_.stopped_by = SearchStop::Optimal;
    return spent_ = true;
  }

  void improve() {
    if (optimal()) return;
    by_stage_.assign(p_.m().pp(), {});
    for (int j = 0; j < g_.n; ++j)
      by_stage_[g_.stage[j]].push_back(j);
    auto [cur, ms] = descend(res_.order, res_.makespan);
    offer(cur, ms, res_.found_by + " + local search");
    // Annealing rounds, each restarting from the best order so far.
    while (!optimal() && !spent())
      anneal(std::min(1.0, used() + 0.25));
  }

  const PlanProblem& p_;
  SearchOptions opt_;
  TaskGraph g_;
  std::uint64_t rng_;
  Clock::time_point t0_;
  double next_progress_ = 0.25;
  bool spent_ = false;
  SearchResult res_;
  std::vector<std::vector<int>> by_stage_;  // task indices of each stage
};

}  // namespace

SearchResult search_schedule(const PlanProblem& p, const SearchOptions& opt) {
  return Searcher(p, opt).run();
}

}  // namespace rrfp
