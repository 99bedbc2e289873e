#include "dist/step_outcome.hpp"

#include <string>
#include <vector>

#include "runtime/errors.hpp"

namespace rrfp {

namespace {

enum Outcome { kCompleted = 0, kFailed = 1, kSilent = 2 };

// A task's error (here or a peer's, told) and a protocol error leave every process able to
// answer; a stall or a transport's error may mean a process is gone.
Outcome outcome_of(const std::exception_ptr& error) {
  if (!error) return kCompleted;
  try {
    std::rethrow_exception(error);
  } catch (const TaskError&) {
    return kFailed;
  } catch (const ProtocolError&) {
    return kFailed;
  } catch (...) {
    return kSilent;
  }
}

}  // namespace

void agree_on_step(Job& job, int step, std::exception_ptr& error) {
  const Outcome mine = outcome_of(error);
  if (mine == kSilent) return;
  std::vector<std::vector<double>> all;
  try {
    all = job.all_gather(std::vector<double>{static_cast<double>(mine)});
  } catch (...) {
    if (!error) error = std::current_exception();
    return;
  }
  if (error) return;  // this process's own account of the failure says more
  std::string where;
  int failed = 0;
  for (std::size_t r = 0; r < all.size(); ++r)
    if (all[r].empty() || all[r][0] != kCompleted)
      where += (failed++ ? ", " : "") + std::to_string(r);
  if (failed == 0) return;
  error = std::make_exception_ptr(PeerFailure(
      "step " + std::to_string(step) + " failed on job rank" + (failed > 1 ? "s " : " ") + where +
      " after this process had done its part: every process of the job drops the step, so that "
      "all keep the same weights"));
}

}  // namespace rrfp
