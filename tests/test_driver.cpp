// The one driver (core/rank_driver.hpp) under an executor of a few dozen lines: a discrete-event
// loop for T = 1 and async messages, each task taking its realized duration and each message
// its latency. It decides nothing itself, so it must start every task exactly when the
// simulator does, for every hint, policy and seed: what a new executor inherits from the
// driver is every protocol decision.
#include <gtest/gtest.h>

#include <queue>

#include "core/error.hpp"
#include "core/rank_driver.hpp"
#include "expect_error.hpp"
#include "sim_helpers.hpp"

namespace rrfp {
namespace {

using Starts = std::vector<std::int64_t>;  // by task index: when it started (-1: never)

// The whole executor: events are a task's end or an input's arrival; after each instant's
// events every idle rank asks its driver for the next task.
Starts mini_executor(const WorkModel& m, const Hint& h, const RealizedWork& w, Policy policy) {
  DispatchOptions opt;
  opt.arbiter = resolve_options(ArbiterOptions{policy}, h, m);
  std::vector<std::int64_t> sizes;
  for (int mb = 0; mb < m.microbatches(); ++mb)
    sizes.push_back(microbatch_size(m, w, mb));
  std::vector<RankDriver> ranks;
  for (int s = 0; s < m.pp(); ++s) {
    ranks.emplace_back(m, h, opt, 1, s, 0);
    ranks.back().begin_step(sizes);
  }
  struct Ev {
    std::int64_t time;
    std::uint64_t seq;
    int stage, task;
    bool ended;  // else: the task's input arrived
    bool operator>(const Ev& o) const { return time != o.time ? time > o.time : seq > o.seq; }
  };
  std::priority_queue<Ev, std::vector<Ev>, std::greater<>> events;
  std::uint64_t seq = 0;
  std::vector<char> busy(m.pp(), 0);
  Starts starts(m.num_tasks(), -1);
  std::int64_t now = 0;
  auto dispatch = [&] {
    for (int s = 0; s < m.pp(); ++s)
      if (!busy[s])
        if (const auto t = ranks[s].next()) {
          busy[s] = 1;
          starts[m.index(*t)] = now;
          events.push({now + w.compute(0, m.index(*t)), seq++, s, m.index(*t), true});
        }
  };
  dispatch();
  while (!events.empty()) {
    now = events.top().time;
    for (; !events.empty() && events.top().time == now; events.pop()) {
      const Ev e = events.top();
      const TaskId t = m.task(e.task);
      if (!e.ended) {
        Deps d{};
        m.deps(t, d);  // the producer's cost travels with its message
        const Dep& from = d[0].cross_stage ? d[0] : d[1];
        ranks[e.stage].arrived(t, w.compute(0, m.index(from.task)));
        continue;
      }
      busy[e.stage] = 0;
      for (const Dep& c : ranks[e.stage].task_ended(t, w.compute(0, e.task)))
        if (c.cross_stage)
          events.push(
              {now + w.message(0, e.task), seq++, m.stage_of(c.task), m.index(c.task), false});
    }
    dispatch();
  }
  for (const RankDriver& r : ranks)
    EXPECT_TRUE(r.done()) << describe(r.stuck());
  return starts;
}

TEST(Driver, AMiniExecutorStartsEveryTaskWhenTheSimulatorDoes) {
  int compared = 0;
  for (const char* hint : {"1f1b", "gpipe", "bf", "bfw", "adaptive", "zb-h1", "interleaved-1f1b"})
    for (Policy policy : {Policy::Ready, Policy::Fixed})
      for (std::uint64_t seed = 1; seed <= 8; ++seed) {
        const bool rule = std::string(hint) == "bf" || std::string(hint) == "bfw" ||
                          std::string(hint) == "adaptive";
        if (rule && policy == Policy::Fixed) continue;  // `fixed` follows a list
        const bool split = std::string(hint) == "bfw" || std::string(hint) == "adaptive" ||
                           std::string(hint) == "zb-h1";
        const int v = std::string(hint) == "interleaved-1f1b" ? 2 : 1;
        WorkModel m(test::config(4, 8, v, split));
        WorkloadParams p = workload_preset("multimodal");
        const RealizedWork w = realize(p, m, 1, seed);
        const Hint h = make_hint(hint, m);
        SimOptions so;
        so.arbiter.policy = policy;
        const StepRecord sim = simulate(m, h, w, so);
        const Starts mine = mini_executor(m, h, w, policy);
        ASSERT_EQ(sim.tasks.size(), static_cast<size_t>(m.num_tasks())) << hint;
        for (const TaskRecord& r : sim.tasks)
          EXPECT_EQ(mine[m.index(r.task)], r.start)
              << hint << " " << to_string(policy) << " seed " << seed << " " << to_string(r.task);
        ++compared;
      }
  EXPECT_EQ(compared, (4 * 2 + 3) * 8);
}

// One rank of a pipeline of `p` stages and `mbs` microbatches under 1F1B, its step begun.
struct OneRank {
  WorkModel m;
  Hint h;
  DispatchOptions o;
  RankDriver d;
  OneRank(int p, int mbs, int stage)
      : m(test::config(p, mbs)),
        h(make_hint("1f1b", m)),
        o(resolved(h, m)),
        d(m, h, o, 1, stage, 0) {
    d.begin_step();
  }
  static DispatchOptions resolved(const Hint& h, const WorkModel& m) {
    DispatchOptions o;
    o.arbiter = resolve_options({}, h, m);
    return o;
  }
};

// A step whose inputs never come: the driver's stuck view names what the rank waits for, the
// same words the simulator's deadlock and the runtime's watchdog print.
TEST(Driver, StuckViewNamesTheMissingInput) {
  OneRank rank(2, 2, 1);
  RankDriver& d = rank.d;
  EXPECT_FALSE(d.next());
  EXPECT_FALSE(d.done());
  const std::string s = describe(d.stuck());
  EXPECT_NE(s.find("F c0 m0 from stage 0"), std::string::npos) << s;
}

// The cost rule lives in the driver: under `agree` an arbiter hears no producer's cost, so the
// adaptive rule ranks every rank of a group alike.
TEST(Driver, CostsReachTheArbiterExceptUnderAgree) {
  DispatchOptions o;
  o.tp_protocol = TpProtocol::Leader;
  EXPECT_TRUE(o.note_costs(2));
  o.tp_protocol = TpProtocol::Agree;
  EXPECT_FALSE(o.note_costs(2));
  EXPECT_TRUE(o.note_costs(1));  // a group of one agrees with itself
  o.tp_protocol = TpProtocol::None;
  EXPECT_TRUE(o.note_costs(2));
}

// An executor's misreport is refused: an end reported twice satisfied the consumer again, which
// then ran without its input from another stage (and the step counted as done); an end of a
// task never taken or of another stage's, or an input for another stage, read out of bounds.
TEST(Driver, RefusesEndsAndArrivalsItDidNotHandOut) {
  OneRank rank(2, 1, 0);
  RankDriver& d = rank.d;
  const TaskId f = *d.next();
  ASSERT_EQ(f, (TaskId{Kind::F, 0, 0}));
  EXPECT_ERROR(d.task_ended({Kind::B, 0, 0}, 1), ProtocolError,
               "stage 0 rank 0: task B c0 m0 ended, but was never taken");
  d.task_ended(f, 100);
  EXPECT_ERROR(d.task_ended(f, 100), ProtocolError, "stage 0 rank 0: task F c0 m0 ended twice");
  EXPECT_FALSE(d.next()) << "B c0 m0 waits for its gradient from stage 1";
  EXPECT_ERROR(d.task_ended({Kind::F, 1, 0}, 1), ProtocolError,
               "task F c1 m0 ended, which is not this stage's");
  EXPECT_ERROR(d.task_ended({Kind::F, 0, 9}, 1), ProtocolError,
               "task F c0 m9 ended, which does not exist in this run");
  EXPECT_ERROR(d.offered({Kind::B, 1, 0}, 0), ProtocolError,
               "stage 0: an input of task B c1 m0 arrived, which is not this stage's");
  EXPECT_ERROR(d.arrived({Kind::B, 1, 0}, 1), ProtocolError,
               "stage 0: an input of task B c1 m0 arrived, which is not this stage's");
  EXPECT_TRUE(d.arrived({Kind::B, 0, 0}, 1));
}

// A rank held on a send (blocking: its output offered, not yet acknowledged) takes no task, a
// ready one included, until the acknowledgement frees it: the driver says so itself, where
// each executor had to check held() first.
TEST(Driver, AHeldRankTakesNothingUntilReleased) {
  OneRank one(2, 2, 0);
  DispatchOptions o = one.o;
  o.comm = CommMode::Blocking;
  RankDriver d(one.m, one.h, o, 1, 0, 0);
  d.begin_step();
  const TaskId f0 = *d.next();
  ASSERT_EQ(f0, (TaskId{Kind::F, 0, 0}));
  d.task_ended(f0, 100);
  d.sent();  // its output offered to stage 1
  ASSERT_TRUE(d.held());
  EXPECT_EQ(d.next(), std::nullopt) << "F c0 m1 is ready, but the rank is held";
  EXPECT_TRUE(d.released());
  EXPECT_EQ(d.next(), (TaskId{Kind::F, 0, 1}));
}

// A message its protocols do not take is refused, naming the rank: a leader's choice sent to
// tp rank 0 (as a peer's message could) called into a follower that rank 0 does not have, and
// the check meant for it read uninitialised memory; offers, acknowledgements and proposals to a
// rank whose step has no rendezvous or agree round alike.
TEST(Driver, RefusesMessagesItsProtocolsDoNotTake) {
  OneRank one(2, 1, 0);  // async, alone
  const std::string rank = "stage 0 tp rank 0: ";
  EXPECT_ERROR(one.d.on_choice(1, {Kind::F, 0, 0}), ProtocolError,
               rank +
                   "a choice of F c0 m0 from tp rank 1: only the leader (tp rank 0) sends "
                   "choices, to the others, under `leader`");
  EXPECT_ERROR(one.d.on_proposal(1, 0, {Kind::F, 0, 0}), ProtocolError,
               rank + "a proposal of F c0 m0 from tp rank 1: this group does not agree");
  EXPECT_ERROR(one.d.offered({Kind::B, 0, 0}, 0), ProtocolError,
               rank + "an offer of B c0 m0 in a step that does not block");
  EXPECT_ERROR(one.d.sent(), ProtocolError, rank + "an output offered in a step that does not");
  EXPECT_ERROR(one.d.released(), ProtocolError, rank + "an acknowledgement in a step that does");
  EXPECT_TRUE(one.d.accept().empty());
  // The leader of a group of two under `leader`.
  DispatchOptions o = one.o;
  o.tp_protocol = TpProtocol::Leader;
  RankDriver leader(one.m, one.h, o, 2, 0, 0);
  leader.begin_step();
  EXPECT_ERROR(leader.on_choice(1, {Kind::F, 0, 0}), ProtocolError,
               rank + "a choice of F c0 m0 from tp rank 1: only the leader");
}

// The adaptive rule orders the first forwards by every microbatch's size: a list of another
// length is refused, where it was dropped without a word and the entries kept their order.
TEST(Driver, RefusesAPartialListOfMicrobatchSizes) {
  const WorkModel m(test::config(2, 3, 1, true));
  const Hint h = make_hint("adaptive", m);
  DispatchOptions o;
  o.arbiter = resolve_options({}, h, m);
  RankDriver d(m, h, o, 1, 0, 0);
  EXPECT_ERROR(d.begin_step({5, 1}), Error, "stage 0: 2 microbatch sizes for 3 microbatches");
  d.begin_step({5, 1, 3});
  EXPECT_EQ(d.next(), (TaskId{Kind::F, 0, 1}));  // the smallest enters first
}

}  // namespace
}  // namespace rrfp
