// The c10d job's groups: the barrier before a step, the gathers and the exchanges among stages
// run on the collectives' group, made with the job's timeout as its own, and never on the
// transport's (C10dGroups says why); without one, on the transport's group. The gathers where
// the processes meet at a call run on the arrival groups. Ranks as one-process fakes that
// record which group each call reached.
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "dist/c10d_world.hpp"
#include "done_work.hpp"
#include "expect_error.hpp"

namespace rrfp::test {
namespace {

// A group of one rank (or rank 0 of `size`, for the layout checks) that logs each call as
// "<name> <call>" and gathers its own input.
class RecordingGroup final : public c10d::ProcessGroup {
 public:
  RecordingGroup(std::string name, std::vector<std::string>& log, int size = 1)
      : c10d::ProcessGroup(0, size), name_(std::move(name)), log_(log) {}
  const std::string getBackendName() const override { return "recording"; }
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions&) override {
    return done("barrier");
  }
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& out,
                                           std::vector<at::Tensor>& in,
                                           const c10d::AllgatherOptions&) override {
    out[0][0].copy_(in[0]);
    return done("allgather");
  }
  // The peer sends nothing: a size of 0, and no bytes.
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& t, int, int) override {
    t[0].zero_();
    return done("recv");
  }
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>&, int, int) override {
    return done("send");
  }

 private:
  c10::intrusive_ptr<c10d::Work> done(const char* call) {
    log_.push_back(name_ + " " + call);
    return c10::make_intrusive<DoneWork>();
  }
  std::string name_;
  std::vector<std::string>& log_;
};

std::vector<std::byte> bytes(std::size_t n) {
  std::vector<std::byte> b(n);
  for (std::size_t i = 0; i < n; ++i)
    b[i] = std::byte(i * 7 + 1);
  return b;
}

C10dGroups recording(std::vector<std::string>& log, bool collectives) {
  auto g = [&](const char* name) { return c10::make_intrusive<RecordingGroup>(name, log); };
  C10dGroups out{g("pipeline"), g("replicas"), {}, {}, {}};
  if (collectives) out.collectives = g("collectives");
  return out;
}

TEST(C10dJobGroups, CollectivesRunOnTheirOwnGroupsNeverOnTheTransports) {
  std::vector<std::string> log;
  C10dWorld job(recording(log, true), std::chrono::seconds(5));
  job.set_layout(JobLayout{1, 1, 1});
  Hosting h = job.hosting();
  h.before_step();
  const auto mine = bytes(5000);  // past the first round: two all-gathers
  EXPECT_EQ(job.all_gather_bytes(mine), std::vector<std::vector<std::byte>>{mine});
  EXPECT_EQ(job.dp_all_gather(bytes(3)), std::vector<std::vector<std::byte>>{bytes(3)});
  EXPECT_EQ(job.replica_all_gather(bytes(4)), std::vector<std::vector<std::byte>>{bytes(4)});
  EXPECT_EQ(job.gather_to_root(bytes(2)), std::vector<std::vector<std::byte>>{bytes(2)});
  const std::vector<std::string> want = {"collectives barrier",   "collectives allgather",
                                         "collectives allgather", "replicas allgather",
                                         "replicas allgather",    "replicas allgather",
                                         "collectives allgather", "collectives allgather"};
  EXPECT_EQ(log, want);
}

TEST(C10dJobGroups, AnExchangeAmongStagesRunsOnTheCollectivesGroup) {
  std::vector<std::string> log;
  C10dGroups g{c10::make_intrusive<RecordingGroup>("pipeline", log, 2),
               {},
               c10::make_intrusive<RecordingGroup>("collectives", log, 2),
               {},
               {}};
  C10dWorld job(g, std::chrono::seconds(5));
  const std::vector<int> both = {0, 1};
  EXPECT_EQ(job.exchange(bytes(6), both), (std::vector<std::vector<std::byte>>{bytes(6), {}}));
  // Stage 1's size, this stage's size, then this stage's bytes (stage 1 sent none).
  EXPECT_EQ(log,
            (std::vector<std::string>{"collectives recv", "collectives send", "collectives send"}));
}

TEST(C10dJobGroups, WithoutCollectivesGroupsTheTransportsGroupsCarryThem) {
  std::vector<std::string> log;
  C10dWorld job(recording(log, false), std::chrono::seconds(5));
  job.hosting().before_step();
  job.dp_all_gather(bytes(3));
  EXPECT_EQ(log, (std::vector<std::string>{"pipeline barrier", "replicas allgather"}));
}

// The gathers where the processes meet at a call wait up to the arrival's limit, on groups made
// with it as their timeout (Gloo ends a collective only at its group's): never the step's.
TEST(C10dJobGroups, ArrivalGathersRunOnTheArrivalGroups) {
  std::vector<std::string> log;
  C10dGroups g = recording(log, true);
  g.arrivals = c10::make_intrusive<RecordingGroup>("arrivals", log);
  g.arrival_replicas = c10::make_intrusive<RecordingGroup>("arrival-replicas", log);
  C10dWorld job(g, std::chrono::seconds(5));
  EXPECT_EQ(job.arrival_gather_bytes(bytes(7), 60'000),
            std::vector<std::vector<std::byte>>{bytes(7)});
  EXPECT_EQ(job.all_gather_bytes(bytes(7)), std::vector<std::vector<std::byte>>{bytes(7)});
  EXPECT_EQ(job.arrival_gather(std::vector<double>{1.5, 2}, 0),
            (std::vector<std::vector<double>>{{1.5, 2}}));
  EXPECT_EQ(log, (std::vector<std::string>{"arrivals allgather", "arrival-replicas allgather",
                                           "collectives allgather", "replicas allgather",
                                           "arrivals allgather", "arrival-replicas allgather"}));
}

TEST(C10dJobGroups, WithoutArrivalGroupsTheCollectivesGroupsCarryTheArrivals) {
  std::vector<std::string> log;
  C10dWorld job(recording(log, true), std::chrono::seconds(5));
  job.arrival_gather_bytes(bytes(3), 60'000);
  EXPECT_EQ(log, (std::vector<std::string>{"collectives allgather", "replicas allgather"}));
}

TEST(C10dJobGroups, AnArrivalGroupNumberingTheProcessesOtherwiseIsRefused) {
  std::vector<std::string> log;
  C10dGroups g = recording(log, true);
  g.arrivals = c10::make_intrusive<RecordingGroup>("wide", log, 2);
  EXPECT_THROW(
      {
        try {
          C10dWorld job(g, std::chrono::seconds(5));
        } catch (const InputError& e) {
          EXPECT_STREQ(e.what(),
                       "`arrivals`: rank 0 of 2, where the pipeline's group has rank 0 of 1");
          throw;
        }
      },
      InputError);
  g.arrivals = {};
  g.replicas = {};  // one replica, but an arrival group of the replicas
  g.arrival_replicas = c10::make_intrusive<RecordingGroup>("replicas", log);
  EXPECT_ERROR(C10dWorld(g, std::chrono::seconds(5)), InputError,
               "`arrival_replicas`: must number the replicas as `replicas` does");
}

TEST(C10dJobGroups, ACollectivesGroupNumberingTheProcessesOtherwiseIsRefused) {
  std::vector<std::string> log;
  C10dGroups g = recording(log, true);
  g.collectives = c10::make_intrusive<RecordingGroup>("wide", log, 2);
  try {
    C10dWorld job(g, std::chrono::seconds(5));
    FAIL() << "a collectives group of 2 ranks beside a pipeline of 1 was taken";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(),
                 "`collectives`: rank 0 of 2, where the pipeline's group has rank 0 of 1");
  }
}

// Under a group of the caller's (a subgroup whose rank 0 is torchrun's rank 2, say), a peer is
// named by its global rank too: a stall's "stage 0 (c10d rank 0)" read as torchrun's rank 0, a
// process of another pipeline.
TEST(C10dJobGroups, PeersAreNamedByTheirGlobalRankWhereTheCallersGroupNumbersThemOtherwise) {
  std::vector<std::string> log;
  C10dGroups g = recording(log, true);
  g.global_ranks = {2};
  EXPECT_EQ(C10dWorld(g, std::chrono::seconds(5)).hosting().peer_name(0),
            "stage 0 (c10d rank 0, global rank 2)");
  g.global_ranks = {};
  EXPECT_EQ(C10dWorld(g, std::chrono::seconds(5)).hosting().peer_name(0), "stage 0 (c10d rank 0)");
  g.global_ranks = {2, 3};
  EXPECT_ERROR(C10dWorld(g, std::chrono::seconds(5)), InputError,
               "`global_ranks`: one for each of the job's 1 ranks, got 2");
}

}  // namespace
}  // namespace rrfp::test
