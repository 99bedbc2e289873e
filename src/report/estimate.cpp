#include "report/estimate.hpp"

#include <unistd.h>

#include <cstdio>

#include "core/format.hpp"
#include "core/memory.hpp"
#include "core/output_file.hpp"
#include "core/progress_line.hpp"

namespace rrfp {

std::string checked_estimate(const std::string& what, double tasks, const TaskCost& cost,
                             const std::string& lower, double evaluations) {
  const double bytes = tasks * cost.bytes, seconds = tasks * cost.seconds * evaluations;
  const std::string work = " and " + format_duration(seconds) + " of work";
  check_memory(bytes, what, work, lower);
  // A log or a pipe gets it only for work long enough to send progress lines there too
  // (core/progress_line.hpp): a short run writes nothing beside its errors.
  const bool tty = is_terminal(STDERR_FILENO);
  if (tty ? bytes > 1e9 || seconds > 10
          : seconds * 1e9 > static_cast<double>(ProgressLog::kEveryNs))
    return "rrfp: " + what + ": about " + gigabytes(bytes) + " of memory" + work + " (estimated)";
  return {};
}

void say_estimate(const std::string& line) {
  if (line.empty()) return;
  std::fprintf(stderr, "%s\n", line.c_str());
  std::fflush(stderr);
}

void check_fits(const std::string& what, double tasks, const TaskCost& cost,
                const std::string& lower, double evaluations) {
  say_estimate(checked_estimate(what, tasks, cost, lower, evaluations));
}

}  // namespace rrfp
