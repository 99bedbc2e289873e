#include "cli/options.hpp"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>

#include "core/error.hpp"
#include "core/format.hpp"
#include "core/hint.hpp"
#include "core/mpirun_env.hpp"
#include "core/printable.hpp"
#include "core/progress_line.hpp"
#include "runtime/runtime.hpp"

namespace rrfp {

std::string as_flags(const std::string& message) {
  std::string out;
  out.reserve(message.size() + 16);
  for (size_t i = 0; i < message.size(); ++i) {
    const size_t close = message[i] == '`' ? message.find('`', i + 1) : std::string::npos;
    if (close == std::string::npos) {
      out += message[i];
      continue;
    }
    std::string name = message.substr(i + 1, close - i - 1);
    // Backticks name an option (lowercase: `pp` is --pp) or a command's argument (uppercase:
    // `TRACE`, as the help names it, bare); anything else in them stays as it is.
    if (!name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
          return std::isupper(static_cast<unsigned char>(c)) || c == '_';
        })) {
      out += name;
      i = close;
      continue;
    }
    const bool option = !name.empty() && std::islower(static_cast<unsigned char>(name[0])) &&
                        std::all_of(name.begin(), name.end(), [](char c) {
                          return std::islower(static_cast<unsigned char>(c)) ||
                                 std::isdigit(static_cast<unsigned char>(c)) || c == '_';
                        });
    if (!option) {
      out += message[i];
      continue;
    }
    std::replace(name.begin(), name.end(), '_', '-');
    out += "--" + name;
    i = close;
  }
  return out;
}

void print_line(const std::string& text) {
  clear_progress_line_on_stderr();  // a line of work under way, drawn on a terminal
  const std::string line = text + "\n";
  std::cerr.write(line.data(), static_cast<std::streamsize>(line.size()));
  std::cerr.flush();
}

// `path` as one word a shell reads back: as it is when it holds only characters no shell
// treats specially, else in single quotes (`plan --out 'my plan.txt'` printed a command that
// named two files), and where it holds a control byte or a byte of no UTF-8 character in
// bash's $'...', each such byte as \xNN (escaped inside single quotes, it named another file).
std::string shell_word(const std::string& path) {
  const bool plain = !path.empty() && std::all_of(path.begin(), path.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || std::strchr("_./:=+,@%-", c) != nullptr;
  });
  if (plain) return path;
  if (visible(path) != path) {  // a control byte or a byte of no character: bash's $'...'
    std::string quoted = "$'";
    for (const char c : path) {
      const auto b = static_cast<unsigned char>(c);
      static constexpr char kHex[] = "0123456789abcdef";
      quoted += c == '\'' || c == '\\'  ? std::string("\\") + c
                : b < 0x20 || b >= 0x7f ? std::string{'\\', 'x', kHex[b >> 4], kHex[b & 15]}
                                        : std::string(1, c);
    }
    return quoted + "'";
  }
  std::string quoted = "'";
  for (const char c : path)
    quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

void print_input_error(const std::exception& e) {
  print_line("rrfp: error: " + as_flags(one_line(e.what())));
}

void add_shape_flags(CLI::App* app, ShapeFlags& f) {
  auto given = [&f](std::size_t i) { return [&f, i](const std::string&) { f.given[i] = true; }; };
  app->add_option("--pp", f.pp, "pipeline stages P")->each(given(0))->capture_default_str();
  app->add_option("--vpp", f.vpp, "model chunks per stage V")
      ->each(given(1))
      ->capture_default_str();
  app->add_option("--placement", f.placement, "chunk placement: loop or vshape")
      ->each(given(3))
      ->capture_default_str();
  app->add_option("--microbatches,-m", f.microbatches, "microbatches per step M")
      ->each(given(2))
      ->capture_default_str();
  app->add_option("--split-backward", f.split,
                  "split backward into B (input grad) and W (weight grad): auto (on for zb-*, bfw, "
                  "adaptive and a hint file written with it; `plan` follows its --replay), on, "
                  "off (a replay's W then adds to its B)")
      ->capture_default_str();
  add_ordered_forwards_flag(app, f.ordered,
                            "a --replay of rrfp's own trace takes its step's, else off");
}

bool shape_from_hint_file(ShapeFlags& shape, const std::string& hint) {
  return !hint_file(hint).empty() && shape_from_file(shape, hint);
}

bool shape_from_file(ShapeFlags& shape, const std::string& path) {
  HintShape s{shape.pp, shape.vpp, shape.microbatches, shape.placement};
  const bool from_file = take_hint_file_shape(path, s, shape.given, "--vpp", &shape.from_file);
  shape.pp = s.pp;
  shape.vpp = s.vpp;
  shape.microbatches = s.microbatches;
  shape.placement = s.placement;
  return from_file;
}

void add_ordered_forwards_flag(CLI::App* app, std::string& ordered, const std::string& auto_help) {
  const bool with_auto = ordered == "auto";
  app->add_option("--ordered-forwards", ordered,
                  "on: each chunk's forwards run in microbatch order, as for a model whose "
                  "forward updates state (batch norm's running statistics); off" +
                      (with_auto ? "; auto: " + auto_help : std::string()))
      ->check(with_auto ? CLI::IsMember({"auto", "on", "off"}) : CLI::IsMember({"on", "off"}))
      ->capture_default_str();
}

CLI::Option* add_dispatch_flags(CLI::App* app, DispatchFlags& f, const std::string& policies) {
  app->add_option("--hint", f.hint,
                  "a hint name (see `rrfp schedule show --help`) or a hint file, whose shape "
                  "stands for any shape flag not given")
      ->capture_default_str();
  app->add_option("--policy", f.policy, policies)
      ->each([&f](const std::string&) { f.policy_given = true; })
      ->capture_default_str();
  return add_execution_flags(app, f);
}

CLI::Option* add_execution_flags(CLI::App* app, DispatchFlags& f) {
  app->add_option("--limit", f.limit,
                  "back-pressure limit on F done - B done under the ready policy (0: the hint's "
                  "default; plan: a rule hint's); with V >= 2 a microbatch draining through its "
                  "chunks may pass it by V");
  app->add_option("--max-pending-w", f.max_pending_w,
                  "cap on deferred W tasks, whose inputs a stage holds until they run (0: P)");
  auto* comm =
      app->add_option("--comm", f.comm, "async or blocking (rendezvous)")->capture_default_str();
  app->add_option("--tp", f.tp, "tensor-parallel ranks per stage T")->capture_default_str();
  app->add_option("--tp-protocol", f.tp_protocol,
                  "TP coordination of the ready runs: leader, agree, or none (each rank picks "
                  "alone: a demonstration, whose step fails where the picks part over tasks "
                  "that meet their group: F and B, and in simulate and run a W, whose meeting "
                  "takes no time; train's W calls no collective); with --tp 2 or more (a fixed "
                  "list's ranks each follow it)")
      ->each([&f](const std::string&) { f.tp_protocol_given = true; })
      ->capture_default_str();
  return comm;
}

void add_trace_flags(CLI::App* app, TraceOptions& t) {
  app->add_option("--trace-format", t.format, "the trace's mapping (docs/twin.md)")
      ->check(CLI::IsMember(trace_formats()))
      ->capture_default_str();
  app->add_option(
         "--step", t.step,
         "the trace's step to replay (ProfilerStep#N, iteration N, or rrfp's step N from 0: "
         "its runs in order, and in a folder each run's steps as its files make them; "
         "simulate --replay: also a CSV's step column; default: a trace's first complete one, "
         "the same for every run of the table; a CSV's last)")
      ->check(not_negative());
  app->add_option("--message-us", t.message_us,
                  "the latency of every message the trace does not time (us; default: seen "
                  "from when the consumers started; a CSV without send_us: 0)")
      ->check(finite_range(0.0, kMaxTaskUs));
}

void add_workload_flags(CLI::App* app, WorkloadFlags& f) {
  app->add_option(
         "--workload", f.workload,
         "preset: uniform, language, multimodal, jitter:J0..J3, straggler, paper-comm, paper "
         "(with --replay: a jitter preset, on top of the measured durations)")
      ->capture_default_str()
      ->each([&f](const std::string&) { f.workload_given = true; });
  app->add_option("--workload-file", f.workload_file, "JSON overriding any workload parameter");
  auto* replay = app->add_option(
      "--replay", f.replay,
      "measured durations: a CSV (stage,chunk,microbatch,kind,duration_us[,tp_rank][,send_us]) "
      "or a Chrome trace (.json, .json.gz, or a directory of one per rank) from rrfp's --trace, "
      "the PyTorch profiler or Megatron-LM's timers (docs/twin.md)");
  add_trace_flags(app, f.trace);
  // How to read a replayed trace: alone, they were taken and ignored.
  for (const char* flag : {"--trace-format", "--step", "--message-us"})
    app->get_option(flag)->needs(replay);
  app->add_option("--seed", f.seed, "seed of every random duration")
      ->check(seed_value())
      ->capture_default_str()
      ->each([&f](const std::string&) { f.seed_given = true; });
}

CLI::Option* add_transport_flag(CLI::App* app, TransportKind& kind,
                                const std::vector<TransportKind>& allowed,
                                const std::string& help) {
  return app
      ->add_option_function<std::string>(
          "--transport",
          [&kind, allowed](const std::string& s) { kind = parse_transport(s, allowed); }, help)
      ->default_str(to_string(kind));
}

bool another_rank_of_mpirun() {
  const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
  const char* context = std::getenv("OMPI_MCA_orte_app_num");
  return launched_by_mpirun() && rank != nullptr && std::strcmp(rank, "0") != 0 &&
         (context == nullptr || std::strcmp(context, "0") == 0);
}

void add_timeout_flag(CLI::App* app, double& seconds) {
  app->add_option("--timeout", seconds,
                  "watchdog: seconds without progress before the step fails (0: never)")
      ->capture_default_str()
      ->check(timeout_range());
}

void add_idle_spin_flag(CLI::App* app, int& us) {
  app->add_option("--idle-spin-us", us,
                  "an idle rank spins this long, polling its transport, before it sleeps (an "
                  "arrival then skips the transport thread's hand-off; takes a core per rank)")
      ->check(whole_number(10'000, "microseconds from 0 to 10000"))
      ->capture_default_str();
}

PipelineConfig to_config(const ShapeFlags& f, const std::string& hint) {
  PipelineConfig c = make_config(f.pp, f.vpp, f.microbatches, f.placement, f.split, hint);
  c.ordered_forwards = f.ordered == "on";
  return c;
}

void refuse_fixed_limit(const DispatchFlags& f) {
  if (f.policy != "fixed") return;
  if (f.limit > 0)
    throw InputError(
        "--limit: bounds the ready policy's activations; --policy fixed runs the "
        "hint's order, which alone decides them (got --limit " +
        std::to_string(f.limit) + ")");
  if (f.max_pending_w > 0)
    throw InputError(
        "--max-pending-w: caps the ready policy's deferred W tasks; --policy fixed "
        "runs the hint's order, which alone decides them (got --max-pending-w " +
        std::to_string(f.max_pending_w) + ")");
}

void refuse_unsplit_w_cap(const DispatchFlags& f, const ShapeFlags& shape, bool split,
                          const std::string& auto_rule) {
  if (f.max_pending_w <= 0 || split) return;
  throw InputError(
      "--max-pending-w: caps the deferred W tasks of a split backward; --split-backward " +
      shape.split + " keeps the backward whole here" +
      (shape.split == "auto" ? " (it splits it " + auto_rule + ")" : "") +
      ", so there are none (got --max-pending-w " + std::to_string(f.max_pending_w) + ")");
}

void refuse_unused_tp_protocol(const DispatchFlags& f) {
  refuse_unused_tp_protocol(f.tp_protocol_given, {f.tp});
}

void refuse_unused_tp_protocol(bool given, const std::vector<int>& tps) {
  if (!given || std::any_of(tps.begin(), tps.end(), [](int t) { return t != 1; })) return;
  throw InputError(
      "--tp-protocol: how the tensor-parallel ranks of a stage coordinate; at --tp 1 "
      "a stage has one rank and nothing to coordinate (give --tp 2 or more, or leave "
      "--tp-protocol out)");
}

void require_coordination(const std::string& protocol) {
  if (protocol != "leader" && protocol != "agree")
    throw InputError("--tp-protocol: expected leader or agree, got '" + printable(protocol, 30) +
                     "'");
}

RuntimeOptions to_runtime(const DispatchFlags& f, double timeout_s) {
  refuse_fixed_limit(f);
  refuse_unused_tp_protocol(f);
  RuntimeOptions o;
  o.arbiter.policy = parse_policy(f.policy);
  o.arbiter.limit = f.limit;
  o.arbiter.max_pending_w = f.max_pending_w;
  o.comm = parse_comm(f.comm);
  o.tp = f.tp;
  o.tp_protocol = parse_tp_protocol(f.tp_protocol);
  o.timeout_ms = timeout_ms_of(timeout_s);
  validate(o);
  return o;
}

WorkloadParams load_workload(const WorkloadFlags& f) {
  if (!f.workload_file.empty())
    return read_workload_file(f.workload_file, f.workload, f.workload_given);
  return workload_preset(f.workload);
}

const std::string& hint_file(const std::string& hint) {
  static const std::string none;
  return is_hint_name(hint) ? none : hint;
}

void warn_hint_name_shadows_file(const std::string& hint) {
  std::error_code ec;
  // A file (or a link to one): a folder of the name (an output folder, say) is no hint.
  if (hint_file(hint).empty() && std::filesystem::is_regular_file(hint, ec))
    print_line("rrfp: warning: --hint " + hint + " runs the built-in hint, not the file '" + hint +
               "' here (give ./" + hint + " to run the file)");
}

void refuse_hint_name_out(const std::string& out) {
  if (out.empty() || !hint_file(out).empty()) return;
  throw InputError("--out: '" + out + "' is a built-in hint's name, which --hint runs instead of " +
                   "the file; give another name (./" + out + ", " + out + ".txt or " + out +
                   ".json)");
}

}  // namespace rrfp
