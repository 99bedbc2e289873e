#include "core/format.hpp"

#include <locale.h>

#include <cctype>
#include <csignal>
#include <cstdio>
#include <cstdlib>

namespace rrfp {

namespace {

locale_t classic_locale() {
  static const locale_t c = ::newlocale(LC_ALL_MASK, "C", nullptr);
  return c;
}

}  // namespace

// uselocale(0) changes nothing, should newlocale have failed.
ClassicNumbers::ClassicNumbers() : previous_(::uselocale(classic_locale())) {}

ClassicNumbers::~ClassicNumbers() {
  ::uselocale(static_cast<locale_t>(previous_));
}

std::string fmt(const char* f, double v) {
  const ClassicNumbers classic;
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string fmt_given(double v) {
  const ClassicNumbers classic;
  char buf[64];
  for (int digits = 6; digits < 17; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, v);
    if (std::strtod(buf, nullptr) == v) return buf;  // NaN never equals: 17 digits below
  }
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

std::string format_duration(double s) {
  if (s < 120) return fmt("%.0f s", s);
  if (s < 7200) return fmt("%.0f min", s / 60);
  return fmt("%.1f h", s / 3600);
}

std::string format_bytes(std::uint64_t n) {
  const ClassicNumbers classic;
  char buf[48];
  if (n < 1024) {
    std::snprintf(buf, sizeof buf, "%llu bytes", static_cast<unsigned long long>(n));
  } else {
    const char* unit[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
    double v = static_cast<double>(n) / 1024;
    int u = 0;
    while (v >= 1024 && u < 4) {
      v /= 1024;
      ++u;
    }
    std::snprintf(buf, sizeof buf, v < 10 ? "%.1f %s" : "%.0f %s", v, unit[u]);
  }
  return buf;
}

std::string first_line(const std::string& what) {
  std::string s = what.substr(0, what.find('\n'));
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back())))
    s.pop_back();
  return s;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r'))
    s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

bool ends_with_ci(std::string_view s, std::string_view suffix) {
  if (s.size() < suffix.size()) return false;
  for (std::size_t i = 0; i < suffix.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(s[s.size() - suffix.size() + i])) != suffix[i])
      return false;
  return true;
}

std::string signal_name(int sig) {
  if (sig == SIGINT) return "SIGINT";
  if (sig == SIGTERM) return "SIGTERM";
  if (sig == SIGUSR1) return "SIGUSR1";
  if (sig == SIGHUP) return "SIGHUP";
  if (sig == SIGXCPU) return "SIGXCPU (its CPU time limit)";
  if (sig == SIGPIPE) return "SIGPIPE (a pipe it wrote to closed)";
  return "signal " + std::to_string(sig);
}

}  // namespace rrfp
