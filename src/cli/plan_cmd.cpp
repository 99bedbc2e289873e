// `rrfp plan`: the clairvoyant reference (docs/frontier.md). Knowing every duration of the
// step, search for the fastest order under rrfp's own constraints, prove it optimal on small
// shapes, and write it as a hint file that `rrfp simulate --policy fixed` reproduces.
#include <unistd.h>

#include <cstdio>
#include <iostream>

#include "cli/experiment_cmd.hpp"
#include "core/error.hpp"
#include "core/hint_io.hpp"
#include "plan/exact.hpp"
#include "plan/search.hpp"
#include "report/experiment.hpp"

namespace rrfp {

namespace {

struct PlanFlags {
  ShapeFlags shape;
  WorkloadFlags load;
  DispatchFlags dispatch;  // its --hint and --policy are not bound: a plan is its own order
  std::string exact = "auto", out, json;
  double budget_s = 10, exact_budget_s = 60;
  std::int64_t max_evaluations = 0;
  std::uint64_t search_seed = 1;
  std::string entry = "free";
};

double ms(std::int64_t ns) {
  return static_cast<double>(ns) / 1e6;
}

template <typename... Args>
std::string line(const char* format, Args... args) {
  char buf[512];
  std::snprintf(buf, sizeof buf, format, args...);
  return buf;
}

// The exact search runs by default where it finishes quickly enough to be worth waiting for.
bool want_exact(const PlanFlags& f, const PlanProblem& p) {
  if (f.exact != "auto" && f.exact != "on" && f.exact != "off")
    throw InputError("`exact`: expected auto, on or off, got '" + f.exact + "'");
  if (f.exact == "off") return false;
  std::string why = exact_unsupported(p);
  if (why.empty() && f.entry == "in-order")
    why = "enumerates every order, so it cannot keep --entry in-order";
  if (f.exact == "on") {
    if (!why.empty()) throw InputError("`exact` on: " + why);
    return true;
  }
  return p.m().pp() <= 4 && p.m().microbatches() <= 8 && why.empty();
}

void run_plan(const PlanFlags& f) {
  if (f.budget_s <= 0 || f.budget_s > 86400)
    throw InputError("`budget`: must be in (0, 86400] seconds, got " + fmt("%g", f.budget_s));
  if (f.exact_budget_s <= 0 || f.exact_budget_s > 86400)
    throw InputError("`exact_budget`: must be in (0, 86400] seconds, got " +
                     fmt("%g", f.exact_budget_s));
  const Scenario sc = make_scenario(f.shape, f.load, f.dispatch);
  const WorkModel m(sc.cfg);
  const RealizedWork work = realized_work(sc, m);
  const PlanProblem p = make_problem(m, work, parse_comm(f.dispatch.comm), sc.tp_protocol, sc.limit,
                                     sc.max_pending_w);
  std::ostream& human = f.json == "-" ? std::cerr : std::cout;
  const bool tty = ::isatty(STDERR_FILENO) != 0;

  if (f.entry != "free" && f.entry != "in-order")
    throw InputError("`entry`: expected free or in-order, got '" + f.entry + "'");
  const bool ran_exact = want_exact(f, p);
  SearchOptions so;
  so.budget_s = f.budget_s;
  so.max_evaluations = f.max_evaluations;
  so.seed = f.search_seed;
  so.entry_in_order = f.entry == "in-order";
  if (tty)
    so.progress = [](const SearchProgress& g) {
      std::fprintf(stderr, "\rsearch: %.1f s, %lld orders, best %.3f ms\033[K", g.seconds,
                   static_cast<long long>(g.evaluations), ms(g.best));
    };
  SearchResult best = search_schedule(p, so);
  if (tty) std::fprintf(stderr, "\r\033[K");

  ExactResult exact;
  if (ran_exact) {
    ExactOptions eo;
    eo.budget_s = f.exact_budget_s;
    eo.upper = best.makespan;
    if (tty)
      eo.progress = [](std::int64_t nodes, std::int64_t b) {
        std::fprintf(stderr, "\rexact: %lld nodes, best %.3f ms\033[K",
                     static_cast<long long>(nodes), ms(b));
      };
    exact = exact_schedule(p, eo);
    if (tty) std::fprintf(stderr, "\r\033[K");
  }
  const bool exact_better = ran_exact && exact.found && exact.makespan < best.makespan;
  const ListHint& order = exact_better ? exact.order : best.order;
  const std::int64_t makespan = exact_better ? exact.makespan : best.makespan;

  ReportRun run;
  run.label = "clairvoyant plan";
  run.hint = f.out.empty() ? "plan" : f.out;
  run.policy = "fixed";
  run.comm = f.dispatch.comm;
  run.cfg = sc.cfg;
  run.result = simulate_order(p, order, run.hint);
  if (run.result.makespan != makespan)
    throw Error("plan: the best order simulates to " + std::to_string(run.result.makespan) +
                " ns, not the " + std::to_string(makespan) + " ns the search found");
  const LowerBound lb = lower_bound(m, work, p.d_bound());
  run.metrics = compute_metrics(run.result, lb);
  const std::int64_t bound = std::max(lb.value, lb.memory);

  if (!f.out.empty()) {
    const bool json = f.out.size() >= 5 && f.out.compare(f.out.size() - 5, 5, ".json") == 0;
    write_text_file(f.out, json ? write_hint_json(order, m) : write_hint_text(order, m), "--out");
  }
  if (f.json != "-") {
    human << "P=" << m.pp() << " V=" << m.vpp() << " M=" << m.microbatches()
          << " split=" << (m.split() ? "on" : "off") << " TP=" << sc.tp
          << "  workload=" << header_of(sc).workload << "  seed=" << sc.seed
          << "  limit=" << p.limit << " (D <= " << p.d_bound() << ")  W cap=" << p.max_pending_w
          << "  comm=" << f.dispatch.comm
          << "\n\nstart points (each order under the fixed policy):\n";
    for (const StartPoint& s : best.starts)
      human << line("  %-28s ", s.name.c_str())
            << (s.makespan ? line("%10.3f ms", ms(s.makespan)) : std::string("  infeasible"))
            << "\n";
    human << line("\nsearch: %.3f ms, found by %s; %lld orders in %.1f s\n", ms(best.makespan),
                  best.found_by.c_str(), static_cast<long long>(best.evaluations), best.seconds);
    if (ran_exact)
      human << line("exact:  %.3f ms, %s; %lld nodes in %.1f s (root bound %.3f ms)\n",
                    ms(exact.makespan),
                    exact.proven ? "optimal (proven)" : "not proven within the budget",
                    static_cast<long long>(exact.nodes), exact.seconds, ms(exact.root_bound));
    human << line("best:   %.3f ms; lower bound %.3f ms (gap %.1f%%)\n", ms(makespan), ms(bound),
                  100.0 * static_cast<double>(makespan - bound) / static_cast<double>(makespan));
    if (!f.out.empty())
      human << "wrote " << f.out << ": `rrfp simulate --hint " << f.out
            << " --policy fixed` with the same shape, workload and --comm flags reproduces it\n";
  }
  if (!f.json.empty()) {
    nlohmann::json j = to_json(header_of(sc), {run});
    j["plan"] = {{"makespan_ms", ms(makespan)},
                 {"lower_bound_ms", ms(bound)},
                 {"search_ms", ms(best.makespan)},
                 {"search_found_by", best.found_by},
                 {"evaluations", best.evaluations},
                 {"search_seconds", best.seconds},
                 {"limit", p.limit},
                 {"d_bound", p.d_bound()},
                 {"max_pending_w", p.max_pending_w}};
    j["plan"]["starts"] = nlohmann::json::array();
    for (const StartPoint& s : best.starts)
      j["plan"]["starts"].push_back({{"name", s.name}, {"makespan_ms", ms(s.makespan)}});
    if (ran_exact)
      j["plan"]["exact"] = {{"makespan_ms", ms(exact.makespan)},
                            {"proven", exact.proven},
                            {"nodes", exact.nodes},
                            {"seconds", exact.seconds}};
    const std::string text = j.dump(2) + "\n";
    if (f.json == "-")
      std::cout << text;
    else
      write_text_file(f.json, text, "--json");
  }
}

}  // namespace

void setup_plan(CLI::App& app) {
  auto f = std::make_shared<PlanFlags>();
  f->shape.split = "off";
  CLI::App* sub = app.add_subcommand(
      "plan", "search the fastest schedule knowing every duration (the clairvoyant reference)");
  add_shape_flags(sub, f->shape);
  add_workload_flags(sub, f->load);
  add_execution_flags(sub, f->dispatch);
  sub->add_option("--budget", f->budget_s, "seconds for the heuristic search")
      ->capture_default_str();
  sub->add_option("--max-evaluations", f->max_evaluations,
                  "stop the heuristic after N orders (0: budget only; N makes it reproducible)")
      ->check(not_negative());
  sub->add_option("--search-seed", f->search_seed, "seed of the search's perturbations")
      ->check(not_negative())
      ->capture_default_str();
  sub->add_option("--entry", f->entry,
                  "first stage's forwards: free (any order) or in-order (microbatch order, as an "
                  "online runtime must)")
      ->capture_default_str();
  sub->add_option("--exact", f->exact,
                  "exact search: auto (P <= 4, M <= 8, TP 1, async), on or off")
      ->capture_default_str();
  sub->add_option("--exact-budget", f->exact_budget_s, "seconds for the exact search")
      ->capture_default_str();
  sub->add_option("--out", f->out, "write the best order as a hint file (.json or text)");
  sub->add_option("--json", f->json, "write the report as JSON to FILE ('-': stdout)");
  sub->callback([f] { run_plan(*f); });
}

}  // namespace rrfp
