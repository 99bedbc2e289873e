// The protocol state machines of core/, driven directly: no threads, no clock, no executor.
// Exhaustive over small cases where the space is small, and every refused transition.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <random>

#include "core/error.hpp"
#include "core/hint_io.hpp"
#include "core/readiness.hpp"
#include "core/rendezvous.hpp"
#include "core/stuck_report.hpp"
#include "core/tp_choice.hpp"
#include "expect_error.hpp"
#include "sim/hint_check.hpp"
#include "sim/simulator.hpp"
#include "sim_helpers.hpp"

namespace rrfp::test {
namespace {

// One rank of one stage: model, hint, arbiter and the readiness built on them.
struct RankUnderTest {
  WorkModel m;
  Hint h;
  StageArbiter arb;
  Readiness inputs;
  RankUnderTest(PipelineConfig c, const std::string& hint, int stage, Policy p = Policy::Ready)
      : m(c),
        h(make_hint(hint, m)),
        arb(m, stage, h, resolve_options({p, 0, 0}, h, m)),
        inputs(m, stage, arb) {}
};

template <class F>
std::string refusal(F f) {
  try {
    f();
  } catch (const ProtocolError& e) {
    return e.what();
  }
  return "(no ProtocolError)";
}

// Every small shape: a task becomes ready exactly when its last input is present, whatever
// order the inputs come in (all orders of one stage's inputs, for tiny shapes).
TEST(Readiness, ATaskIsReadyExactlyWhenItsLastInputIsPresent) {
  for (int p : {1, 2, 3})
    for (int v : {1, 2})
      for (int mb : {1, 2})
        for (bool split : {false, true})
          for (int s = 0; s < p; ++s) {
            RankUnderTest rk(config(p, mb, v, split), split ? "bfw" : "bf", s);
            // Every (task, input) pair of the stage, then shuffled deterministically.
            std::vector<std::pair<TaskId, int>> inputs;
            Deps d{};
            std::vector<int> need(rk.m.local_slots(), 0);
            for (const TaskId& t : rk.m.stage_tasks(s)) {
              const int k = rk.m.deps(t, d);
              need[rk.m.local_index(t)] = k;
              for (int i = 0; i < k; ++i)
                inputs.emplace_back(t, i);
              EXPECT_EQ(rk.arb.is_ready(t), k == 0) << to_string(t);
            }
            std::mt19937 rng(static_cast<unsigned>(p * 100 + v * 10 + mb + split));
            std::shuffle(inputs.begin(), inputs.end(), rng);
            for (const auto& [t, i] : inputs) {
              const int left = --need[rk.m.local_index(t)];
              const bool became = rk.m.deps(t, d) > 0 && d[i].cross_stage ? rk.inputs.arrive(t)
                                                                          : rk.inputs.satisfy(t);
              EXPECT_EQ(became, left == 0) << to_string(t);
              EXPECT_EQ(rk.arb.is_ready(t), left == 0) << to_string(t);
            }
          }
}

TEST(Readiness, RefusesASecondArrivalAndSkippedRendezvousSteps) {
  RankUnderTest rk(config(2, 2), "bf", 1);
  const TaskId f{Kind::F, 1, 0};
  EXPECT_EQ(rk.inputs.version(), 0u);
  EXPECT_TRUE(rk.inputs.arrive(f));    // its only input
  EXPECT_EQ(rk.inputs.version(), 1u);  // the ready set grew: agree may retry
  EXPECT_NE(refusal([&] { rk.inputs.arrive(f); }).find("input of F c1 m0 arrived twice"),
            std::string::npos);
  EXPECT_NE(refusal([&] { rk.inputs.offer(f); }).find("arrived twice"), std::string::npos);
  const TaskId g{Kind::F, 1, 1};
  EXPECT_NE(refusal([&] { rk.inputs.accept(g); }).find("was accepted but it is missing"),
            std::string::npos);
  EXPECT_NE(refusal([&] { rk.inputs.deliver(g); }).find("was delivered but it is missing"),
            std::string::npos);
  rk.inputs.offer(g);
  EXPECT_EQ(rk.inputs.input(g), InputState::Offered);
  EXPECT_NE(refusal([&] { rk.inputs.deliver(g); }).find("it is offered"), std::string::npos);
  rk.inputs.accept(g);
  EXPECT_TRUE(rk.inputs.deliver(g));
  // The last stage's B takes its own F's output: never a message.
  EXPECT_NE(refusal([&] {
              rk.inputs.arrive({Kind::B, 1, 0});
            }).find("not a message"),
            std::string::npos);
}

TEST(Readiness, ExpectedMessagesAreTheMissingCrossStageInputs) {
  RankUnderTest rk(config(3, 3), "bf", 1);  // stage 1: F from stage 0, B from stage 2
  int total = 0;
  EXPECT_EQ(rk.inputs.expected(2, total).size(), 2u);
  EXPECT_EQ(total, 6);
  rk.inputs.arrive({Kind::F, 1, 0});
  rk.inputs.offer({Kind::B, 1, 2});  // offered is no longer expected
  const auto shown = rk.inputs.expected(10, total);
  EXPECT_EQ(total, 4);
  // Producers, not consumers, oldest microbatch first: B c2 m0, F c0 m1, B c2 m1, F c0 m2.
  EXPECT_EQ(shown.front(), (TaskId{Kind::B, 2, 0}));
  EXPECT_EQ(shown[1], (TaskId{Kind::F, 0, 1}));
  EXPECT_EQ(shown.back(), (TaskId{Kind::F, 0, 2}));
}

TEST(Rendezvous, AnAcknowledgementWithoutAnOfferIsRefused) {
  RankUnderTest rk(config(2, 2), "1f1b", 0, Policy::Fixed);
  Rendezvous rv(rk.m, &rk.h.list().stages[0], rk.inputs);
  EXPECT_NE(refusal([&] { rv.acknowledged(); }).find("no send is waiting"), std::string::npos);
  rv.offered();
  rv.offered();
  EXPECT_FALSE(rv.acknowledged());
  EXPECT_TRUE(rv.acknowledged());  // free again
  EXPECT_NE(refusal([&] { rv.acknowledged(); }).find("no send is waiting"), std::string::npos);
}

// Under `fixed` receives are posted one at a time in list order: offers made in any order are
// accepted in that order, each only once the one before it has been delivered.
TEST(Rendezvous, FixedAcceptsOffersInPostedOrderReadyAcceptsAll) {
  for (Policy p : {Policy::Fixed, Policy::Ready}) {
    RankUnderTest rk(config(3, 4), "1f1b", 1, p);
    const auto& order = rk.h.list().stages[1];
    std::vector<TaskId> remote;
    for (const TaskId& t : order)
      if (rk.m.has_remote_input(t)) remote.push_back(t);
    Rendezvous rv(rk.m, p == Policy::Fixed ? &order : nullptr, rk.inputs);
    for (int i = static_cast<int>(remote.size()) - 1; i >= 0; --i)
      rv.on_offer(remote[i], i);  // the handle is the position in list order
    EXPECT_NE(refusal([&] { rv.on_offer(remote[0], 99); }).find("arrived twice"),
              std::string::npos);
    if (p == Policy::Ready) {
      EXPECT_EQ(rv.take_acceptable().size(), remote.size());
      EXPECT_FALSE(rv.has_offers());
      continue;
    }
    for (int i = 0; i < static_cast<int>(remote.size()); ++i) {
      const auto start = rv.take_acceptable();
      ASSERT_EQ(start.size(), 1u) << i;
      EXPECT_EQ(start[0].handle, i);
      EXPECT_TRUE(rv.take_acceptable().empty());  // nothing more until it is delivered
      rk.inputs.deliver(start[0].consumer);
    }
    EXPECT_FALSE(rv.has_offers());
  }
}

TEST(Leader, FollowersReplayTheLeadersSequenceOnceEachTaskIsReady) {
  RankUnderTest rk(config(1, 3), "bf", 0);
  LeaderFollower f(1);
  EXPECT_FALSE(f.next(rk.arb));
  EXPECT_EQ(f.waiting(), "the leader's next choice");
  f.on_choice(0, {Kind::F, 0, 2});  // ready: chunk 0 of a single stage
  f.on_choice(0, {Kind::B, 0, 2});  // not ready until F c0 m2 ran
  EXPECT_EQ(*f.next(rk.arb), (TaskId{Kind::F, 0, 2}));
  EXPECT_FALSE(f.next(rk.arb));  // the follower waits; it never runs something else
  EXPECT_EQ(f.waiting(), "the leader's choice B c0 m2");
  rk.inputs.satisfy({Kind::B, 0, 2});
  EXPECT_EQ(*f.next(rk.arb), (TaskId{Kind::B, 0, 2}));
  EXPECT_EQ(rk.arb.committed(), 2);
}

TEST(Leader, ChoicesComeOnlyFromTheLeaderToFollowers) {
  LeaderFollower f(1), leader(0);
  EXPECT_NE(refusal([&] {
              f.on_choice(2, {Kind::F, 0, 0});
            }).find("only the leader"),
            std::string::npos);
  EXPECT_NE(refusal([&] {
              f.on_choice(-1, {Kind::F, 0, 0});
            }).find("only the leader"),
            std::string::npos);
  EXPECT_NE(refusal([&] {
              leader.on_choice(0, {Kind::F, 0, 0});
            }).find("only the leader"),
            std::string::npos);
}

// All T-tuples of proposals over three tasks, T = 2 and 3, each rank opening first: every rank
// decides the same, and a task runs exactly when all proposals are equal.
TEST(Agree, EveryRankDecidesTheSameAndRunsOnlyOnEqualProposals) {
  const std::array<TaskId, 3> tasks{TaskId{Kind::F, 0, 0}, TaskId{Kind::F, 0, 1},
                                    TaskId{Kind::F, 0, 2}};
  for (int t : {2, 3}) {
    const int cases = t == 2 ? 9 : 27;
    for (int c = 0; c < cases; ++c)
      for (int opener = 0; opener < t; ++opener) {
        std::vector<TaskId> prop(t);
        for (int r = 0, x = c; r < t; ++r, x /= 3)
          prop[r] = tasks[x % 3];
        const bool equal =
            std::all_of(prop.begin(), prop.end(), [&](auto& p) { return p == prop[0]; });
        std::vector<std::unique_ptr<RankUnderTest>> ranks;
        std::vector<AgreeRound> sm;
        for (int r = 0; r < t; ++r) {
          ranks.push_back(std::make_unique<RankUnderTest>(config(1, 3), "bf", 0));
          sm.emplace_back(r, t);
        }
        for (int k = 0; k < t; ++k) {
          const int r = (opener + k) % t;
          EXPECT_TRUE(sm[r].may_propose(0));
          const int round = sm[r].propose(prop[r], 0);
          EXPECT_EQ(round, 0);
          for (int o = 0; o < t; ++o) {
            if (o == r) continue;
            EXPECT_FALSE(sm[o].complete() && k < t - 1);
            sm[o].on_proposal(r, round, prop[r]);
          }
        }
        for (int r = 0; r < t; ++r) {
          ASSERT_TRUE(sm[r].complete());
          const auto got = sm[r].decide(ranks[r]->arb);
          EXPECT_EQ(got.has_value(), equal) << "case " << c << " rank " << r;
          if (got) {
            EXPECT_EQ(*got, prop[0]);
          }
          EXPECT_EQ(sm[r].state(), equal ? AgreeRound::State::Idle : AgreeRound::State::Failed);
          EXPECT_EQ(ranks[r]->arb.committed(), equal ? 1 : 0);
          EXPECT_EQ(sm[r].round(), 1);
        }
      }
  }
}

TEST(Agree, AFailedRoundIsRetriedOnlyAfterAChangeOrAPeersNewRound) {
  RankUnderTest a(config(1, 3), "bf", 0), b(config(1, 3), "bf", 0);
  AgreeRound sa(0, 2), sb(1, 2);
  const TaskId x{Kind::F, 0, 0}, y{Kind::F, 0, 1};
  sb.on_proposal(0, sa.propose(x, 5), x);
  sa.on_proposal(1, sb.propose(y, 7), y);
  EXPECT_FALSE(sa.decide(a.arb));
  EXPECT_FALSE(sb.decide(b.arb));
  EXPECT_EQ(sa.failed_rounds(), 1);
  EXPECT_FALSE(sa.may_propose(5));  // the same proposals would fail again
  EXPECT_FALSE(sb.may_propose(7));
  // Not in a round: what the failed one held, which names a group whose ranks rank apart.
  EXPECT_EQ(sa.waiting(),
            "a change of its ready set since agree round 0 failed (tp rank 0 proposed F c0 m0, "
            "tp rank 1 proposed F c0 m1)");
  EXPECT_TRUE(sa.may_propose(6));  // its ready set changed
  sb.on_proposal(0, sa.propose(x, 6), x);
  EXPECT_TRUE(sb.may_propose(7));  // a peer opened round 1
  EXPECT_EQ(sa.waiting(), "agree round 1 (proposals from tp ranks 0 of 2)");
  sa.on_proposal(1, sb.propose(x, 7), x);
  EXPECT_EQ(*sa.decide(a.arb), x);
  EXPECT_EQ(*sb.decide(b.arb), x);
  EXPECT_EQ(sa.rounds(), 2);
}

TEST(Agree, RefusesProposalsFromOutsideTheGroupLateEarlyOrTwice) {
  AgreeRound s(1, 3);
  const TaskId x{Kind::F, 0, 0};
  EXPECT_NE(refusal([&] { s.on_proposal(3, 0, x); }).find("not a peer in this group of 3"),
            std::string::npos);
  EXPECT_NE(refusal([&] { s.on_proposal(-1, 0, x); }).find("not a peer"), std::string::npos);
  EXPECT_NE(refusal([&] { s.on_proposal(1, 0, x); }).find("not a peer"), std::string::npos);
  EXPECT_NE(refusal([&] { s.on_proposal(0, 2, x); }).find("still in round 0"), std::string::npos);
  s.on_proposal(0, 1, x);  // one round ahead is fine: that peer's next round
  s.on_proposal(0, 0, x);
  EXPECT_NE(refusal([&] { s.on_proposal(0, 0, x); }).find("arrived twice"), std::string::npos);
  RankUnderTest rk(config(1, 3), "bf", 0);
  EXPECT_ERROR(
      s.decide(rk.arb), Error,
      "agree: tp rank 1 decided round 0 before every proposal was in");  // not proposed yet
  s.propose(x, 0);
  EXPECT_ERROR(s.propose(x, 0), Error,
               "agree: tp rank 1 proposed in round 0 while it may not");  // already in the round
  s.on_proposal(2, 0, x);
  EXPECT_EQ(*s.decide(rk.arb), x);
  EXPECT_NE(refusal([&] { s.on_proposal(2, 0, x); }).find("that round is over"), std::string::npos);
}

TEST(StuckReport, NamesWhatTheRankWaitsForFromItsStateMachines) {
  RankUnderTest rk(config(3, 2), "1f1b", 1, Policy::Fixed);
  Rendezvous rv(rk.m, &rk.h.list().stages[1], rk.inputs);
  rv.offered();
  rv.on_offer({Kind::B, 1, 1}, 0);  // not the posted receive: stays offered
  StuckRank view{&rk.arb, &rk.inputs, &rv, "the leader's choice F c1 m0", {}, 1, 2};
  const std::string s =
      describe(view, [](int st) { return "stage " + std::to_string(st) + " (mpi rank 7)"; });
  EXPECT_NE(s.find("stage 1: ran 0/4"), std::string::npos) << s;
  EXPECT_NE(s.find("[tp rank 1]"), std::string::npos) << s;
  EXPECT_NE(s.find("held on 1 unacknowledged send(s)"), std::string::npos) << s;
  EXPECT_NE(s.find("1 transfer(s) offered, not accepted (B c1 m1; the receive posted in list "
                   "order is F c1 m0)"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("waits for the leader's choice F c1 m0"), std::string::npos) << s;
  EXPECT_NE(s.find("expects messages: F c0 m0 from stage 0 (mpi rank 7), B c2 m0 from stage 2 "
                   "(mpi rank 7), F c0 m1 from stage 0 (mpi rank 7)"),
            std::string::npos)
      << s;
  view.running = "running F c1 m0 for 3 ms";
  EXPECT_NE(describe(view).find("; running F c1 m0 for 3 ms; expects"), std::string::npos);
}

// A watchdog names the rank that holds the stage up first: a 1F1B stage at its backward lists
// the next stage's gradient before the later forwards it will also need (the stage's canonical
// order put every forward first, and the report named only the upstream rank).
TEST(StuckReport, ListsTheMessageTheStageNeedsNextFirst) {
  RankUnderTest rk(config(3, 6), "1f1b", 1, Policy::Fixed);  // F0 F1 B0 F2 B1 ...
  for (int mb : {0, 1}) {
    rk.inputs.arrive({Kind::F, 1, mb});
    ASSERT_EQ(*rk.arb.peek(), (TaskId{Kind::F, 1, mb}));
    rk.arb.commit({Kind::F, 1, mb});
  }
  ASSERT_EQ(*rk.arb.head(), (TaskId{Kind::B, 1, 0}));
  const std::string s = describe({&rk.arb, &rk.inputs, nullptr, "", {}, 0, 1});
  EXPECT_NE(s.find("expects messages: B c2 m0 from stage 2, B c2 m1 from stage 2, F c0 m2 from "
                   "stage 0, B c2 m2 from stage 2 and 6 more"),
            std::string::npos)
      << s;
}

// A list whose dependencies allow its order while the rendezvous does not: stage 1 lists F m1
// before F m0, so its one posted receive is m1's, while stage 0, held on its send of m0 until
// that is accepted, never runs F m1. Async runs it; blocking deadlocks, whatever the durations.
TEST(FixedBlockingCheck, FindsAListThatDeadlocksOnlyUnderBlocking) {
  WorkModel m(config(2, 2));
  Hint h;
  h.name = "file:swap.txt";
  ListHint l = make_hint("1f1b", m).list();
  l.stages[1] = {{Kind::F, 1, 1}, {Kind::F, 1, 0}, {Kind::B, 1, 0}, {Kind::B, 1, 1}};
  validate_hint(l, m, "swap.txt");  // dependencies and list order: valid
  h.body = l;
  const std::string stuck = fixed_blocking_deadlock(m, h);
  EXPECT_NE(stuck.find("stage 0: ran 1/4"), std::string::npos) << stuck;
  EXPECT_NE(stuck.find("held on 1 unacknowledged send(s)"), std::string::npos) << stuck;
  EXPECT_NE(stuck.find("(F c1 m0; the receive posted in list order is F c1 m1)"), std::string::npos)
      << stuck;
  EXPECT_EQ(stuck.find("deadlock at t="), std::string::npos) << "no unit run's time";
  for (TpProtocol p : {TpProtocol::Leader, TpProtocol::Agree})
    EXPECT_NE(fixed_blocking_deadlock(m, h, 2, p), "") << "groups of two";
  // The verdict holds for drawn durations too, and async finishes under each.
  for (std::uint64_t seed = 1; seed <= 8; ++seed) {
    const RealizedWork w = realize(workload_preset("language"), m, 1, seed);
    SimOptions o;
    o.arbiter.policy = Policy::Fixed;
    EXPECT_NO_THROW(simulate(m, h, w, o)) << seed;
    EXPECT_EQ(simulated_makespan(m, h, w, o), simulate(m, h, w, o).makespan) << seed;
    o.comm = CommMode::Blocking;
    EXPECT_THROW(simulate(m, h, w, o), DeadlockError) << seed;
    EXPECT_EQ(simulated_makespan(m, h, w, o), std::nullopt) << "a deadlock is none: " << seed;
  }
}

// The generated lists finish under blocking, on one rank a stage and on groups of two.
TEST(FixedBlockingCheck, PassesTheGeneratedLists) {
  for (const char* name : {"gpipe", "1f1b", "interleaved-1f1b", "bfs", "zb-h1", "zb-h2"}) {
    const std::string n = name;
    const int v = n == "interleaved-1f1b" || n == "bfs" ? 2 : 1;
    const bool split = n.rfind("zb", 0) == 0;
    WorkModel m(config(4, 8, v, split));
    const Hint h = make_hint(name, m);
    EXPECT_EQ(fixed_blocking_deadlock(m, h), "") << name;
    EXPECT_EQ(fixed_blocking_deadlock(m, h, 2, TpProtocol::Agree), "") << name;
  }
}

// ZB-V, as its authors and torch lay it out, runs with asynchronous sends: under the
// rendezvous its fixed order deadlocks once there are more microbatches than stages, and is
// refused naming the hint and what to give; with few microbatches it passes.
TEST(FixedBlockingCheck, RefusesZbVWhereItsOrderDeadlocks) {
  WorkModel m(config(4, 8, 2, true, Placement::VShape));
  const Hint h = make_hint("zb-v", m);
  try {
    refuse_blocking_deadlock(m, h, Policy::Fixed, CommMode::Blocking);
    ADD_FAILURE() << "not refused";
  } catch (const InputError& e) {
    const std::string what = e.what();
    EXPECT_EQ(what,
              "`hint` zb-v: laid out for asynchronous sends, its order deadlocks under `comm` "
              "blocking with `policy` fixed at pp 4 with 8 microbatches (receives posted one at "
              "a time in list order); give `comm` async, or `policy` ready");
  }
  EXPECT_NO_THROW(refuse_blocking_deadlock(m, h, Policy::Fixed, CommMode::Async));
  EXPECT_NO_THROW(refuse_blocking_deadlock(m, h, Policy::Ready, CommMode::Blocking));
  WorkModel few(config(4, 4, 2, true, Placement::VShape));
  EXPECT_NO_THROW(
      refuse_blocking_deadlock(few, make_hint("zb-v", few), Policy::Fixed, CommMode::Blocking));
}

}  // namespace
}  // namespace rrfp::test
