// The number flags' checks (cli/options.hpp): decimal digits only, each value in its range,
// named by its flag, while parsing, so that every process of an mpirun job refuses alike.
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "cli/options.hpp"
#include "core/error.hpp"
#include "core/format.hpp"
#include "core/printable.hpp"
#include "runtime/runtime.hpp"

namespace rrfp {

CLI::Validator not_negative() {
  return CLI::Validator(
      [](std::string& s) {
        return s.find('-') != std::string::npos ? "must not be negative, got " + printable(s, 30)
                                                : std::string();
      },
      "", "not negative");
}

CLI::Validator finite_range(double lo, double hi) {
  const std::string range = "[" + fmt("%g", lo) + ", " + fmt("%g", hi) + "]";
  return CLI::Validator(
      [lo, hi, range](std::string& s) {
        char* end = nullptr;
        const double v = std::strtod(s.c_str(), &end);
        if (s.empty() || end != s.c_str() + s.size() || !(v >= lo && v <= hi))
          return "must be a number in " + range + ", got " + printable(s, 30);
        return std::string();
      },
      "FLOAT in " + range, "a number in " + range);
}

// Digits only, up to `max`: CLI11 alone turned 2^64 into 2^64-1 without a word, and read hex.
CLI::Validator whole_number(std::uint64_t max, const std::string& name) {
  return CLI::Validator(
      [max](std::string& s) {
        if (s.find('-') != std::string::npos)
          return "must not be negative, got " + printable(s, 30);
        std::uint64_t v = 0;
        const auto [end, err] = std::from_chars(s.data(), s.data() + s.size(), v);
        if (s.empty() || err != std::errc() || end != s.data() + s.size() || v > max)
          return "must be a whole number from 0 to " + std::to_string(max) + ", got " +
                 printable(s, 30);
        return std::string();
      },
      "", name);
}

CLI::Validator whole_range(long long lo, long long hi) {
  const std::string range = std::to_string(lo) + " to " + std::to_string(hi);
  return CLI::Validator(
      [lo, hi, range](std::string& s) {
        long long v = 0;
        const auto [end, err] = std::from_chars(s.data(), s.data() + s.size(), v);
        if (s.empty() || err != std::errc() || end != s.data() + s.size() || v < lo || v > hi)
          return "must be a whole number from " + range + ", got " + printable(s, 30);
        return std::string();
      },
      "INT in [" + std::to_string(lo) + " - " + std::to_string(hi) + "]",
      "a whole number from " + range);
}

namespace {

// A number option's value as decimal: CLI11 converts integers with base 0, so a leading 0 read
// octal ("-m 010" ran M = 8, "08" was refused) and 0x hexadecimal, as its float conversion
// does too ("--budget 0x10" was 16 s). Digits lose their leading zeros; a hexadecimal value, a
// blank or a '+' (the conversion skipped those before the digits and refused them after), and
// a number past a double's range (1e-400 read as 0, which turned --clip and --timeout off) are
// refused as not `noun` ("a whole number"); anything else is left to the conversion and the
// checks, which refuse it in their words. `command` ("rrfp simulate") names the help that gives
// the option's range.
CLI::Validator decimal_digits(const std::string& command, const std::string& noun, bool real) {
  return CLI::Validator(
      [command, noun, real](std::string& s) {
        const std::string help = command + " --help says what it takes";
        // CLI11 converts '' to 0: `--save-every ""` saved nothing, `--timeout ""` turned the
        // watchdog off, both exit 0.
        if (s.find_first_not_of(" \t\n\v\f\r") == std::string::npos)
          return "'" + s + "' is not " + noun + " (" + help + ")";
        if (s.find_first_of(" \t\n\v\f\r") != std::string::npos || s[0] == '+')
          return "'" + printable(s, 30) + "' is not " + noun + " (blanks and a '+' are not read; " +
                 help + ")";
        const std::size_t digits = s[0] == '-' ? 1 : 0;
        const std::string_view rest = std::string_view(s).substr(digits);
        if (rest.size() >= 2 && rest[0] == '0' && (rest[1] == 'x' || rest[1] == 'X'))
          return "'" + printable(s, 30) + "' is not " + noun +
                 " in decimal digits (hexadecimal is not read; " + help + ")";
        if (rest.empty() || rest.find_first_not_of("0123456789") != std::string_view::npos) {
          errno = 0;
          char* end = nullptr;
          const double v = std::strtod(s.c_str(), &end);
          // A subnormal number is read with ERANGE too, and kept: only 0 and infinity lose it.
          if (real && errno == ERANGE && end == s.c_str() + s.size() && (v == 0 || std::isinf(v)))
            return "'" + printable(s, 30) + "' is past a double's range, where it reads as 0 " +
                   "or infinity (" + help + ")";
          return std::string();
        }
        const std::size_t zeros = std::min(rest.find_first_not_of('0'), rest.size() - 1);
        s = (digits ? "-" : "") + std::string(rest.substr(zeros));
        return std::string();
      },
      "", "decimal");
}

// A text option given '' names nothing: every one is a file, a folder or a name from a list.
// Taken as not given, `--replay "$TRACE"` with the variable unset simulated the default
// workload, and `--json ""` wrote nothing, both exit 0.
CLI::Validator not_empty(const std::string& command) {
  return CLI::Validator(
      [command](std::string& s) {
        return s.empty() ? "'' names nothing; give a value (`" + command +
                               " --help` says what it takes; an unset shell variable?)"
                         : std::string();
      },
      "", "not empty");
}

void read_in_decimal(CLI::App& app, const std::string& command) {
  for (CLI::Option* opt : app.get_options()) {
    const std::string type = opt->get_type_name();
    const std::string base = type.substr(0, type.find(':'));
    if (base == "INT" || base == "UINT")
      opt->transform(decimal_digits(command, "a whole number", false));
    else if (base == "FLOAT")
      opt->transform(decimal_digits(command, "a number", true));
    else if (base == "TEXT")
      opt->check(not_empty(command));
  }
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; }))
    read_in_decimal(*sub, command + " " + sub->get_name());
}

}  // namespace

void read_numbers_in_decimal(CLI::App& app) {
  read_in_decimal(app, "rrfp");
}

CLI::Validator seed_value() {
  return whole_number(std::numeric_limits<std::uint64_t>::max(), "a 64-bit seed");
}

CLI::Validator timeout_range() {
  // Checked while parsing, as every other flag's range: found later, it was refused by every
  // process of an mpirun job, one line each. In timeout_ms_of's words.
  return CLI::Validator(
      [](std::string& s) {
        char* end = nullptr;
        const double v = std::strtod(s.c_str(), &end);
        if (s.empty() || end != s.c_str() + s.size())
          return "must be a number of seconds, got " + printable(s, 30);
        try {
          timeout_ms_of(v, "");
        } catch (const InputError& e) {
          const std::string what = e.what();
          return what.substr(what.find("must"));
        }
        return std::string();
      },
      "", "seconds in [0, 86400]");  // the help's line stays "--timeout FLOAT=60"
}

}  // namespace rrfp
