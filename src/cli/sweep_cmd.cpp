// `rrfp sweep`: a grid over workloads x P x M x TP x limits x seeds; every grid point runs the
// fixed baselines and the requested rrfp runs on identical realized durations. Writes a CSV
// of every run and a markdown summary of speedups, efficiency and peak activation memory.

#include <algorithm>
#include <cmath>
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>

#include "cli/experiment_cmd.hpp"
#include "cli/options.hpp"
#include "cli/stop_signal.hpp"
#include "cli/sweep_outputs.hpp"
#include "core/error.hpp"
#include "core/hint.hpp"
#include "core/modes.hpp"
#include "core/output_file.hpp"
#include "core/printable.hpp"
#include "core/progress_ticker.hpp"
#include "report/estimate.hpp"

namespace rrfp {

namespace {

struct SweepFlags {
  std::vector<std::string> workloads = {"language", "multimodal"};
  std::vector<int> pps = {4, 8};
  std::vector<int> mb_factors = {2, 4};
  std::vector<int> tps = {1};
  std::vector<int> limits = {0};
  std::vector<std::string> hints = {"bf", "bfw"};
  int seeds = 3;
  std::string tp_protocol = "leader";
  bool tp_protocol_given = false;
  std::string csv = "sweep.csv", md;
  bool quiet = false;
};

struct Row {
  std::string workload, run;
  int pp, mbs, tp, limit_flag;
  std::string limit;  // the ready policy's limit; "-" for a fixed run, as simulate's table
  std::uint64_t seed;
  double makespan_ms, bubble, efficiency, lb_ms;
  int peak_d;
  double vs_1f1b_blocking, vs_1f1b_async, vs_zbh1;
};

double geomean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v)
    s += std::log(x);
  return v.empty() ? 0 : std::exp(s / v.size());
}

std::string markdown(const std::vector<Row>& rows, const SweepFlags& f) {
  struct Agg {
    std::vector<double> a, b, c, eff;
    int peak = 0;
  };
  // Summary: per workload, limit and run, over P, M, TP and seeds.
  std::map<std::tuple<std::string, int, std::string>, Agg> sum;
  std::vector<std::string> run_order;
  for (const Row& r : rows) {
    if (std::find(run_order.begin(), run_order.end(), r.run) == run_order.end())
      run_order.push_back(r.run);
    Agg& g = sum[{r.workload, r.limit_flag, r.run}];
    g.a.push_back(r.vs_1f1b_blocking);
    g.b.push_back(r.vs_1f1b_async);
    if (r.vs_zbh1 > 0) g.c.push_back(r.vs_zbh1);
    g.eff.push_back(r.efficiency);
    g.peak = std::max(g.peak, r.peak_d);
  }
  std::ostringstream o;
  o << "| workload | limit | run | speedup vs fixed 1F1B blocking (geomean, min..max) | vs fixed "
       "1F1B async | vs fixed ZB-H1 | efficiency (mean) | peak D (max) "
       "|\n|---|---|---|---|---|---|---|---|\n";
  for (const auto& w : f.workloads)
    for (int lim : f.limits)
      for (const auto& run : run_order) {
        auto it = sum.find({w, lim, run});
        if (it == sum.end()) continue;
        const Agg& g = it->second;
        double e = 0;
        for (double x : g.eff)
          e += x;
        o << "| " << w << " | " << (lim == 0 ? "default" : std::to_string(lim)) << " | " << run
          << " | " << fmt("%.3f", geomean(g.a)) << " ("
          << fmt("%.3f", *std::min_element(g.a.begin(), g.a.end())) << ".."
          << fmt("%.3f", *std::max_element(g.a.begin(), g.a.end())) << ") | "
          << fmt("%.3f", geomean(g.b)) << " | " << (g.c.empty() ? "-" : fmt("%.3f", geomean(g.c)))
          << " | " << fmt("%.3f", e / g.eff.size()) << " | " << g.peak << " |\n";
      }
  return o.str();
}

// Bad input fails before anything runs, each value named with its flag.
// A grid value given twice would run its points twice and count them twice in the summary.
template <class T>
void refuse_twice(const std::vector<T>& values, const char* flag) {
  for (std::size_t i = 0; i < values.size(); ++i)
    for (std::size_t j = 0; j < i; ++j)
      if (values[i] == values[j]) {
        std::ostringstream v;
        v << values[i];
        throw InputError(std::string(flag) + ": " + v.str().substr(0, 40) +
                         " is given twice; each value is a dimension of the grid");
      }
}

void check_sweep(const SweepFlags& f) {
  if (f.seeds < 1) throw InputError("--seeds: must be at least 1, got " + std::to_string(f.seeds));
  refuse_twice(f.workloads, "--workloads");
  // Every name before any point runs: a typo found when the loop reached it lost the points
  // already run (no CSV was written). Two spellings of one preset ("jitter", "jitter:J2",
  // "jitter:j2") ran it twice as well.
  std::vector<std::string> presets;
  for (const std::string& w : f.workloads) {
    presets.push_back(workload_preset(w, "--workloads").preset);
    for (std::size_t i = 0; i + 1 < presets.size(); ++i)
      if (presets[i] == presets.back())
        throw InputError("--workloads: '" + printable(w, 40) + "' and '" +
                         printable(f.workloads[i], 40) + "' are one preset (" + presets.back() +
                         "); each value is a dimension of the grid");
  }
  refuse_twice(f.pps, "--pp");
  refuse_twice(f.mb_factors, "--mb-factors");
  refuse_twice(f.tps, "--tp");
  refuse_twice(f.limits, "--limits");
  refuse_twice(f.hints, "--hints");
  // The sweep's TP groups choose together: `none` (each rank alone) diverged in the collectives
  // and failed the grid with exit 1, where its help says leader or agree.
  require_coordination(f.tp_protocol);
  // A grid with no TP group took it and ignored it, its CSV the default's.
  refuse_unused_tp_protocol(f.tp_protocol_given, f.tps);
  for (int p : f.pps)
    if (p < 1) throw InputError("--pp: must be at least 1, got " + std::to_string(p));
  for (int m : f.mb_factors)
    if (m < 1) throw InputError("--mb-factors: must be at least 1, got " + std::to_string(m));
  // M = factor x P, and P x M, in a double: an int product wrapped round (1073741825 x 4 ran
  // M = 4), and a 64-bit one too (4194304 x 2097152^2 = 2^64 read 0, the grid estimated at
  // "-nan GB").
  for (int m : f.mb_factors)
    for (int p : f.pps)
      if (static_cast<double>(m) * p * p > kMaxChunkMicrobatches)
        throw InputError("--mb-factors: " + std::to_string(m) + " x --pp " + std::to_string(p) +
                         " microbatches on " + std::to_string(p) + " stages exceed the " +
                         std::to_string(kMaxChunkMicrobatches) + " chunk-microbatches of a step");
  // Its upper bound too: --tp 1,2000 ran every TP 1 point, then failed with no CSV written.
  for (int t : f.tps)
    if (t < 1 || t > kMaxTp)
      throw InputError("--tp: must be between 1 and " + std::to_string(kMaxTp) + ", got " +
                       std::to_string(t));
  for (int l : f.limits)
    if (l < 0)
      throw InputError("--limits: must be 0 (default) or at least 1, got " + std::to_string(l));
  for (const auto& h : f.hints)
    if (!is_rule_hint_name(h) && !is_hint_name(h))
      throw InputError("--hints: unknown hint '" + printable(h, 200) + "' (expected one of " +
                       hint_names_listed() + ")");
  // Each point has one chunk per stage (V = 1; sweep has no --vpp): these failed the grid's
  // first point with "needs --vpp 2 or more", a flag sweep does not take.
  static const std::map<std::string, std::string> interleaved = {
      {"interleaved-1f1b", "1f1b"}, {"bfs", "gpipe"}, {"zb-v", "zb-h1"}};
  for (const auto& h : f.hints)
    if (auto it = interleaved.find(h); it != interleaved.end())
      throw InputError("--hints: " + h +
                       " needs 2 or more model chunks per stage, and sweep runs one (V = 1, "
                       "it has no --vpp); use " +
                       it->second);
}

// The fixed baselines, then every requested rrfp hint under the ready policy.
std::vector<RunSpec> sweep_specs(const SweepFlags& f) {
  std::vector<RunSpec> specs = {
      {"1f1b", Policy::Fixed, CommMode::Blocking, "fixed 1f1b (blocking)"},
      {"1f1b", Policy::Fixed, CommMode::Async, "fixed 1f1b (async)"},
      {"zb-h1", Policy::Fixed, CommMode::Async, "fixed zb-h1 (async)"}};
  for (const auto& h : f.hints)
    specs.push_back({h, Policy::Ready, CommMode::Async, "rrfp " + h + " (async)"});
  return specs;
}

// One grid point's runs, each against the three baselines (the first three runs).
std::vector<Row> point_rows(const Scenario& sc, const std::vector<RunSpec>& specs, int limit_flag) {
  const std::vector<ReportRun> runs = run_scenarios(sc, specs);
  const double b0 = runs[0].metrics.makespan, b1 = runs[1].metrics.makespan,
               b2 = runs[2].metrics.makespan;
  std::vector<Row> rows;
  for (const auto& r : runs) {
    const RunMetrics& mt = r.metrics;
    // A fixed run holds what its list holds: the limit it was given bounds nothing (a fixed
    // 1F1B row showed limit 1 beside peak_d_max 4).
    const std::string limit = r.policy == "ready" ? std::to_string(mt.limit) : "-";
    Row row{sc.workload_name,
            r.label,
            sc.cfg.pp,
            sc.cfg.microbatches,
            sc.tp,
            limit_flag,
            limit,
            sc.seed,
            mt.makespan / 1e6,
            mt.bubble_ratio,
            mt.efficiency,
            mt.bound.value / 1e6,
            0,
            b0 / mt.makespan,
            b1 / mt.makespan,
            b2 / mt.makespan};
    for (const auto& s : mt.stages)
      row.peak_d = std::max(row.peak_d, s.peak_d);
    rows.push_back(row);
  }
  return rows;
}

std::string csv_line(const Row& r) {
  // Times to the microsecond, but in a step shorter than 1 ms to the nanosecond, as the
  // reports print them (a step of 22 us read 0.022 ms and its bound 0.002).
  const char* time = r.makespan_ms < 1 ? "%.6f" : "%.3f";
  return r.workload + "," + std::to_string(r.pp) + "," + std::to_string(r.mbs) + "," +
         std::to_string(r.tp) + "," + std::to_string(r.limit_flag) + "," + r.limit + "," +
         std::to_string(r.seed) + "," + r.run + "," + fmt(time, r.makespan_ms) + "," +
         fmt("%.3f", r.bubble) + "," + fmt("%.3f", r.efficiency) + "," + fmt(time, r.lb_ms) + "," +
         std::to_string(r.peak_d) + "," + fmt("%.3f", r.vs_1f1b_blocking) + "," +
         fmt("%.3f", r.vs_1f1b_async) + "," + fmt("%.3f", r.vs_zbh1) + "\n";
}

// The grid's points, counted before one is built: --seeds 2000000000 built every scenario
// at once and ended "out of memory" (exit 1). A million points at the least size (P = 1)
// take about 40 s and hold 2 GB of rows.
constexpr double kMaxGridPoints = 1e6;
// What a run costs beside its tasks (its work model, hint and rows), rounded up from 8 us
// measured at P = 1 on the reference VM: counted by its tasks alone, a grid of a million such
// points was announced as 10 s of work and took about 6 minutes.
constexpr double kRunSeconds = 10e-6;
// Bytes a run's results hold until the CSV is written: its Row and its CSV line.
constexpr double kRowBytes = 400;

double grid_points(const SweepFlags& f) {
  return static_cast<double>(f.workloads.size()) * static_cast<double>(f.pps.size()) *
         static_cast<double>(f.mb_factors.size()) * static_cast<double>(f.tps.size()) *
         static_cast<double>(f.limits.size()) * f.seeds;
}

// simulate's checks (check_fits, runs_size) over the grid: the largest point's heaviest run
// and every point's rows must fit in memory; the work of every run is announced on a terminal.
// The M x P^2 check alone let --pp 4096 --mb-factors 2 --tp 1024 start: it left out TP.
void check_sweep_fits(const SweepFlags& f, const std::vector<RunSpec>& specs) {
  const double points = grid_points(f);
  if (points > kMaxGridPoints)
    throw InputError(
        "sweep: the grid (--workloads x --pp x --mb-factors x --tp x --limits x "
        "--seeds) has " +
        fmt("%.0f", points) + " points; at most " + fmt("%.0f", kMaxGridPoints) +
        ": lower --seeds or shorten a list");
  const double per_shape =
      points / (static_cast<double>(f.pps.size()) * static_cast<double>(f.mb_factors.size()) *
                static_cast<double>(f.tps.size()));
  RunsSize worst;
  double work_seconds = 0;
  const TpProtocol protocol = parse_tp_protocol(f.tp_protocol);
  for (int p : f.pps)
    for (int fac : f.mb_factors)
      for (int tp : f.tps) {
        Scenario sc;
        sc.cfg.pp = p;
        sc.cfg.microbatches = fac * p;  // checked by check_sweep in a double
        sc.tp = tp;
        sc.tp_protocol = protocol;
        const RunsSize s = runs_size(sc, specs);
        worst.most = std::max(worst.most, s.most);
        worst.most_bytes = std::max(worst.most_bytes, s.most_bytes);
        work_seconds +=
            s.total * per_shape * protocol_cost(kSimulateCost, tp, sc.tp_protocol).seconds;
      }
  const double runs = points * static_cast<double>(specs.size());
  const double rows = runs * kRowBytes;
  const TaskCost cost{(worst.most_bytes + rows) / worst.most, kSimulateCost.seconds};
  const double seconds = work_seconds + runs * kRunSeconds;
  check_fits("sweep: " + fmt("%.0f", points) + (points == 1 ? " grid point" : " grid points") +
                 ", runs of up to " + task_count(worst.most) + " tasks",
             worst.most, cost, "--pp, --mb-factors, --tp or --seeds",
             seconds / (worst.most * kSimulateCost.seconds));
}

// Visits every grid point's scenario in the CSV's order, one built at a time, until `visit`
// returns false.
void for_each_point(const SweepFlags& f, const std::function<bool(const Scenario&)>& visit) {
  const TpProtocol proto = parse_tp_protocol(f.tp_protocol);
  for (const std::string& w : f.workloads) {
    const WorkloadParams load = workload_preset(w, "--workloads");
    for (int p : f.pps)
      for (int fac : f.mb_factors)
        for (int tp : f.tps)
          for (int lim : f.limits)
            for (int seed = 1; seed <= f.seeds; ++seed) {
              Scenario sc;
              sc.cfg.pp = p;
              sc.cfg.microbatches = fac * p;
              sc.tp = tp;
              sc.tp_protocol = proto;
              sc.workload_name = load.preset;  // one name per preset, as typed or not
              sc.workload = load;
              sc.seed = seed;
              sc.limit = lim;
              sc.record = false;
              if (!visit(sc)) return;
            }
  }
}

void run_sweep(const SweepFlags& f) {
  check_sweep(f);
  // A signal stops the grid after its current point: the CSV and the summary of the points
  // done are written, then the process exits 128 + the signal.
  const std::atomic<int>& stop = stop_on_signals();
  // The files asked for that an earlier run left: a stop's line says those were left.
  const std::vector<std::string> earlier = note_earlier_outputs({f.csv, f.md});
  acknowledge_stop_signals("sweep", "stopping after the current grid point");
  stop_at_once_until_work("sweep");  // until its first point is done
  const std::vector<RunSpec> specs = sweep_specs(f);
  check_sweep_fits(f, specs);
  const auto points = static_cast<size_t>(grid_points(f));
  std::vector<Row> rows;
  size_t done = 0;
  // Said by a thread of its own (docs/reliability.md): a point of minutes said nothing until
  // it ended.
  std::optional<ProgressTicker> ticker(
      std::in_place, "sweep: 0/" + std::to_string(points) + " grid points", !f.quiet);
  std::string csv =
      "workload,pp,microbatches,tp,limit_flag,limit,seed,run,makespan_ms,bubble_ratio,efficiency,"
      "lower_bound_ms,peak_d_max,speedup_vs_1f1b_blocking,speedup_vs_1f1b_async,speedup_vs_zb_h1\n";
  // A signal is heeded between points: a point's runs cannot stop midway (their lower bounds
  // are reckoned on threads of their own), and check_sweep_fits bounds each point's work.
  for_each_point(f, [&](const Scenario& sc) {
    if (stop.load() != 0) return false;
    for (const Row& r : point_rows(sc, specs, sc.limit)) {
      csv += csv_line(r);
      rows.push_back(r);
    }
    ++done;
    work_begins();
    ticker->status("sweep: " + std::to_string(done) + "/" + std::to_string(points) +
                   " grid points");
    return true;
  });
  ticker.reset();  // its line erased before the summary
  // A stopped grid's files say so by their names: under --csv's own, its rows read as a
  // smaller grid's (the last point's seeds cut short among them), and an average over the
  // file mixed seed sets. So a file under the name asked for is always a whole grid's.
  const int sig = stop.load();
  const std::string csv_path = sig == 0 ? f.csv : partial_name(f.csv);
  const std::string md_path = sig == 0 || f.md.empty() ? f.md : partial_name(f.md);
  WrittenOutputs written(!f.quiet);
  written.write("--csv", csv_path, [&] { write_text_file(csv_path, csv, "--csv"); });
  // The summary says so itself too: its geomeans are over the points done, which may leave
  // out whole workloads and sizes.
  const std::string partial = sig == 0 ? std::string()
                                       : "stopped by " + signal_name(sig) + " after " +
                                             std::to_string(done) + " of " +
                                             std::to_string(points) + " grid points";
  const std::string md =
      (sig == 0 ? ""
                : "**Partial: " + partial + "; this summary and the CSV hold those alone.**\n\n") +
      markdown(rows, f);
  written.write("--md", md_path, [&] { write_text_file(md_path, md, "--md"); });
  std::cout << md << "\n"
            << rows.size() << " runs" << (sig == 0 ? "" : " (" + partial + ")")
            << "; CSV: " << visible(csv_path) << (sig == 0 ? stale_partials(f.csv, f.md) : "")
            << "\n";
  if (sig != 0) {
    print_line("rrfp sweep: stopped by " + signal_name(sig) + "; " + visible(csv_path) +
               (md_path.empty() ? " holds" : " and " + visible(md_path) + " hold") + " the " +
               std::to_string(done) + " of " + std::to_string(points) +
               " grid points done before it" +
               (earlier.empty()       ? std::string()
                : earlier.size() == 1 ? " (" + earlier[0] + ", an earlier run's, is left as it was)"
                                      : " (" + earlier[0] + " and " + earlier[1] +
                                            ", an earlier run's, are left as they were)"));
    throw QuietExit{128 + sig};
  }
}

}  // namespace

void setup_sweep(CLI::App& app) {
  auto f = std::make_shared<SweepFlags>();
  CLI::App* sub = app.add_subcommand(
      "sweep", "grid of workloads x P x M x TP x limits x seeds: rrfp against fixed baselines");
  sub->add_option("--workloads", f->workloads, "workload presets")
      ->delimiter(',')
      ->capture_default_str();
  sub->add_option("--pp", f->pps, "pipeline sizes")->delimiter(',')->capture_default_str();
  sub->add_option("--mb-factors", f->mb_factors, "microbatches as multiples of P")
      ->delimiter(',')
      ->capture_default_str();
  sub->add_option("--tp", f->tps, "tensor-parallel sizes")->delimiter(',')->capture_default_str();
  sub->add_option("--limits", f->limits, "back-pressure limits (0: default)")
      ->delimiter(',')
      ->capture_default_str();
  sub->add_option("--hints", f->hints, "rrfp hints run under the ready policy")
      ->delimiter(',')
      ->capture_default_str();
  sub->add_option("--seeds", f->seeds, "seeds 1..N per grid point")->capture_default_str();
  sub->add_option("--tp-protocol", f->tp_protocol, "leader or agree")
      ->capture_default_str()
      ->each([f](const std::string&) { f->tp_protocol_given = true; });
  sub->add_option("--csv", f->csv,
                  "CSV of every run (a grid stopped by a signal writes NAME.partial.csv, and "
                  "--md's NAME.partial.md)")
      ->capture_default_str();
  sub->add_option("--md", f->md, "markdown summary file");
  sub->add_flag("--quiet", f->quiet, "no progress on stderr");
  sub->callback([f] {
    check_outputs({{f->csv, "--csv"}, {f->md, "--md"}});  // before the grid
    refuse_partial_names(f->csv, f->md);
    run_sweep(*f);
  });
}

}  // namespace rrfp
