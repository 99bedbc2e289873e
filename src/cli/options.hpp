#pragma once
// Flags shared by the subcommands, bound to CLI11 with their defaults.
#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>
#include <utility>

#include "core/hint_shape.hpp"
#include "report/experiment.hpp"
#include "runtime/runtime.hpp"

namespace rrfp {

// Ends the program with `code` and no message: the other processes of an mpirun job when
// rank 0 has already printed the one line about bad input that they all hit.
struct QuietExit {
  int code;
};

// A library message with its options named as flags: `max_pending_w` -> --max-pending-w
// (core/error.hpp).
std::string as_flags(const std::string& message);
// One line on stderr in one write, newline added. Under mpirun a rank's stderr and stdout reach
// the terminal through separate pipes: a line written piece by piece (std::cerr writes at every
// <<) can be cut by the stdout between its pieces, as a report's table cut the "simulating ..."
// line in CI.
void print_line(const std::string& text);
// Bad input's one line on stderr, "rrfp: error: ..." with flags named.
void print_input_error(const std::exception& e);
// `path` as one word a shell reads back (quoted where it needs it), for a command printed to be
// pasted.
std::string shell_word(const std::string& path);

// For unsigned flags: CLI11 would wrap "-1" around to 2^64 - 1.
CLI::Validator not_negative();
// Every integer and float option of `app` and its subcommands, read as decimal digits: a
// leading 0 is not octal, and hexadecimal (0x10) is refused naming the flag; every text option
// refuses '' (it was taken as not given). Called once all are bound.
void read_numbers_in_decimal(CLI::App& app);
// A float from `lo` to `hi`: CLI::Range let "nan" through (no comparison with it fails), and
// the flag was then taken as not given.
CLI::Validator finite_range(double lo, double hi);
// A process of an mpirun job other than rank 0 that runs rank 0's command line (the same
// program context: mpirun's `a : b` form gives each its own): its parse error is rank 0's,
// which rank 0 says alone, as the job's other refusals are (it came once per process). A
// process of another context says its own. Only under mpirun, which sets the job's size too: a
// rank left in the environment otherwise hid every parse error behind a silent 10 s wait.
// Rank 0 also says a signal's "stopped by" line alone (stop_signal.hpp).
bool another_rank_of_mpirun();
// --timeout's range, 0 to a day (runtime's timeout_ms_of).
CLI::Validator timeout_range();
// --seed: digits only, at most 2^64 - 1 (CLI11 would clamp 2^64 to it silently).
CLI::Validator seed_value();
// A count written in digits from 0 to `max` (CLI11 clamped 10^20 to its type's largest and read
// 0x10 as 16); `name` is its help's type.
CLI::Validator whole_number(std::uint64_t max, const std::string& name = "a count");
// A whole number from `lo` to `hi`, refused in the words of the other number flags
// ("must be a whole number from 1 to 1000, got 0"), where CLI::Range said "Value 0 not in
// range 1 to 1000".
CLI::Validator whole_range(long long lo, long long hi);
// The most orders or nodes a search may be told to visit: past what a day's budget visits.
inline constexpr std::uint64_t kMaxCount = 1'000'000'000'000;

// The pipeline's shape: --pp --vpp --placement --microbatches --split-backward
// --ordered-forwards. The struct's values are the flags' defaults (each command sets its own
// before binding).
struct ShapeFlags {
  int pp = 8, vpp = 1, microbatches = 32;
  std::string placement = "loop";
  std::string split = "auto";
  // on or off; "auto" where a command replays a recorded step (simulate, run): the step's
  // own, off where it does not say.
  std::string ordered = "off";
  ShapeGiven given{};      // --pp, --vpp, --microbatches, --placement on the command line
  ShapeGiven from_file{};  // those a hint file's header gave instead (shape_from_file)
};

// How stages pick and move work: --hint --policy --limit --max-pending-w --comm --tp
// --tp-protocol, shared by simulate, run and train.
struct DispatchFlags {
  std::string hint, policy = "ready", comm = "async", tp_protocol = "leader";
  int limit = 0, max_pending_w = 0, tp = 1;
  bool comm_given = false;         // set after parsing: --comm was on the command line
  bool policy_given = false;       // --policy was on the command line
  bool tp_protocol_given = false;  // --tp-protocol was on the command line
};

// What durations a simulated or emulated step sees: --workload --workload-file --replay --seed.
struct WorkloadFlags {
  std::string workload = "multimodal";
  // Given on the command line: with --replay and one TP rank only a jitter preset applies
  // (make_scenario).
  bool workload_given = false;
  std::string workload_file, replay;
  std::uint64_t seed = 1;
  bool seed_given = false;  // with --replay it needs a draw to seed (make_scenario)
  TraceOptions trace;       // how --replay reads a trace: --trace-format --step --message-us
};

// {path, flag} pairs: files a command writes or reads, each with the flag that names it.
using NamedPaths = std::initializer_list<std::pair<const std::string&, const char*>>;
// Refuses (InputError) each named output that could not be written, before a command's work:
// an empty path (not asked for) passes, and "-" (stdout) for --json alone. Also refused: two
// outputs naming one file, and an output naming one of the command's `inputs` (a file that
// exists; an empty path passes).
void check_outputs(NamedPaths outputs, NamedPaths inputs = {});
// The outputs a command has written, for the error of one that fails after them: it named
// only the one that failed (`sweep --csv x.csv --md /dev/full` left x.csv written, unsaid).
class WrittenOutputs {
 public:
  // `progress`: a line while a file is written (off: a command's --quiet).
  explicit WrittenOutputs(bool progress = true) : progress_(progress) {}
  // Writes output `path` (named by `flag`; "" or "-" is not a file) through `write`; where it
  // fails, the error (InputError or Error alike) also names the files written before it, which
  // stay.
  void write(const char* flag, const std::string& path, const std::function<void()>& write);

 private:
  bool progress_;
  std::string written_;
};
// Whether `path` is standard output: '-', or what descriptor 1 has open (/dev/stdout,
// /dev/fd/1, the file stdout was sent to). A command whose --json is stdout prints its human
// lines to stderr, so that stdout is the JSON alone.
bool is_stdout(const std::string& path);
// `hint` where it names a file, else (a built-in hint's name) an empty string: an input for
// check_outputs.
const std::string& hint_file(const std::string& hint);
// Warns where `hint` names a built-in hint and a file of that name is here too: the built-in
// runs (the file was passed over without a word).
void warn_hint_name_shadows_file(const std::string& hint);
// Refuses (InputError) a hint file's output `--out` that --hint would not read back: a built-in
// hint's name (`1f1b` runs that hint, not the file). Any other name is read as a file.
void refuse_hint_name_out(const std::string& out);

void add_shape_flags(CLI::App* app, ShapeFlags& f);
// The shape the hint file `hint` names (none for a built-in hint) was written for, taken for
// each shape flag not given (core/hint_shape.hpp): `simulate --hint plan.txt` of a plan at pp 2
// was refused as "written for pp=2 but the run has pp=8", the default. Whether any was taken.
bool shape_from_hint_file(ShapeFlags& shape, const std::string& hint);
// The same of a file named as one (`schedule check FILE`), whatever its name.
bool shape_from_file(ShapeFlags& shape, const std::string& path);
// --ordered-forwards into `ordered`: on or off, and auto where `ordered` is "auto" when bound;
// `auto_help` says what auto takes.
void add_ordered_forwards_flag(CLI::App* app, std::string& ordered, const std::string& auto_help);
// `policies`: the help of --policy (train takes fixed or ready; simulate and run also both).
// Returns --comm, so the caller can tell whether it was given.
CLI::Option* add_dispatch_flags(CLI::App* app, DispatchFlags& f, const std::string& policies);
// The dispatch flags but --hint and --policy (`rrfp plan` has no hint): --limit
// --max-pending-w --comm --tp --tp-protocol. Returns --comm.
CLI::Option* add_execution_flags(CLI::App* app, DispatchFlags& f);
// --trace-format --step --message-us: how a trace is read (--replay, rrfp predict).
void add_trace_flags(CLI::App* app, TraceOptions& t);
void add_workload_flags(CLI::App* app, WorkloadFlags& f);
// --timeout SECONDS, the watchdog of run and train.
void add_timeout_flag(CLI::App* app, double& seconds);
// --transport, parsed into `kind` as it is read (an unknown name is refused naming `allowed`).
CLI::Option* add_transport_flag(CLI::App* app, TransportKind& kind,
                                const std::vector<TransportKind>& allowed, const std::string& help);

// --idle-spin-us: RuntimeOptions::idle_spin_us.
void add_idle_spin_flag(CLI::App* app, int& us);

// The shape, validated, with the split backward resolved for `hint` (auto: on for the hints that
// need it and hint files written with it).
PipelineConfig to_config(const ShapeFlags& f, const std::string& hint = "");
// The runtime's options from the dispatch flags (a single policy) and --timeout.
RuntimeOptions to_runtime(const DispatchFlags& f, double timeout_s);
// --limit or --max-pending-w with --policy fixed: refused, as the fixed policy's list alone
// decides what a stage holds (they were taken and ignored).
void refuse_fixed_limit(const DispatchFlags& f);
// Refuses a --tp-protocol given at --tp 1: one rank a stage has nothing to coordinate with, so
// the flag was taken and ignored. `tps`: every --tp a command runs (sweep's grid).
void refuse_unused_tp_protocol(const DispatchFlags& f);
void refuse_unused_tp_protocol(bool given, const std::vector<int>& tps);
// For commands whose TP groups must choose together (sweep, predict): `protocol` leader or
// agree, else InputError naming --tp-protocol (plan refuses `none` alone, saying why).
void require_coordination(const std::string& protocol);
// --max-pending-w where the backward is not split (`split`: as resolved for every run of the
// command): refused on the same principle, as there are no W tasks to cap.
// `auto_rule`: when auto splits it, for the message.
void refuse_unsplit_w_cap(
    const DispatchFlags& f, const ShapeFlags& shape, bool split,
    const std::string& auto_rule = "for zb-*, bfw, adaptive and a hint file written with it");
WorkloadParams load_workload(const WorkloadFlags& f);

void setup_simulate(CLI::App& app);
void setup_run(CLI::App& app);
void setup_train(CLI::App& app);
void setup_schedule(CLI::App& app);
void setup_sweep(CLI::App& app);
void setup_plan(CLI::App& app);
void setup_predict(CLI::App& app);
void setup_calibrate(CLI::App& app);
// The whole command line: every subcommand, the exit codes (cli/cli_main.cpp); `rrfp` and
// `rrfp-train` are both this.
int cli_main(int argc, char** argv);

}  // namespace rrfp
