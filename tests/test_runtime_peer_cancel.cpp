// A step cancelled in one process (Runtime::cancel: a Python user's Ctrl-C to that process
// alone, or its pipeline closed from another thread mid-step) fails in every other process at
// once with a PeerCancelled naming it: an Error, as the cancel is there. It was told as a stall,
// so the peers of a process interrupted alone raised TimeoutError, though nothing timed out.
// Each endpoint is a Runtime of its own, as the processes of an mpirun job have them. Runs
// under the sanitizers.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>

#include "dist/local_job.hpp"
#include "dist/step_merge.hpp"
#include "rank_threads.hpp"
#include "runtime/errors.hpp"
#include "runtime_helpers.hpp"

namespace rrfp::test {
namespace {

TEST(PeerCancel, ACancelIsToldAsACancelNotAStallAndNobodyWaitsForTheCancelledProcess) {
  PipelineConfig c;
  c.pp = 3;
  c.microbatches = 4;
  const WorkModel m(c);
  const RealizedWork w = random_work(m, 1, 5, 200, 400);
  RuntimeOptions o = runtime_options(m, w, Policy::Ready);
  o.timeout_ms = 60'000;  // a failure not told: a StallError after a minute
  auto jobs = make_local_jobs(3);
  const Hint h = make_hint("bf", m);
  std::vector<std::exception_ptr> errors(3);
  std::vector<std::atomic<Runtime*>> runtimes(3);
  const auto t0 = std::chrono::steady_clock::now();
  on_every_rank(3, [&](int i) {
    jobs[i]->set_layout(JobLayout{3, 1, 1});
    auto base = emulated_programs(m, w);
    const ProgramFactory programs = [&](int s, int r) -> std::unique_ptr<StageProgram> {
      if (s != 1) return base(s, r);
      // Stage 1's process is interrupted as its forward of m1 starts (a Ctrl-C to it alone).
      return std::make_unique<HookBefore>(base(s, r), TaskId{Kind::F, 1, 1}, [&runtimes] {
        runtimes[1].load()->cancel(std::make_exception_ptr(Error("interrupted")));
      });
    };
    Runtime rt(m, h, programs, o, jobs[i]->hosting());
    runtimes[i].store(&rt);
    StepResult result;
    try {
      result = rt.run_step(0);
    } catch (...) {
      errors[i] = std::current_exception();
    }
    // As Python's step ends: a process cancelled or told of a cancel takes no part (it may be
    // gone); had the cancel been told as a task's failure, the others would wait here.
    finish_step_over_job(*jobs[i], 0, result, errors[i], {});
    jobs[i]->all_gather({});  // nobody tears down its endpoint while another may still send
  });
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(30));
  ASSERT_TRUE(errors[1]);
  try {
    std::rethrow_exception(errors[1]);
  } catch (const std::exception& e) {
    EXPECT_STREQ(e.what(), "interrupted");
  }
  for (int e : {0, 2}) {
    ASSERT_TRUE(errors[e]) << "endpoint " << e << " completed a step another process cancelled";
    try {
      std::rethrow_exception(errors[e]);
    } catch (const PeerCancelled& x) {
      EXPECT_NE(std::string(x.what()).find("stage 1 failed step 0: interrupted"), std::string::npos)
          << x.what();
    } catch (const std::exception& x) {
      ADD_FAILURE() << "endpoint " << e << ": not a PeerCancelled: " << x.what();
    }
  }
}

}  // namespace
}  // namespace rrfp::test
