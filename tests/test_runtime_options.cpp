// The runtime's options and shape refused as it is built, naming the option, before any step
// or barrier between processes.
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <utility>

#include "core/error.hpp"
#include "expect_error.hpp"
#include "runtime/tp_group.hpp"
#include "runtime_helpers.hpp"

namespace rrfp::test {
namespace {

// A stage split over processes takes its collective from `make_group`: none ran the group's
// all-reduces as no-ops and one of another size told the programs another tp_size, and the
// step went on with partial sums. A timeout past a day overflowed the watchdog's nanoseconds,
// which then failed the step at its first look.
TEST(RuntimeOptionsRefused, AGroupNoneOrOfAnotherSizeABrokenListAndATimeoutPastADay) {
  PipelineConfig c;
  c.pp = 1;
  c.microbatches = 2;
  const WorkModel m(c);
  const Hint h = make_hint("1f1b", m);
  const RealizedWork w = realize(WorkloadParams{}, m, 2, 1);
  RuntimeOptions o;
  o.tp = 2;
  const auto built = [&](std::function<std::unique_ptr<TpCollective>(int)> group) {
    Hosting host;
    host.local = {0};  // tp rank 0 of stage 0; rank 1 lives elsewhere
    host.transports.push_back(std::move(make_inproc_transports(2)[0]));
    host.make_group = std::move(group);
    Runtime rt(m, h, emulated_programs(m, w), o, std::move(host));
  };
  EXPECT_ERROR(built([](int) { return std::unique_ptr<TpCollective>(); }), Error,
               "runtime: `make_group` gave stage 0 no group; its `tp` is 2");
  EXPECT_ERROR(built([](int s) { return std::make_unique<TpGroup>(s, 1); }), Error,
               "runtime: `make_group` gave stage 0 a group of 1 ranks; its `tp` is 2");
  o.tp = 1;
  // A list hint not holding a stage's tasks once: refused as the runtime is built, not at its
  // first step's arbiters, after the barrier between processes.
  Hint edited = make_hint("1f1b", m);
  std::get<ListHint>(edited.body).stages[0].pop_back();
  const RealizedWork one = realize(WorkloadParams{}, m, 1, 1);
  EXPECT_ERROR(Runtime(m, edited, emulated_programs(m, one), o), HintError,
               "hint '1f1b': stage 0: task B c0 m1 is missing");
  o.timeout_ms = 10'000'000'000'000;
  EXPECT_ERROR(Runtime(m, h, emulated_programs(m, one), o), InputError,
               "`timeout`: must be between 0 and 86400000 ms (a day), got");
}

// P x T endpoints past an int, each within its own bound: counted in int it wrapped, to a
// negative world refused as "world size must be at least 1" (here) or, at P = 4194305, to 1024,
// and the constructor crashed indexing past its table. Refused, naming both.
TEST(RuntimeOptionsRefused, EndpointsPastAnInt) {
  const WorkModel m(shape(2'097'153, 1));
  const Hint h = make_hint("bf", m);
  RuntimeOptions o;
  o.tp = 1024;
  EXPECT_ERROR(Runtime(
                   m, h, [](int, int) { return std::unique_ptr<StageProgram>(); }, o),
               InputError, "`pp` x `tp`: 2097153 x 1024 = 2147484672 endpoints, past 2147483647");
}

// Whether emulated_programs and emulated_latency take a model W and a work R (a plain type: a
// temporary).
template <class W, class R>
concept Emulates = requires(W&& wm, R&& rw) {
  emulated_programs(std::forward<W>(wm), std::forward<R>(rw));
  emulated_latency(std::forward<W>(wm), std::forward<R>(rw));
};

// An empty program factory is named (it threw a bare "bad_function_call" at the first stage),
// and the emulated programs and latency refuse a temporary work or model at compile time: they
// keep a reference to it, and a step of a freed work ran 2-5 ms of 425, exit 0.
TEST(RuntimeOptionsRefused, AnEmptyFactoryAndEmulationOfATemporary) {
  const WorkModel m(shape(1, 2));
  const Hint h = make_hint("1f1b", m);
  EXPECT_ERROR(Runtime(m, h, ProgramFactory{}, RuntimeOptions{}), InputError,
               "runtime: `programs` is empty: give a program factory");
  static_assert(!Emulates<const WorkModel&, RealizedWork>);  // a temporary work
  static_assert(!Emulates<WorkModel, const RealizedWork&>);  // a temporary model
  static_assert(Emulates<const WorkModel&, const RealizedWork&>);
}

}  // namespace
}  // namespace rrfp::test
