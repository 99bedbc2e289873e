// The transport conformance suite (transport_conformance.hpp) for the c10d transport, ranks as
// threads: one Gloo process group per thread, met through an in-process store, over loopback;
// the c10d job's exchange among some stages beside a live transport; and Gloo's failure of a
// send, named.
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <future>
#include <mutex>
#include <thread>

#include "comm/c10d_transport.hpp"
#include "core/error.hpp"
#include "dist/c10d_world.hpp"
#include "done_work.hpp"
#include "expect_error.hpp"
#include "gloo_groups.hpp"
#include "job_conformance.hpp"
#include "transport_conformance.hpp"

namespace rrfp::test {
namespace {

std::vector<std::unique_ptr<Transport>> make_c10d_transports(int n) {
  std::vector<std::unique_ptr<Transport>> out;
  for (auto& pg : make_groups(n))
    out.push_back(std::make_unique<C10dTransport>(pg));
  return out;
}

INSTANTIATE_TEST_SUITE_P(Transports, Conformance,
                         ::testing::Values(std::make_pair("c10d_gloo",
                                                          Factory(make_c10d_transports))),
                         [](const auto& info) { return std::string(info.param.first); });

// The job conformance suite (job_conformance.hpp) on the c10d job: each rank a thread with a
// Gloo group of its replica's stages for the transport, one for the collectives and one of its
// stage's replicas, as rrfp.Pipeline makes them with torch.distributed's new_group for dp > 1.
std::vector<std::unique_ptr<Job>> make_c10d_jobs(int pp, int dp) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  auto group = [&](const std::string& name, int rank, int size) {
    return gloo_group(c10::make_intrusive<c10d::PrefixStore>(name, store), rank, size);
  };
  std::vector<std::unique_ptr<Job>> out(static_cast<std::size_t>(pp * dp));
  std::vector<std::thread> th;
  for (int r = 0; r < pp * dp; ++r)
    th.emplace_back([&, r] {  // every group's constructor waits for its other members
      const int replica = r / pp, stage = r % pp;
      C10dGroups g;
      g.pipeline = group("pipe" + std::to_string(replica), stage, pp);
      g.replicas = group("dp" + std::to_string(stage), replica, dp);
      g.collectives = group("cpipe" + std::to_string(replica), stage, pp);
      out[r] = std::make_unique<C10dWorld>(std::move(g), std::chrono::seconds(30));
      out[r]->set_layout(JobLayout{pp, 1, dp});
    });
  for (auto& t : th)
    t.join();
  return out;
}

INSTANTIATE_TEST_SUITE_P(Jobs, JobConformance,
                         ::testing::Values(std::make_pair("c10d_gloo", JobFactory(make_c10d_jobs))),
                         [](const auto& info) { return std::string(info.param.first); });

// Stages 0, 2 and 3 of four exchange bytes of different sizes (the copies of ties) while the
// transport on the same group carries messages from every stage to stage 0 (a payload of 1 MiB
// among them), and stage 1 stays out, which is refused as a peer: neither takes the other's.
TEST(C10dJob, ExchangeAmongSomeStagesBesideATransport) {
  auto groups = make_groups(4);
  std::vector<std::vector<std::vector<std::byte>>> got(4);
  std::vector<std::string> errors(4);
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::size_t> arrived;  // payload sizes stage 0's transport received
  std::vector<std::thread> th;
  for (int r = 0; r < 4; ++r)
    th.emplace_back([&, r] {
      C10dWorld job({groups[r], {}, {}, {}, {}}, std::chrono::seconds(30));
      C10dTransport transport(groups[r]);
      transport.set_receiver([&](Message&& m) {
        std::lock_guard lk(mu);
        arrived.push_back(m.payload.size());
        cv.notify_all();
      });
      if (r != 0)
        transport.send(0, MessageTag{0, TaskId{Kind::F, r, 0}},
                       Payload::allocate(r == 3 ? std::size_t{1} << 20 : 8));
      const std::vector<int> peers = {0, 2, 3};
      std::vector<std::byte> mine((1u << 20) + static_cast<std::size_t>(r), std::byte(r));
      try {
        got[r] = job.exchange(mine, peers);
      } catch (const InputError& e) {
        errors[r] = e.what();
      }
      if (r == 0) {
        std::unique_lock lk(mu);
        cv.wait_for(lk, std::chrono::seconds(30), [&] { return arrived.size() == 3; });
      }
      job.replica_all_gather({});  // nobody shuts down while a peer may still send
      transport.shutdown();
    });
  for (auto& t : th)
    t.join();
  std::sort(arrived.begin(), arrived.end());
  EXPECT_EQ(arrived, (std::vector<std::size_t>{8, 8, std::size_t{1} << 20}));
  for (int r : {0, 2, 3}) {
    ASSERT_EQ(got[r].size(), 3u) << r;
    for (int i = 0; i < 3; ++i) {
      const int from = i == 0 ? 0 : i + 1;
      EXPECT_EQ(got[r][i], std::vector<std::byte>((1u << 20) + static_cast<std::size_t>(from),
                                                  std::byte(from)))
          << "rank " << r << ", from " << from;
    }
  }
  EXPECT_NE(errors[1].find("must include this endpoint"), std::string::npos) << errors[1];
}

// What Gloo says when the peer of a send is gone, mid-step (a killed process).
constexpr const char* kGlooReset =
    "[../gloo/transport/tcp/pair.cc:589] Read error [127.0.0.1]:40000: Connection reset by peer";

// A send's work that fails as Gloo's does once its peer is gone.
class ResetWork final : public c10d::Work {
 public:
  bool wait(std::chrono::milliseconds) override { throw std::runtime_error(kGlooReset); }
  bool isCompleted() override { return true; }
  void abort() override {}
};

// Rank 0 of 2, whose peer is gone: each send fails when waited on, or at once (`at_once`: a
// pair Gloo already knows closed). It receives nothing (no receiver is set, so no receive is
// posted).
class PeerGoneGroup final : public c10d::ProcessGroup {
 public:
  explicit PeerGoneGroup(bool at_once) : c10d::ProcessGroup(0, 2), at_once_(at_once) {}
  const std::string getBackendName() const override { return "peer-gone"; }
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>&, int, int) override {
    if (at_once_) throw std::runtime_error(kGlooReset);
    return c10::make_intrusive<ResetWork>();
  }

 private:
  bool at_once_;
};

// The error a send completes with, as the runtime's stage takes it (a throw is a completion).
std::string send_error(Transport& t, const MessageTag& tag, Payload p = Payload::allocate(8)) {
  std::promise<std::string> got;
  auto done = [&](std::exception_ptr e) {
    try {
      if (e) std::rethrow_exception(e);
      got.set_value("no error");
    } catch (const Error& x) {
      got.set_value(x.what());
    } catch (const std::exception& x) {
      got.set_value(std::string("not an rrfp Error: ") + x.what());
    }
  };
  try {
    t.send(1, tag, std::move(p), done);
  } catch (...) {
    done(std::current_exception());
  }
  auto f = got.get_future();
  if (f.wait_for(std::chrono::seconds(10)) != std::future_status::ready) return "no completion";
  return f.get();
}

// A Gloo failure of a send reached the step as Gloo's bare line ("RuntimeError: [...] Read
// error ...: Connection reset by peer"), naming no stage, peer or message: it names all three,
// Gloo's line kept, whether Gloo fails the send when waited on (named as the c10d job names
// its stages) or at once.
TEST(C10dTransportFailure, AGlooSendFailureNamesThisStageThePeerAndTheMessage) {
  const std::string tail =
      " failed (Gloo's send; the peer exited or stopped answering?): " + std::string(kGlooReset);
  C10dWorld job({c10::make_intrusive<PeerGoneGroup>(false), {}, {}, {}, {}},
                std::chrono::seconds(30));
  Hosting h = job.hosting();
  EXPECT_EQ(send_error(*h.transports[0], MessageTag{3, TaskId{Kind::F, 0, 2}}),
            "c10d transport: stage 0 (c10d rank 0): sending step 3 F c0 m2 to stage 1 (c10d "
            "rank 1)" +
                tail);
  C10dTransport at_once(c10::make_intrusive<PeerGoneGroup>(true));
  EXPECT_EQ(send_error(at_once, MessageTag{4, TaskId{Kind::B, 1, 0}}),
            "c10d transport: rank 0: sending step 4 B c1 m0 to rank 1" + tail);
}

// Rank 1 of 2, whose peer is gone: its receive from any source fails as Gloo's does.
class ReceiveGoneGroup final : public c10d::ProcessGroup {
 public:
  ReceiveGoneGroup() : c10d::ProcessGroup(1, 2) {}
  const std::string getBackendName() const override { return "receive-gone"; }
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>&, int) override {
    return c10::make_intrusive<ResetWork>();
  }
};

// A receive Gloo failed ended the receiving loop without a word: the step waited for its
// watchdog, whose report named what was missing but not why. The broken handler hears it, once,
// naming this rank and Gloo's line; a shutdown's aborted receives are no failure.
TEST(C10dTransportFailure, AFailedReceiveIsReportedOnceNamingItsRankAndGloosLine) {
  std::promise<std::string> heard;
  std::atomic<int> calls{0};
  C10dTransport t(c10::make_intrusive<ReceiveGoneGroup>());
  t.set_broken_handler([&](std::exception_ptr e) {
    if (calls++ > 0) return;
    try {
      std::rethrow_exception(e);
    } catch (const Error& x) {
      heard.set_value(x.what());
    } catch (const std::exception& x) {
      heard.set_value(std::string("not an rrfp Error: ") + x.what());
    }
  });
  t.set_receiver([](Message&&) {});
  auto f = heard.get_future();
  ASSERT_EQ(f.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_EQ(f.get(),
            "c10d transport: rank 1: receiving from any rank failed (Gloo's receive; a peer "
            "exited or stopped answering?): " +
                std::string(kGlooReset));
  EXPECT_ERROR(t.set_broken_handler({}), Error,
               "c10d transport: set the broken handler before the receiver");
  t.shutdown();
  EXPECT_EQ(calls.load(), 1);

  std::atomic<int> at_shutdown{0};
  auto live = make_c10d_transports(2);
  for (auto& e : live) {
    e->set_broken_handler([&](std::exception_ptr) { ++at_shutdown; });
    e->set_receiver([](Message&&) {});
  }
  for (auto& e : live)
    e->shutdown();
  EXPECT_EQ(at_shutdown.load(), 0);
}

// A header's send, posted, that reads its buffer when it ends, as Gloo's pair writes it out.
class HeldHeader final : public c10d::Work {
 public:
  HeldHeader(const std::byte* at, std::vector<std::byte> sent, std::atomic<int>* read)
      : at_(at), sent_(std::move(sent)), read_(read) {}
  bool wait(std::chrono::milliseconds) override {
    read_->store(std::memcmp(at_, sent_.data(), sent_.size()) == 0 ? 1 : 2);
    return true;
  }
  bool isCompleted() override { return read_->load() != 0; }
  void abort() override {}

 private:
  const std::byte* at_;
  std::vector<std::byte> sent_;
  std::atomic<int>* read_;
};

// Posts a header, then refuses the payload that follows it at once.
class PayloadRefusedGroup final : public c10d::ProcessGroup {
 public:
  explicit PayloadRefusedGroup(std::atomic<int>* read) : c10d::ProcessGroup(0, 2), read_(read) {}
  const std::string getBackendName() const override { return "payload-refused"; }
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& t, int, int) override {
    if (posted_++ > 0) throw std::runtime_error(kGlooReset);
    const auto* at = static_cast<const std::byte*>(t[0].data_ptr());
    return c10::make_intrusive<HeldHeader>(
        at, std::vector<std::byte>(at, at + t[0].numel() * t[0].element_size()), read_);
  }

 private:
  std::atomic<int>* read_;
  int posted_ = 0;
};

// A payload Gloo refused once its header had been posted freed the header's buffer with the
// failed send, while Gloo still held it: the buffer lives until the header's send has ended,
// read intact then.
// Posted by the sender (a payload up to kPostBytes) or by the transport's poster (larger).
TEST(C10dTransportFailure, AHeaderPostedBeforeItsPayloadFailedOutlivesItsSend) {
  for (std::size_t n : {C10dTransport::kInlineBytes + 1, C10dTransport::kPostBytes + 1}) {
    std::atomic<int> read{0};
    C10dTransport t(c10::make_intrusive<PayloadRefusedGroup>(&read));
    const std::string err =
        send_error(t, MessageTag{1, TaskId{Kind::F, 0, 0}}, Payload::allocate(n));
    EXPECT_NE(err.find("sending step 1 F c0 m0 to rank 1 failed"), std::string::npos) << err;
    for (int i = 0; i < 1000 && read.load() == 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EXPECT_EQ(read.load(), 1) << n << " B: 0: the header's send was never waited for; 2: read "
                              << "changed";
    t.shutdown();
  }
}

// A send Gloo refuses at once, made by the poster thread: its completion names the message.
TEST(C10dTransportFailure, ALargePayloadRefusedByGlooNamesItsMessage) {
  C10dTransport t(c10::make_intrusive<PeerGoneGroup>(true));
  EXPECT_EQ(send_error(t, MessageTag{2, TaskId{Kind::F, 1, 3}},
                       Payload::allocate(C10dTransport::kPostBytes + 1)),
            "c10d transport: rank 0: sending step 2 F c1 m3 to rank 1 failed (Gloo's send; the "
            "peer exited or stopped answering?): " +
                std::string(kGlooReset));
}

// Gloo has no pair to a rank's own self: a send there crashed inside Gloo. Refused, naming it.
TEST(C10dTransport, ASendToItsOwnRankIsRefused) {
  C10dTransport t(c10::make_intrusive<PeerGoneGroup>(true));
  EXPECT_ERROR(t.send(0, MessageTag{}, Payload::allocate(16)), InputError,
               "c10d transport: destination 0 is this rank itself, which Gloo cannot send to");
}

// Records the size of every message posted, in order; the first post waits for `open`.
class GatedGroup final : public c10d::ProcessGroup {
 public:
  GatedGroup() : c10d::ProcessGroup(0, 2) {}
  const std::string getBackendName() const override { return "gated"; }
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& t, int, int) override {
    std::unique_lock lk(mu);
    ++entered;
    cv.notify_all();
    cv.wait(lk, [&] { return open; });
    sizes.push_back(static_cast<std::size_t>(t[0].numel()));
    cv.notify_all();
    return c10::make_intrusive<DoneWork>();
  }
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
  int entered = 0;  // posts begun
  std::vector<std::size_t> sizes;
};

// Gloo copies a message into the socket in the thread that posts it: a large payload held the
// sending stage for its whole copy (4 MiB: about 1.2 ms). The poster posts it, so the send
// returns while Gloo has not taken it, and a small message sent after it waits its turn
// rather than overtaking it.
TEST(C10dTransport, ALargePayloadIsPostedByThePosterAndNothingOvertakesIt) {
  auto group = c10::make_intrusive<GatedGroup>();
  C10dTransport t(group);
  const std::size_t big = C10dTransport::kPostBytes + 1;
  std::promise<void> sent;
  std::thread sender([&] {  // a send that waits for Gloo fails the test rather than hangs it
    t.send(1, MessageTag{1, TaskId{Kind::F, 0, 0}}, Payload::allocate(big));
    t.send(1, MessageTag{1, TaskId{Kind::F, 0, 1}}, Payload::allocate(8));  // queued behind
    sent.set_value();
  });
  EXPECT_EQ(sent.get_future().wait_for(std::chrono::seconds(10)), std::future_status::ready)
      << "a send waited for Gloo to take a large payload";
  std::unique_lock lk(group->mu);
  EXPECT_TRUE(group->sizes.empty());
  group->open = true;
  group->cv.notify_all();
  const bool posted =
      group->cv.wait_for(lk, std::chrono::seconds(30), [&] { return group->sizes.size() == 3; });
  EXPECT_TRUE(posted) << group->sizes.size() << " of 3 messages posted";
  if (posted) {
    EXPECT_LT(group->sizes[0], C10dTransport::kInlineBytes);  // the large one's header
    EXPECT_EQ(group->sizes[1], big);                          // its payload
    EXPECT_GT(group->sizes[2], 8u);                           // the small one, inline
    EXPECT_LT(group->sizes[2], C10dTransport::kInlineBytes);
  }
  lk.unlock();
  sender.join();
  t.shutdown();
}

// The poster had taken a large send out of its queue and was inside Gloo's send when shutdown()
// came: shutdown() completed the sends still queued or in flight, but not that one, whose
// completion was then dropped uncalled (36 of 120 such sends, timed at random). Every send's
// completion is called once, by the time shutdown() returns.
TEST(C10dTransport, ASendThePosterIsPostingAtShutdownIsCompletedByIt) {
  auto group = c10::make_intrusive<GatedGroup>();
  auto t = std::make_unique<C10dTransport>(group);
  std::atomic<int> calls{0};
  std::string said;
  t->send(1, MessageTag{1, TaskId{Kind::F, 0, 0}}, Payload::allocate(C10dTransport::kPostBytes + 1),
          [&](std::exception_ptr e) {
            if (calls++ > 0) return;
            try {
              if (e) std::rethrow_exception(e);
              said = "no error";
            } catch (const std::exception& x) {
              said = x.what();
            }
          });
  {
    std::unique_lock lk(group->mu);
    ASSERT_TRUE(group->cv.wait_for(lk, std::chrono::seconds(10), [&] { return group->entered; }))
        << "the poster never posted";
  }
  t->shutdown();
  EXPECT_EQ(calls.load(), 1) << "shutdown() returned with a send's completion uncalled";
  EXPECT_EQ(said, "c10d transport: rank 0 shut down with sends in flight");
  {
    std::lock_guard lk(group->mu);
    group->open = true;
    group->cv.notify_all();
  }
  t.reset();
  EXPECT_EQ(calls.load(), 1);
}

}  // namespace
}  // namespace rrfp::test
