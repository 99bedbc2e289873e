// The threaded runtime executes exactly the simulator's task set with every dependency
// respected, for every hint and policy, on random shapes (P <= 8, TP <= 2) with random
// emulated delays; `fixed` follows its list exactly; back-pressure holds; steps repeat.
#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <cstdlib>
#include <set>
#include <tuple>

#include "core/error.hpp"
#include "expect_error.hpp"
#include "runtime_helpers.hpp"
#include "seeds.hpp"
#include "shapes.hpp"
#include "sim/check.hpp"

namespace rrfp::test {
namespace {

std::set<std::tuple<int, int, int>> task_set(const WorkModel& m, const std::vector<TaskRecord>& t) {
  std::set<std::tuple<int, int, int>> s;
  for (const TaskRecord& r : t)
    s.insert({r.stage, r.rank, m.index(r.task)});
  return s;
}

class RuntimeInvariants : public ::testing::TestWithParam<std::string> {};

TEST_P(RuntimeInvariants, SameTasksAsTheSimulatorInDependencyOrder) {
  const std::string name = GetParam();
  const bool list = !is_rule_hint_name(name);
  int runs = 0;
  for (int seed = 0; seed < runtime_seeds(); ++seed) {
    Shape sh = random_shape(name, seed);
    // Shorter steps than the simulator's tests: each task really sleeps.
    if (sh.cfg.microbatches > 16)
      sh.cfg.microbatches =
          name == "interleaved-1f1b" ? sh.cfg.pp * std::max(1, 16 / sh.cfg.pp) : 16;
    WorkModel m(sh.cfg);
    Hint hint = make_hint(name, m);
    const RealizedWork work = random_work(m, sh.tp, seed);
    for (Policy policy : {Policy::Fixed, Policy::Ready}) {
      if (policy == Policy::Fixed && !list) continue;
      // Fixed ZB-V deadlocks under the rendezvous, and is refused (FixedBlockingCheck).
      if (policy == Policy::Fixed && name == "zb-v" && sh.comm == CommMode::Blocking) continue;
      const std::string ctx =
          name + " " + to_string(policy) + " seed=" + std::to_string(seed) +
          " P=" + std::to_string(sh.cfg.pp) + " M=" + std::to_string(sh.cfg.microbatches) +
          " V=" + std::to_string(sh.cfg.vpp) + " TP=" + std::to_string(sh.tp) + " " +
          to_string(sh.protocol) + " " + to_string(sh.comm) + " limit=" + std::to_string(sh.limit) +
          " idle_spin=" + std::to_string(seed % 2 ? 50 : 0);
      RuntimeOptions ro = runtime_options(m, work, policy, sh.protocol);
      ro.arbiter.limit = sh.limit;
      ro.comm = sh.comm;
      // Every other seed, idle ranks spin before they sleep: the same tasks in the same order.
      ro.idle_spin_us = seed % 2 ? 50 : 0;
      // Output buffers mapped ahead for d_bound() outputs of each kind: the step maps none,
      // whatever its timing. Sizes from 1 B to 1 MiB, so that requests span several sizes
      // and may take larger buffers (up to 4x).
      RealizedWork sized = work;
      for (int i = 0; i < sized.num_tasks; ++i)
        sized.message_bytes[i] = static_cast<std::int64_t>(1 + hash_keys(seed, 4, i) % (1 << 20));
      EmulationOptions eo;
      eo.outputs_in_flight = d_bound(resolve_options(ro.arbiter, hint, m), hint, m);
      StepResult r;
      try {
        Runtime rt(m, hint, emulated_programs(m, sized, eo), ro);
        r = rt.run_step(0);
      } catch (const Error& e) {
        FAIL() << ctx << ": " << e.what();
      }
      ASSERT_EQ(r.fresh_buffers, 0)
          << ctx << ": outputs mapped ahead for " << eo.outputs_in_flight << " of each kind";
      ++runs;
      CheckOptions co;
      co.policy = policy;
      co.limit = r.run.arbiter.limit;
      co.max_pending_w = m.split() ? r.run.arbiter.max_pending_w : 0;
      const auto bad = check_run(m, sh.tp, r.run.tasks, co);
      ASSERT_TRUE(bad.empty()) << ctx << ": " << bad.front();
      // Each message's measured time (its consumer's arrival minus its end) is at least the
      // emulated latency; outputs no other stage takes have none.
      for (const TaskRecord& t : r.run.tasks) {
        Deps c{};
        const int n = m.consumers(t.task, c);
        bool crosses = false;
        for (int i = 0; i < n; ++i)
          crosses |= c[i].cross_stage;
        const std::int64_t lat = work.message(t.rank, m.index(t.task));
        if (crosses)
          ASSERT_GE(t.send_ns, lat) << ctx << " " << to_string(t.task);
        else
          ASSERT_EQ(t.send_ns, -1) << ctx << " " << to_string(t.task);
      }

      SimOptions so;
      so.arbiter = ro.arbiter;
      so.tp_protocol = sh.protocol;
      so.comm = sh.comm;
      const StepRecord sim = simulate(m, hint, work, so);
      ASSERT_EQ(task_set(m, r.run.tasks), task_set(m, sim.tasks)) << ctx;
      ASSERT_EQ(r.run.tasks.size(), static_cast<size_t>(sh.tp) * m.num_tasks()) << ctx;

      const auto ord = orders(r.run.tasks);
      for (const auto& [where, seq] : ord) {
        if (policy == Policy::Fixed) {
          ASSERT_EQ(seq, hint.list().stages[where.first]) << ctx << " stage " << where.first;
        }
        // Every rank of a tensor-parallel group ran the same sequence.
        ASSERT_EQ(seq, ord.at({where.first, 0})) << ctx << " stage " << where.first;
      }
      if (policy == Policy::Ready && sh.cfg.vpp == 1) {
        for (int d : r.run.peak_d)
          ASSERT_LE(d, r.run.arbiter.limit) << ctx;
      }
    }
  }
  EXPECT_GE(runs, runtime_seeds());
}

INSTANTIATE_TEST_SUITE_P(AllHints, RuntimeInvariants, ::testing::ValuesIn(hint_names()),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n)
                             if (c == '-') c = '_';
                           return n;
                         });

// Counts hook calls and checks that payloads arrive with the producer's bytes.
class CountingProgram final : public StageProgram {
 public:
  CountingProgram(std::atomic<int>& begins, std::atomic<int>& ends) : b_(begins), e_(ends) {}
  void begin_step(int) override { ++b_; }
  void end_step(int) override { ++e_; }
  Payload forward(TaskContext& ctx, int chunk, int mb, Payload in) override {
    if (chunk > 0) check(in, chunk - 1, mb);
    return stamp(ctx, chunk, mb);
  }
  Payload backward(TaskContext& ctx, int chunk, int mb, Payload in) override {
    if (!in.empty()) check(in, chunk + 1, mb);
    return stamp(ctx, chunk, mb);
  }

 private:
  static Payload stamp(TaskContext& ctx, int chunk, int mb) {
    const int v[3] = {ctx.step(), chunk, mb};
    return Payload::copy_of(std::as_bytes(std::span<const int>(v)));
  }
  static void check(const Payload& p, int chunk, int mb) {
    const int* v = reinterpret_cast<const int*>(p.data());
    if (p.size() != 3 * sizeof(int) || v[1] != chunk || v[2] != mb)
      throw std::runtime_error("payload routed to the wrong task");
  }
  std::atomic<int>& b_;
  std::atomic<int>& e_;
};

// Only 0 turns the watchdog off: a positive timeout under half a millisecond rounded to 0 ms
// and a job with a stopped rank hung (--timeout 0.0001, Pipeline(timeout=0.0001)); rounded up
// to 1 ms, a stall named a `timeout` of 0.001 s the user never gave. Refused below 1 ms.
TEST(Runtime, APositiveTimeoutIsAtLeastOneMillisecond) {
  EXPECT_EQ(timeout_ms_of(0), 0);
  EXPECT_EQ(timeout_ms_of(0.001), 1);
  EXPECT_EQ(timeout_ms_of(0.0016), 2);
  const std::string under =
      "`timeout`: must be 0 (no limit) or at least 0.001 seconds (the "
      "watchdog counts milliseconds), got ";
  EXPECT_ERROR(timeout_ms_of(1e-9), InputError, under + "1e-09");
  EXPECT_ERROR(timeout_ms_of(0.0004), InputError, under + "0.0004");
  EXPECT_ERROR(timeout_ms_of(0.000999), InputError, under + "0.000999");
  EXPECT_EQ(timeout_ms_of(120), 120'000);
  EXPECT_ERROR(timeout_ms_of(-0.001), InputError,
               "`timeout`: must be between 0 and 86400 seconds, got -0.001");
  EXPECT_ERROR(timeout_ms_of(86'401), InputError,
               "`timeout`: must be between 0 and 86400 seconds, got 86401");
}

TEST(Runtime, RunsSeveralStepsAndRoutesPayloadsToTheirTasks) {
  PipelineConfig c;
  c.pp = 4;
  c.vpp = 2;
  c.microbatches = 8;
  WorkModel m(c);
  Hint h = make_hint("bf", m);
  std::atomic<int> begins{0}, ends{0};
  RuntimeOptions ro;
  ro.tp = 2;
  Runtime rt(
      m, h, [&](int, int) { return std::make_unique<CountingProgram>(begins, ends); }, ro);
  for (int step = 0; step < 3; ++step) {
    const StepResult r = rt.run_step(step);
    EXPECT_EQ(r.run.tasks.size(), 2u * m.num_tasks());
  }
  EXPECT_EQ(begins.load(), 3 * 4 * 2);
  EXPECT_EQ(ends.load(), 3 * 4 * 2);
}

// A front end's progress within a long step: each task sees the tasks ended before it, of the
// step's total, and the step's end all of them (rrfp train shows it once a step runs long).
TEST(Runtime, StepProgressCountsTheTasksEndedHere) {
  const WorkModel m(shape(1, 4));
  const Hint h = make_hint("bf", m);
  Runtime* runtime = nullptr;
  std::vector<Runtime::StepProgress> seen;
  struct Seeing final : StageProgram {
    Runtime*& rt;
    std::vector<Runtime::StepProgress>& seen;
    Seeing(Runtime*& r, std::vector<Runtime::StepProgress>& s) : rt(r), seen(s) {}
    Payload forward(TaskContext&, int, int, Payload) override {
      seen.push_back(rt->step_progress());
      return {};
    }
    Payload backward(TaskContext&, int, int, Payload) override {
      seen.push_back(rt->step_progress());
      return {};
    }
  };
  Runtime rt(m, h, [&](int, int) { return std::make_unique<Seeing>(runtime, seen); }, {});
  runtime = &rt;
  for (int step = 0; step < 2; ++step) {
    seen.clear();
    rt.run_step(step);
    ASSERT_EQ(seen.size(), 8u);
    for (std::size_t k = 0; k < seen.size(); ++k) {
      EXPECT_EQ(seen[k].ended, static_cast<std::int64_t>(k)) << "step " << step;
      EXPECT_EQ(seen[k].total, 8);
    }
    EXPECT_EQ(rt.step_progress().ended, 8);
  }
}

// The emulated program tells the runtime each microbatch's size before the step; every forward
// of stage 0 is ready from the start, so adaptive runs them in entry_ranks order.
TEST(Runtime, AdaptiveLetsMicrobatchesEnterInEntryRankOrder) {
  WorkModel m(shape(3, 6, 1, true));
  Hint h = make_hint("adaptive", m);
  for (int seed = 0; seed < 3; ++seed) {
    const RealizedWork w = random_work(m, 1, seed);
    Runtime rt(m, h, emulated_programs(m, w), runtime_options(m, w, Policy::Ready));
    const StepResult r = rt.run_step(0);
    std::vector<std::int64_t> size;
    for (int mb = 0; mb < m.microbatches(); ++mb)
      size.push_back(microbatch_size(m, w, mb));
    const std::vector<int> rank = entry_ranks(size);
    std::vector<TaskId> want(m.microbatches()), got;
    for (int mb = 0; mb < m.microbatches(); ++mb)
      want[rank[mb]] = {Kind::F, 0, mb};
    const auto ord = orders(r.run.tasks);  // kept: a range-for over ord.at() of a temporary dangles
    for (const TaskId& t : ord.at({0, 0}))
      if (t.kind == Kind::F) got.push_back(t);
    EXPECT_EQ(got, want) << "seed " << seed;
    EXPECT_NE(want.front().mb, 0) << "seed " << seed << ": a weak case, the sizes sort as mbs";
  }
}

// Each step reports the payload buffers mapped afresh since the previous one: the first step of
// a new runtime maps its outputs' buffers, and over the steps the reports add up to what the
// pools mapped, none counted twice or lost.
TEST(Runtime, StepsReportTheBuffersTheyMapped) {
  WorkModel m(shape(3, 6));
  Hint h = make_hint("1f1b", m);
  for (int seed = 0; seed < 3; ++seed) {
    RealizedWork w = random_work(m, 1, seed);
    std::fill(w.message_bytes.begin(), w.message_bytes.end(), std::int64_t{1} << 20);
    const std::uint64_t before = BufferPool::fresh_total();
    Runtime rt(m, h, emulated_programs(m, w), runtime_options(m, w, Policy::Ready));
    std::int64_t reported = 0;
    for (int step = 0; step < 4; ++step) {
      const StepResult r = rt.run_step(step);
      if (step == 0) {
        EXPECT_GT(r.fresh_buffers, 0) << "seed " << seed;
      }
      reported += r.fresh_buffers;
    }
    EXPECT_EQ(reported, static_cast<std::int64_t>(BufferPool::fresh_total() - before))
        << "seed " << seed;
  }
}

// A step of P=2 as send_times_from_arrivals reads it: F c0 m0 ends at 100 on stage 0; stage 1
// runs B c1 m1 from 50 to 300, then F c1 m0 (whose input is F c0 m0's output) from `start`
// to 400, the input having landed at `input_at`.
StepRecord input_after_a_busy_rank(std::int64_t start, std::int64_t input_at) {
  StepRecord r;
  r.pp = 2;
  TaskRecord producer{TaskId{Kind::F, 0, 0}, 0, 0, 0, 100, 100};
  TaskRecord busy{TaskId{Kind::B, 1, 1}, 1, 0, 50, 300, 300};
  TaskRecord consumer{TaskId{Kind::F, 1, 0}, 1, 0, start, 400, 400};
  consumer.input_at = input_at;
  r.tasks = {producer, busy, consumer};
  return r;
}

// A measured blocking step: the time an offer waits for its busy receiver to accept it is the
// rendezvous's, which a replay's rendezvous adds by itself, so a message's time leaves it out
// (counted in it, a measured blocking step replayed 11-23% long).
TEST(Runtime, AMessagesTimeLeavesOutItsOffersWaitForTheReceiver) {
  // F c0 m0 offers its output; stage 1 accepts at 300, after B c1 m1 (a wait of 190 since
  // the offer came at 110), and the input lands at 310; F c1 m0 starts at 330.
  StepRecord r = input_after_a_busy_rank(330, 310);
  r.tasks[2].offer_wait = 190;
  send_times_from_arrivals(r);
  // The rank was idle when the input came (free since 300): the message ends at the start.
  EXPECT_EQ(r.tasks[0].send_ns, 330 - 100 - 190);
  r.tasks[2].offer_wait = 0;  // async: no offer, so the whole way from the producer's end
  send_times_from_arrivals(r);
  EXPECT_EQ(r.tasks[0].send_ns, 330 - 100);
  r.tasks[2].offer_wait = 500;  // never below 0
  send_times_from_arrivals(r);
  EXPECT_EQ(r.tasks[0].send_ns, 0);
}

// A rank blocked sending its own output when an input came was busy, not idle waiting for it:
// the message ends at its arrival. Taken as idle since its last task, the message was
// stretched to the consumer's start and the send's wait counted twice (measured interleaved
// blocking steps replayed +3% long).
TEST(Runtime, AnInputThatCameDuringARanksSendEndsAtItsArrival) {
  // After B c1 m1, stage 1 waits until 380 for its output to be taken; the input of F c1 m0
  // lands at 320; F c1 m0 starts at 390.
  StepRecord r = input_after_a_busy_rank(390, 320);
  r.blocked = {BlockedSpan{1, 0, 300, 380, BlockReason::Send}};
  send_times_from_arrivals(r);
  EXPECT_EQ(r.tasks[0].send_ns, 320 - 100);
  // A wait of another rank, or a collective's, leaves the rank idle from its task's end.
  for (const BlockedSpan b : {BlockedSpan{1, 1, 300, 380, BlockReason::Send},
                              BlockedSpan{1, 0, 300, 380, BlockReason::Collective}}) {
    r.blocked = {b};
    send_times_from_arrivals(r);
    EXPECT_EQ(r.tasks[0].send_ns, 390 - 100);
  }
}

TEST(Runtime, RejectsBadOptions) {
  WorkModel m(PipelineConfig{});
  Hint h = make_hint("1f1b", m);
  const RealizedWork w = random_work(m, 1, 1);
  RuntimeOptions ro;
  ro.tp = 0;
  EXPECT_ERROR(Runtime(m, h, emulated_programs(m, w), ro), InputError,
               "`tp`: must be between 1 and 1024, got 0");
  ro.tp = 1;
  ro.arbiter.policy = Policy::Fixed;
  Hint rule = make_hint("bf", m);
  EXPECT_ERROR(Runtime(m, rule, emulated_programs(m, w), ro), InputError,
               "`policy` fixed: needs a list hint");
  EXPECT_ERROR(Runtime(m, h, emulated_programs(m, w), ro, make_inproc_transports(3)), Error,
               "runtime: need one transport per local endpoint: 4 endpoints, 3 transports");
  // Transports in another order than the endpoints: refused by name, where each stage sent
  // from another's rank and the step failed blaming a message.
  auto swapped = make_inproc_transports(4);
  std::swap(swapped[1], swapped[2]);
  EXPECT_ERROR(Runtime(m, h, emulated_programs(m, w), ro, std::move(swapped)), Error,
               "runtime: the transport for local endpoint 1 is rank 2 of 4; it must be rank 1 of "
               "4 (transports in the order of `local`)");
  auto of_five = make_inproc_transports(5);
  of_five.pop_back();
  EXPECT_ERROR(
      Runtime(m, h, emulated_programs(m, w), ro, std::move(of_five)), Error,
      "runtime: the transport for local endpoint 0 is rank 0 of 5; it must be rank 0 of 4");
  ro.tp = 1;
  ro.arbiter.policy = Policy::Ready;
  for (int us : {-1, 10'001}) {
    ro.idle_spin_us = us;
    try {
      Runtime(m, rule, emulated_programs(m, w), ro);
      ADD_FAILURE() << "idle_spin_us " << us << " accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("`idle_spin_us`: must be between 0 and 10000"),
                std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace rrfp::test
