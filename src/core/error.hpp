#pragma once
// Typed errors. Every message is one line that names the option, file, line, stage or task at
// fault, so a front end can print it and exit 2 (bad input) or 1 (run failure).
//
// An option is named in backticks by its one name, the field's ("`limit`: must be at least 1,
// got -1"); each front end shows it its own way: the CLI as its flag (--limit, with dashes for
// underscores: cli/options.hpp), Python as the keyword argument. The library never names a flag.
#include <stdexcept>
#include <string>

namespace rrfp {

// A NUL byte of the input quoted in a message, as the text \x00: what() is a C string, so a
// NUL cut every message short there, in the CLI and in Python alike ("c.csv:2: column
// send_us: '0.0" lost "is not a number"). Other bytes are made visible where the message is
// printed (core/printable.hpp: one_line).
inline std::string without_nul(std::string what) {
  for (size_t at = what.find('\0'); at != std::string::npos; at = what.find('\0', at + 4))
    what.replace(at, 1, "\\x00");
  return what;
}

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(without_nul(what)) {}
  explicit Error(const char* what) : std::runtime_error(what) {}
};

// The user asked for something malformed or impossible (a flag, a file, a value).
class InputError : public Error {
 public:
  using Error::Error;
};

// A hint that cannot be executed as given (missing task, impossible order, deadlock).
class HintError : public InputError {
 public:
  using InputError::InputError;
};

// A run that could not make progress; the message lists what each stage waits for.
class DeadlockError : public Error {
 public:
  using Error::Error;
};

// A message or protocol step that fits no state it could be in: an input arriving twice, an
// acknowledgement without an offer, a proposal from a rank outside the group, a wrong size.
class ProtocolError : public Error {
 public:
  using Error::Error;
};

// Tensor-parallel ranks of one group entered different collectives.
class CollectiveMismatchError : public Error {
 public:
  using Error::Error;
};

// A thread the machine would not give (a thread or memory limit: std::system_error, or
// std::bad_alloc for its state), in one wording wherever it happens: "could not start WHICH
// (WHY): this machine's thread or memory limit".
inline Error thread_refused(const std::string& which, const std::string& why) {
  return Error("could not start " + which + " (" + why +
               "): this machine's thread or memory limit");
}

}  // namespace rrfp
