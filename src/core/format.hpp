#pragma once
// Numbers in messages and reports, formatted one way for every layer.
#include <csignal>
#include <cstdint>
#include <string>
#include <string_view>

namespace rrfp {

// While it lives, the C library reads and writes numbers on this thread in the "C" locale's
// form ("1.5", never "1,5"), whatever locale the process set: a Python user's
// locale.setlocale(LC_ALL, "de_DE.UTF-8") made the extension's SVG `width="1200,00"` and
// refused a replay CSV's "100.75". Cheap (a thread-local switch).
class ClassicNumbers {
 public:
  ClassicNumbers();
  ~ClassicNumbers();
  ClassicNumbers(const ClassicNumbers&) = delete;
  ClassicNumbers& operator=(const ClassicNumbers&) = delete;

 private:
  void* previous_;  // the thread's locale_t before
};

// printf-formats one number: fmt("%.2f", x), fmt("%g", x), in the "C" locale's form.
std::string fmt(const char* printf_format, double v);
// A value a message refuses, in as few digits as tell it apart from every other double (at
// least %g's six): "1000.0001", where %g's "1000" read as inside a range that ends at 1000.
std::string fmt_given(double v);
// "1.5 GiB", "12 KiB", "300 bytes": sizes in messages.
std::string format_bytes(std::uint64_t n);
// "45 s", "12 min", "3.5 h": a time's estimate in messages (seconds below 2 min, minutes below
// 2 h).
std::string format_duration(double seconds);
// An error's text up to its first line break, without trailing blanks. LibTorch's errors
// (c10::Error) and Gloo's carry their C++ stack frames after the message, 30 lines and more,
// where a message is one line; the message comes first in them, and in every error of ours,
// which are one line already.
std::string first_line(const std::string& what);
// `s` without the blanks around it (spaces, tabs and carriage returns).
std::string_view trim(std::string_view s);

// "SIGINT", "SIGTERM", ... or "signal N", for the line that says why the work stopped short;
// every command (train too) says a signal alike.
std::string signal_name(int sig);
// The signals a long command takes as a request to stop after its current piece of work
// (cli/stop_signal.hpp), in the order of its lines' columns; an MPI job that ends itself ignores
// them from then on (dist/mpi_world.cpp).
inline constexpr int kStopSignals[] = {SIGINT, SIGTERM, SIGUSR1, SIGHUP, SIGXCPU};
// Whether `s` ends with `suffix` (lowercase) in any case: "best.JSON" ends with ".json".
bool ends_with_ci(std::string_view s, std::string_view suffix);

}  // namespace rrfp
