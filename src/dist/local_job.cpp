#include "dist/local_job.hpp"

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>

#include "comm/inproc.hpp"
#include "runtime/errors.hpp"
#include "runtime/tp_group.hpp"

namespace rrfp {

namespace {

// An all-gather among `n` threads: each deposits its values and gets everyone's. The result
// is rewritten only when the next round completes, which needs every thread, including those
// still copying this one out.
template <typename T>
class Exchange {
 public:
  explicit Exchange(int n) : slots_(n) {}
  std::vector<std::vector<T>> all_gather(int i, std::span<const T> mine) {
    std::unique_lock lk(mu_);
    slots_[i].assign(mine.begin(), mine.end());
    const std::uint64_t gen = gen_;
    if (++arrived_ == static_cast<int>(slots_.size())) {
      result_ = slots_;
      arrived_ = 0;
      ++gen_;
      cv_.notify_all();
    } else if (!cv_.wait_for(lk, std::chrono::minutes(2), [&] { return gen_ != gen; })) {
      throw StallError("local job: rank " + std::to_string(i) +
                       " waited 2 minutes for the others in an all-gather");
    }
    return result_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::vector<T>> slots_, result_;
  int arrived_ = 0;
  std::uint64_t gen_ = 0;
};

// One TP group's collective, shared by the threads of its ranks.
class SharedGroup final : public TpCollective {
 public:
  explicit SharedGroup(std::shared_ptr<TpGroup> g) : g_(std::move(g)) {}
  int size() const override { return g_->size(); }
  void all_reduce(int rank, const TaskId& task, std::span<float> data,
                  CollectiveIdle* idle) override {
    g_->all_reduce(rank, task, data, idle);
  }
  void poke(int rank) override { g_->poke(rank); }
  void abort() override { g_->abort(); }

 private:
  std::shared_ptr<TpGroup> g_;
};

struct Shared {
  explicit Shared(int n) : world(n), everyone(n), bytes(n) {}
  int world;
  std::mutex mu;
  JobLayout layout;
  bool laid_out = false;
  std::vector<std::unique_ptr<Transport>> transports;          // by job rank
  std::vector<std::shared_ptr<TpGroup>> groups;                // by replica * P + stage
  std::vector<std::unique_ptr<Exchange<std::byte>>> dp;        // by endpoint
  std::vector<std::unique_ptr<Exchange<std::byte>>> replicas;  // by replica
  // Job::exchange's, by replica and peers.
  std::map<std::pair<int, std::vector<int>>, std::unique_ptr<Exchange<std::byte>>> among;
  Exchange<std::byte> everyone;
  Exchange<std::byte> bytes;
};

class LocalJob final : public Job {
 public:
  LocalJob(std::shared_ptr<Shared> s, int rank) : s_(std::move(s)), rank_(rank) {}

  int rank() const override { return rank_; }
  int size() const override { return s_->world; }
  void set_layout(const JobLayout& l) override {
    validate(l, s_->world, "a local job of " + std::to_string(s_->world) + " ranks");
    std::lock_guard lk(s_->mu);
    if (s_->laid_out) {  // the first rank built what the ranks share, for one layout
      const JobLayout& was = s_->layout;
      // Another layout read the exchanges built for the first one: a gather of 2 replicas
      // returned 1 value, then wrote past an exchange's slots.
      if (l.pp != was.pp || l.tp != was.tp || l.dp != was.dp)
        throw InputError("a local job takes one layout: its ranks were laid out as `pp` " +
                         std::to_string(was.pp) + " x `tp` " + std::to_string(was.tp) + " x `dp` " +
                         std::to_string(was.dp) + "; make new jobs (make_local_jobs) for another");
      layout_ = l;
      return;
    }
    layout_ = l;
    s_->layout = l;
    s_->laid_out = true;
    const int per = l.pp * l.tp;
    for (int d = 0; d < l.dp; ++d)
      for (auto& t : make_inproc_transports(per))
        s_->transports.push_back(std::move(t));
    for (int i = 0; i < l.dp * l.pp; ++i)
      s_->groups.push_back(std::make_shared<TpGroup>(i % l.pp, l.tp));
    for (int e = 0; e < per; ++e)
      s_->dp.push_back(std::make_unique<Exchange<std::byte>>(l.dp));
    for (int d = 0; d < l.dp; ++d)
      s_->replicas.push_back(std::make_unique<Exchange<std::byte>>(per));
  }
  int replica() const override { return rank_ / (layout_.pp * layout_.tp); }
  int endpoint() const override { return rank_ % (layout_.pp * layout_.tp); }
  Hosting hosting() override {
    Hosting h;
    h.local = {endpoint()};
    {
      std::lock_guard lk(s_->mu);
      if (!s_->transports[rank_])
        throw Error("local job: rank " + std::to_string(rank_) + " is hosted twice");
      h.transports.push_back(std::move(s_->transports[rank_]));
    }
    // As the MPI job does: nobody starts a step (and sends) before every rank has set its
    // receiver and finished the previous step.
    h.before_step = [this] { s_->everyone.all_gather(rank_, {}); };
    h.make_group = [this](int stage) -> std::unique_ptr<TpCollective> {
      return std::make_unique<SharedGroup>(s_->groups[replica() * layout_.pp + stage]);
    };
    return h;
  }
  std::vector<std::vector<std::byte>> all_gather_bytes(std::span<const std::byte> mine) override {
    return s_->everyone.all_gather(rank_, mine);
  }
  std::vector<std::vector<std::byte>> gather_to_root(std::span<const std::byte> mine) override {
    auto all = s_->bytes.all_gather(rank_, mine);
    if (rank_ != 0) all.clear();
    return all;
  }
  std::vector<std::vector<std::byte>> dp_all_gather(std::span<const std::byte> mine) override {
    return s_->dp[endpoint()]->all_gather(replica(), mine);
  }
  std::vector<std::vector<std::byte>> replica_all_gather(std::span<const std::byte> mine) override {
    return s_->replicas[replica()]->all_gather(endpoint(), mine);
  }
  std::vector<std::vector<std::byte>> exchange(std::span<const std::byte> mine,
                                               std::span<const int> peers) override {
    const std::size_t me = place_among(peers, endpoint(), layout_.pp * layout_.tp);
    Exchange<std::byte>* ex = nullptr;
    {
      std::lock_guard lk(s_->mu);
      auto& slot = s_->among[{replica(), std::vector<int>(peers.begin(), peers.end())}];
      if (!slot) slot = std::make_unique<Exchange<std::byte>>(static_cast<int>(peers.size()));
      ex = slot.get();
    }
    return ex->all_gather(static_cast<int>(me), mine);
  }
  [[noreturn]] void abort(int code) override {
    throw Error("local job: rank " + std::to_string(rank_) + " aborted the job (code " +
                std::to_string(code) + ")");
  }

 private:
  std::shared_ptr<Shared> s_;
  int rank_;
  JobLayout layout_;
};

}  // namespace

std::vector<std::unique_ptr<Job>> make_local_jobs(int world) {
  if (world < 1) throw InputError("local job: world size must be at least 1");
  auto shared = std::make_shared<Shared>(world);
  std::vector<std::unique_ptr<Job>> out;
  for (int r = 0; r < world; ++r)
    out.push_back(std::make_unique<LocalJob>(shared, r));
  return out;
}

}  // namespace rrfp
