// rrfp: readiness-first pipeline-parallel runtime. Exit codes: 0 ok, 1 a run failed
// (deadlock, collective mismatch, internal error), 2 bad input (one line on stderr).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "cli/options.hpp"
#include "cli/stdout_stream.hpp"
#include "cli/stop_signal.hpp"
#include "cli/train_flags.hpp"
#include "core/error.hpp"
#include "core/format.hpp"
#include "core/output_file.hpp"
#include "core/printable.hpp"

namespace rrfp {

namespace {

// The command the command line reached that still wants one of its own: `rrfp`, or `rrfp
// schedule` (show or check); null when every command given has what it needs.
CLI::App* wanting_command(CLI::App& app) {
  CLI::App* at = &app;
  while (!at->get_subcommands().empty())
    at = at->get_subcommands().back();
  return at->get_require_subcommand_min() > 0 ? at : nullptr;
}

// The word after the name of `at` (the program's, for the app) where it is no flag: the command
// mistyped; empty where none was given.
std::string given_command(CLI::App& app, CLI::App& at, int argc, char** argv) {
  char** const end = argv + argc;
  char** const own = &at == &app ? argv : std::find_if(argv + 1, end, [&](const char* word) {
    return at.get_name() == word;
  });
  const std::string given = own != end && own + 1 != end ? own[1] : "";
  return !given.empty() && given.front() != '-' ? given : std::string();
}

// What CLI11 says of a mistyped or missing command ("A subcommand is required"), in words that
// name it and the commands there are: `at` is the app or the command that wants one.
std::string no_command(CLI::App& app, CLI::App& at, int argc, char** argv) {
  const std::string path = &at == &app ? "" : at.get_name() + " ";
  std::string names;
  for (const CLI::App* sub : at.get_subcommands([](CLI::App*) { return true; }))
    names += (names.empty() ? "" : ", ") + path + sub->get_name();
  if (const std::string given = given_command(app, at, argc, argv); !given.empty())
    return "unknown command '" + path + printable(given, 40) + "' (commands: " + names + ")";
  return "a command is required (commands: " + names + "; rrfp " + path + "--help)";
}

// "rrfp" and the names of the commands down to `at`.
std::string command_path(const CLI::App& app, const CLI::App* at) {
  std::string path;
  for (; at != nullptr && at != &app; at = at->get_parent())
    path = " " + at->get_name() + path;
  return "rrfp" + path;
}

// Whether `s` converts as CLI11 converts a value of `type` (CLI11's own conversion).
bool converts(const std::string& s, const std::string& type) {
  int i = 0;
  unsigned u = 0;
  double d = 0;
  return type == "INT"     ? CLI::detail::lexical_cast(s, i)
         : type == "UINT"  ? CLI::detail::lexical_cast(s, u)
         : type == "FLOAT" ? CLI::detail::lexical_cast(s, d)
                           : false;
}

// The value of a list flag that did not convert: CLI11 names the values joined by ',', and
// "--limits 3 99999999999" was told "'3,99999999999' is not a whole number".
std::string first_unconverted(const CLI::Option* opt, const std::string& value,
                              const std::string& type) {
  if (opt == nullptr || opt->get_items_expected_max() <= 1) return value;
  for (std::size_t from = 0;;) {
    const std::size_t to = value.find(',', from);
    const std::string piece = value.substr(from, to - from);
    if (!converts(piece, type)) return piece;
    if (to == std::string::npos) return value;
    from = to + 1;
  }
}

// CLI11's "Could not convert: --pp = 1e3" as the option, the value and the type it takes (an
// int's overflow, "--save-every = 99999999999", said nothing of the range).
std::string not_converted(CLI::App& app, const std::string& what) {
  const std::string prefix = "Could not convert: ";
  const auto eq = what.find(" = ");
  if (what.rfind(prefix, 0) != 0 || eq == std::string::npos) return what;
  const std::string name = what.substr(prefix.size(), eq - prefix.size());
  std::string value = what.substr(eq + 3);
  // The deepest command given: `schedule show`'s flags are show's (schedule's had none of them,
  // and its help was named).
  const CLI::App* sub = &app;
  while (!sub->get_subcommands().empty())
    sub = sub->get_subcommands().back();
  const CLI::Option* opt = sub->get_option_no_throw(name);
  const std::string type = opt ? opt->get_type_name() : "";
  value = first_unconverted(opt, value, type);
  // The type's bound only where digits passed it: --tp's own range is 1 to 1024, which its
  // check says, and "abc" was told of 2147483647.
  const std::size_t sign = !value.empty() && (value[0] == '-' || value[0] == '+') ? 1 : 0;
  const bool digits =
      value.size() > sign && value.find_first_not_of("0123456789", sign) == std::string::npos;
  // Digits past the type's bound are a whole number out of range: "'1000000000000' is not a
  // whole number (at most 2147483647)" denied what it is.
  const bool negative = sign == 1 && value[0] == '-';
  const std::string wants =
      digits && type == "INT"    ? (negative ? "a whole number out of this flag's range"
                                             : "too large a whole number (at most 2147483647)")
      : digits && type == "UINT" ? (negative ? "not a whole number from 0"
                                             : "too large a whole number (at most 4294967295)")
      : type == "INT"            ? "not a whole number"
      : type == "UINT"           ? "not a whole number from 0"
      : type == "FLOAT"          ? "not a number"
                                 : "not a value of its type";
  return name + ": '" + printable(value, 40) + "' is " + wants + " (" + command_path(app, sub) +
         " --help says what it takes)";
}

// CLI11's "The following arguments were not expected: 2 --vpp" (the words in reverse) as the
// first word no flag took, named where it was given: a flag of no command there, one of the
// command given before the command's name, or a stray value (after `--`, or a negative number,
// a word is a value).
std::string not_expected(CLI::App& app, int argc, char** argv, const std::string& what) {
  const CLI::App* owner = nullptr;  // the command whose own words hold the first one left
  const CLI::App* last = &app;
  std::string word;
  for (const CLI::App* a = &app; a != nullptr;
       a = a->get_subcommands().empty() ? nullptr : a->get_subcommands().back()) {
    last = a;
    if (owner == nullptr && !a->remaining(false).empty()) {
      owner = a;
      word = a->remaining(false).front();
    }
  }
  if (owner == nullptr) return what;
  char** const end = argv + argc;
  char** const dashes =
      std::find_if(argv + 1, end, [](const char* w) { return w == std::string("--"); });
  // Left after `--` where it is found there: a flag given before `--` too (`--steps 2 --
  // --steps 3`) was taken, and the word left is the value after it.
  const bool after_dashes = dashes != end && std::find(dashes + 1, end, word) != end;
  char* number_end = nullptr;
  std::strtod(word.c_str(), &number_end);
  const bool number = !word.empty() && number_end == word.c_str() + word.size();
  const std::string command = command_path(app, owner);
  if (word.size() > 1 && word.front() == '-' && !number && !after_dashes) {
    const std::string flag = word.substr(0, word.find('='));
    if (owner != last && last->get_option_no_throw(flag) != nullptr)
      return printable(flag, 40) + ": a flag of " + command_path(app, last) +
             ", given before its name; give it after `" + last->get_name() + "`";
    return printable(flag, 40) + ": " + command + " has no such flag (" + command +
           " --help lists its flags)";
  }
  // After `--` CLI11 leaves the words to the program, though they follow the last command.
  const std::string taker = after_dashes ? command_path(app, last) : command;
  return "'" + printable(word, 40) + "': " + taker + " takes no such value (" + taker +
         " --help lists what it takes)";
}

// CLI11's "--pp: At Most 1 required but received 2" for a flag given twice, in words.
std::string given_twice(const std::string& what) {
  const std::string says = ": At Most 1 required but received ";
  const auto at = what.find(says);
  if (at == std::string::npos) return what;
  return what.substr(0, at) + ": given " + what.substr(at + says.size()) +
         " times; it takes one value, so give it once";
}

// `code`, once what went to standard output got there: a report into a full disk or a closed
// pipe is a failed run (exit 1, `failed` and the reason the first failed write gave), not a
// success with the output lost; so is help that could not be written (it exited 0).
int stdout_written(int code, const std::string& failed) {
  std::cout.flush();
  if (!stdout_failed() && std::cout && !std::ferror(stdout)) return code;
  const int err = stdout_errno();
  // A reader gone (`| head`) ends the command as SIGPIPE's default action does, quietly: the
  // signal is ignored (`trap '' PIPE`, a service manager) or taken as a stop request (train).
  if (err == EPIPE) return 128 + SIGPIPE;
  print_line("rrfp: " + failed + (err ? std::string(": ") + std::strerror(err) : std::string()));
  return 1;
}

// The words given, as CLI11 is to parse them (the last first), where it would drop a value
// before any check saw it: an option's empty value after '=' (`--data=`, a variable unset after
// the '='), which CLI11 takes for no value and the next word for it (`--data= --out o` trained
// on the folder o, or was refused as "'o': takes no such value"), is passed as `--data ''`, and
// its check names it; a flag's (`--per-stage=`, taken as on) is refused; a comma-separated
// value with an empty item (`sweep --hints bf,,bfw`, `--pp 2,`) is refused, where the grid ran
// without a word. Looked for command by command.
std::vector<std::string> words_to_parse(CLI::App& app, int argc, char** argv) {
  std::vector<std::string> words;
  CLI::App* at = &app;
  for (int i = 1; i < argc; ++i) {
    const std::string word = argv[i];
    words.push_back(word);
    if (const auto subs = at->get_subcommands([&](CLI::App* a) { return a->check_name(word); });
        !subs.empty()) {
      at = subs.front();
      continue;
    }
    if (word.rfind("--", 0) != 0) continue;
    const std::size_t eq = word.find('=');
    const CLI::Option* opt = at->get_option_no_throw(word.substr(0, eq));
    if (opt == nullptr) continue;
    if (eq + 1 == word.size()) {
      if (opt->get_type_name().empty())
        throw InputError(word.substr(0, eq) + ": '' names nothing; give the flag alone, or " +
                         "leave it out (an unset shell variable?)");
      words.back().pop_back();
      words.emplace_back();
      continue;
    }
    if (opt->get_delimiter() != ',') continue;
    const std::string value = eq != std::string::npos ? word.substr(eq + 1)
                              : i + 1 < argc          ? std::string(argv[i + 1])
                                                      : std::string();
    if (value.empty()) continue;  // '' is named by its own check
    if (value.find(",,") != std::string::npos || value.front() == ',' || value.back() == ',')
      throw InputError(word.substr(0, eq) + ": '" + printable(value, 60) +
                       "' holds an empty item; give the values comma-separated, each once");
  }
  std::reverse(words.begin(), words.end());
  return words;
}

// Set up once for either program, before any work: standard streams the caller closed held
// (core/output_file.hpp); a write past a file size limit (`ulimit -f`) fails with EFBIG, which
// every writer reports and cleans up after, where SIGXFSZ's default action killed the process
// without a word and left its temporary file.
void set_up_process() {
  hold_closed_standard_streams();
  std::signal(SIGXFSZ, SIG_IGN);
  watch_stdout();
}

}  // namespace

int cli_main(int argc, char** argv) {
  set_up_process();
  set_command_line(argc, argv);
  CLI::App app{"rrfp: pipeline-parallel training that treats the schedule as a hint"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "help for every subcommand");
  setup_train(app);
  setup_simulate(app);
  setup_run(app);
  setup_schedule(app);
  setup_sweep(app);
  setup_plan(app);
  setup_predict(app);
  setup_calibrate(app);
  read_numbers_in_decimal(app);
  try {
    std::vector<std::string> words = words_to_parse(app, argc, argv);
    app.name(argv[0]);  // the usage line's, as parse(argc, argv) takes it
    app.parse(words);
  } catch (const CLI::CallForHelp& e) {
    // A mistyped command before --help printed the help of the command above it, exit 0.
    if (CLI::App* at = wanting_command(app); at && !given_command(app, *at, argc, argv).empty()) {
      print_line("rrfp: error: " + no_command(app, *at, argc, argv));
      return 2;
    }
    return stdout_written(app.exit(e), "writing the help to standard output failed");
  } catch (const CLI::CallForAllHelp& e) {
    return stdout_written(app.exit(e), "writing the help to standard output failed");
  } catch (const QuietExit& e) {
    return e.code;
  } catch (const CLI::ParseError& e) {
    if (another_rank_of_mpirun()) {
      // mpirun aborts the job when its first process exits non-zero: had this one left at
      // once, rank 0 could be killed before its line was out, and the job said nothing. Rank
      // 0's exit ends this wait (mpirun stops the others); the bound covers a rank 0 that
      // is slow to start.
      std::this_thread::sleep_for(std::chrono::seconds(10));
      return 2;
    }
    if (CLI::App* at = wanting_command(app); at && e.get_name() == "RequiredError") {
      print_line("rrfp: error: " + no_command(app, *at, argc, argv));
      return 2;
    }
    const std::string name = e.get_name();
    print_line("rrfp: error: " + (name == "ConversionError"    ? not_converted(app, e.what())
                                  : name == "ArgumentMismatch" ? given_twice(e.what())
                                  : dynamic_cast<const CLI::ExtrasError*>(&e) != nullptr
                                      ? not_expected(app, argc, argv, e.what())
                                      : one_line(e.what())));
    return 2;
  } catch (const InputError& e) {
    // Before the job formed (a refusal inside it ends in QuietExit), every process checks the
    // same flags: rank 0 says it alone, as for a parse error.
    if (another_rank_of_mpirun()) {
      quiet_signals();
      std::this_thread::sleep_for(std::chrono::seconds(10));
      return 2;
    }
    print_input_error(e);
    return 2;
  } catch (const Error& e) {
    print_line("rrfp: run failed: " + as_flags(one_line(first_line(e.what()))));
    return 1;
  } catch (const std::bad_alloc&) {
    // What no estimate foresaw: one line, not an abort.
    print_line("rrfp: run failed: out of memory (an allocation failed); lower the run's size");
    return 1;
  } catch (const std::exception& e) {
    print_line("rrfp: internal error: " + one_line(first_line(e.what())));
    return 1;
  }
  return stdout_written(0, "run failed: writing standard output failed");
}

}  // namespace rrfp
