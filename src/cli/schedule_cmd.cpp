// `rrfp schedule show`: a hint as an ASCII pipeline diagram (unit costs, no communication).
// `rrfp schedule check FILE`: validate a hint file against a pipeline shape, under async and
// blocking transfers.

#include <algorithm>
#include <iostream>
#include <utility>
#include <vector>

#include "cli/options.hpp"
#include "cli/stop_signal.hpp"
#include "core/error.hpp"
#include "core/format.hpp"
#include "core/hint_io.hpp"
#include "core/hint_shape.hpp"
#include "core/memory.hpp"
#include "core/printable.hpp"
#include "report/estimate.hpp"
#include "sim/hint_check.hpp"
#include "sim/simulator.hpp"

namespace rrfp {

namespace {

struct ScheduleFlags {
  ShapeFlags shape;
  std::string hint = "1f1b";
  std::string out;
  std::string file;
  // What a run too large to fit should lower: the flags, or the file's header where the shape
  // is its (it named --pp and --microbatches, flags not given).
  std::string lower = "--pp or --microbatches";
};

// A task's cell: kind and microbatch, and its local chunk as a letter (a number after a dot
// past 26 chunks a stage: the letters came round again, chunk 26 drawn as chunk 0).
std::string cell(const TaskId& t, const WorkModel& m) {
  std::string s(1, kind_char(t.kind));
  s += std::to_string(t.mb);
  if (m.vpp() > 26)
    s += "." + std::to_string(m.local_chunk(t.chunk));
  else if (m.vpp() > 1)
    s += static_cast<char>('a' + m.local_chunk(t.chunk));
  return s;
}

// What a model of shape `c` and its run at unit cost hold, in tasks of kScheduleCost: its tasks,
// and each stage's own state as so many tasks.
double held_tasks(const PipelineConfig& c) {
  return simulated_bytes(c, 1, kScheduleCost.bytes) / kScheduleCost.bytes;
}

// A diagram of `cells` cells, each about 40 bytes (its string and its text), beside the run.
std::string diagram_need(double tasks, double cells) {
  return "schedule show: " + fmt("%.1fM", tasks / 1e6) + " tasks and " + fmt("%.1fM", cells / 1e6) +
         " diagram cells";
}

// Grid rows of a run at unit cost (unit_cost_work), checked beforehand for `estimated` cells
// against the memory `had` before the command began.
std::string render(const WorkModel& m, const Hint& hint, double estimated,
                   const MemorySnapshot& had, const std::string& lower) {
  const RealizedWork work = unit_cost_work(m);
  SimOptions opt;
  opt.arbiter.policy = hint.is_list() ? Policy::Fixed : Policy::Ready;
  StepRecord r = simulate(m, hint, work, opt);
  const std::int64_t unit = 1000;
  const int cols = static_cast<int>(r.makespan / unit);
  // Sized again at the diagram's real width: a list may leave most stages idle most of the time
  // (a serial order at P=M=200 drew 16M cells, not the 0.2M its shape gives: 754 MB), against
  // what there was before the run: what it holds by now is no longer available, and asking for
  // the whole again counted it twice (P=1, M=5M under `ulimit -v` 3.2 GB was refused after its
  // run, having taken 1.1 GB of the 1.7 GB it needs).
  const double cells = static_cast<double>(m.pp()) * cols;
  if (cells > estimated)
    check_memory((held_tasks(m.config()) + cells / 4) * kScheduleCost.bytes, had,
                 diagram_need(static_cast<double>(r.tasks.size()), cells), "", lower);
  std::vector<std::vector<std::string>> grid(m.pp(), std::vector<std::string>(cols, "."));
  size_t width = 1;
  for (const auto& t : r.tasks) {
    const std::string c = cell(t.task, m);
    width = std::max(width, c.size());
    for (std::int64_t x = t.start / unit; x < t.compute_end / unit && x < cols; ++x)
      grid[t.stage][x] = c;
  }
  std::string out;
  const std::size_t digits = std::to_string(m.pp() - 1).size();  // rows aligned past stage 99
  for (int s = 0; s < m.pp(); ++s) {
    const std::string n = std::to_string(s);
    out += "stage " + n + std::string(digits - n.size() + 1, ' ') + "|";
    for (const auto& c : grid[s])
      out += " " + c + std::string(width - c.size(), ' ');
    out += "\n";
  }
  out += "\n" + std::to_string(cols) + " time units (F = B" + (m.split() ? " = W" : "") +
         " = 1, no communication); '.' = idle" +
         (m.vpp() > 26  ? "; .n = local chunk n"
          : m.vpp() > 1 ? "; letter = local chunk"
                        : "") +
         "; policy " + to_string(opt.arbiter.policy) + "; peak D per stage:";
  for (int d : r.peak_d)
    out += " " + std::to_string(d);
  return out + "\n";
}

void show(const ScheduleFlags& f) {
  exit_on_signals("schedule show");  // a signal while --out was written left it half written
  // Before the diagram: a bad --out printed the whole diagram, then exited 2.
  refuse_hint_name_out(f.out);
  warn_hint_name_shadows_file(f.hint);
  check_outputs({{f.out, "--out"}}, {{hint_file(f.hint), "--hint"}});
  // Sized before the model is built, and again once the run gives the diagram's width. The
  // diagram holds a cell a stage and time unit: at least each stage's tasks and the pipeline's
  // fill and drain, 2(P - 1) units, wide (--pp 20000 -m 1, 40K tasks, took all memory on its
  // 800M cells).
  const MemorySnapshot had = memory_snapshot();
  const PipelineConfig c = to_config(f.shape, f.hint);
  const double tasks = tasks_of(c, 1);
  if (!hint_file(f.hint).empty()) check_hint_file_holds(f.hint, c, "hint");
  const double cells = c.pp * (tasks / c.pp + 2.0 * (c.pp - 1));
  check_fits(diagram_need(tasks, cells), held_tasks(c) + cells / 4, kScheduleCost, f.lower);
  WorkModel m(c);
  Hint h = make_hint(f.hint, m);
  if (!f.out.empty() && !h.is_list())
    throw InputError("--out: '" + f.hint + "' is a rule hint, it has no task list");
  const std::string diagram = render(m, h, cells, had, f.lower);
  // The diagram on stdout is an output too: a signal while a slow reader took it cut it short
  // and said "nothing written".
  write_then_heed_signals([&] {
    std::cout << "hint " << visible(h.name) << ": P=" << m.pp() << " V=" << m.vpp()
              << " M=" << m.microbatches() << (m.split() ? " split backward" : "") << "\n\n"
              << diagram << std::flush;
    if (f.out.empty()) return;
    const bool json = hint_path_is_json(f.out);
    write_text_file(f.out, json ? write_hint_json(h.list(), m) : write_hint_text(h.list(), m),
                    "--out");
  });
  if (!f.out.empty()) std::cout << "wrote " << visible(f.out) << "\n";
}

// The shape a hint file says it was written for, taken for each shape flag not given
// (core/hint_shape.hpp).
void take_file_shape(const std::string& path, ShapeFlags& shape, std::string& lower) {
  const bool from_file = shape_from_file(shape, path);
  const ShapeGiven& given = shape.given;
  // Named so where the file alone gave the shape: a --pp given still names the flags.
  if (from_file && !given[0] && !given[1] && !given[2])
    lower = "the shape, which '" + printable(path, 100) +
            "' was written for (a hint of fewer stages or microbatches)";
}

void check(const ScheduleFlags& f) {
  // Before the model is built (a header's or a flag's --pp 50000000 built 50M stages first:
  // 4.4 GB, then the header's mismatch).
  const PipelineConfig c = to_config(f.shape, f.file);
  check_hint_file_holds(f.file, c, "FILE");
  check_fits("schedule check: " + fmt("%.1fM", tasks_of(c, 1) / 1e6) + " tasks", held_tasks(c),
             kScheduleCost, f.lower);
  WorkModel m(c);  // auto: split as the file declares, as simulate reads it
  Hint h;
  h.name = "file:" + f.file;
  h.body = read_hint_file(f.file, m, "FILE");  // async: dependencies and list order
  // Blocking: the rendezvous, which a valid order can still deadlock (sim/hint_check.hpp).
  const std::string stuck = fixed_blocking_deadlock(m, h);
  const auto peaks = fixed_order_peaks(h.list(), m);
  std::cout << "ok: " << visible(f.file) << " is a valid hint for P=" << m.pp() << " V=" << m.vpp()
            << " (" << to_string(m.config().placement) << ") M=" << m.microbatches()
            << (m.split() ? " (split backward)" : "")
            << (stuck.empty() ? " under async and blocking transfers" : " under async transfers")
            << "; " << m.tasks_per_stage() << " tasks per stage; fixed-order peak D per stage:";
  for (int p : peaks)
    std::cout << " " << p;
  std::cout << "\n";
  if (!stuck.empty())
    std::cout << "deadlocks under --comm blocking with --policy fixed (receives posted one at a "
                 "time in list order; simulate, run, train and rrfp.Pipeline refuse it): "
              << stuck << "\n";
}

}  // namespace

void setup_schedule(CLI::App& app) {
  CLI::App* sch = app.add_subcommand("schedule", "show or check pipeline hints");
  sch->require_subcommand(1);
  auto f = std::make_shared<ScheduleFlags>();
  f->shape.pp = 4;
  f->shape.microbatches = 8;
  CLI::App* sh = sch->add_subcommand("show", "draw a hint as a pipeline diagram");
  add_shape_flags(sh, f->shape);
  sh->add_option("--hint", f->hint,
                 "one of: " + hint_names_listed() +
                     "; or a hint file, whose shape stands for any shape flag "
                     "not given")
      ->capture_default_str();
  sh->add_option("--out", f->out,
                 "also write the hint's task list (JSON for a name ending .json, else text)");
  // A hint file's shape stands for the flags not given, as under check: the file show --out
  // had just written was refused as written for pp=2 where the run had the default pp=4.
  sh->callback([f] {
    if (!hint_file(f->hint).empty()) take_file_shape(f->hint, f->shape, f->lower);
    show(*f);
  });

  auto g = std::make_shared<ScheduleFlags>();
  g->shape.pp = 4;
  g->shape.microbatches = 8;
  CLI::App* ck = sch->add_subcommand("check", "validate a hint file (text or JSON)");
  add_shape_flags(ck, g->shape);
  ck->add_option("FILE", g->file,
                 "hint file; the shape it was written for stands for any shape flag not given")
      ->required();
  ck->callback([g] {
    take_file_shape(g->file, g->shape, g->lower);
    check(*g);
  });
}

}  // namespace rrfp
