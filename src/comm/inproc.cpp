#include "comm/inproc.hpp"

#include <atomic>
#include <mutex>
#include <shared_mutex>
#include <utility>

#include "core/error.hpp"

namespace rrfp {

namespace {

// The routing table shared by the endpoints of one world.
struct Fabric {
  explicit Fabric(int n) : receivers(n), open(n) {
    for (auto& o : open)
      o.store(true);
  }
  std::shared_mutex mu;  // guards receivers (written rarely: set_receiver, shutdown)
  std::vector<Transport::Receiver> receivers;
  std::vector<std::atomic<bool>> open;
};

class InprocTransport final : public Transport {
 public:
  InprocTransport(std::shared_ptr<Fabric> f, int rank) : fabric_(std::move(f)), rank_(rank) {}
  ~InprocTransport() override { shutdown(); }

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(fabric_->receivers.size()); }

  void set_receiver(Receiver r) override {
    refuse_inside_receiver("set_receiver");
    std::unique_lock lk(fabric_->mu);
    fabric_->receivers[rank_] = std::move(r);
  }

  void send(int dst, const MessageTag& tag, Payload payload, SendDone done) override {
    if (dst < 0 || dst >= size())
      throw InputError("inproc transport: destination rank " + std::to_string(dst) +
                       " out of range [0, " + std::to_string(size()) + ")");
    std::exception_ptr err;
    {
      // A receiver runs under the shared lock and may send in turn (an acknowledgement): that
      // send goes on under the lock its thread holds already. Taking a shared_mutex twice on
      // one thread is undefined, and deadlocks where a waiting writer shuts out new readers.
      std::shared_lock<std::shared_mutex> lk;
      if (held_ != fabric_.get()) lk = std::shared_lock(fabric_->mu);
      const Holding holding(fabric_.get());
      const Receiver& r = fabric_->receivers[dst];
      if (!fabric_->open[rank_] || !fabric_->open[dst] || !r)
        err = std::make_exception_ptr(Error("inproc transport: rank " + std::to_string(rank_) +
                                            " cannot send " + to_string(tag) + " to rank " +
                                            std::to_string(dst) + ": endpoint shut down"));
      else
        r(Message{rank_, tag, std::move(payload)});
    }
    if (done) done(err);
  }

  void shutdown() override {
    refuse_inside_receiver("shutdown");
    std::unique_lock lk(fabric_->mu);
    fabric_->open[rank_] = false;
    fabric_->receivers[rank_] = nullptr;
  }

 private:
  // A receiver runs under the fabric's shared lock, which these take exclusively: called from
  // one, the thread waited for itself for good.
  void refuse_inside_receiver(const char* call) const {
    if (held_ == fabric_.get())
      throw Error(std::string("inproc transport: ") + call + "() called from inside a receiver " +
                  "of its transports, which runs under the lock it takes; call it after the " +
                  "receiver returns");
  }

  // Marks this thread as holding a fabric's lock for a scope, however the receiver leaves it.
  struct Holding {
    explicit Holding(const Fabric* f) : outer(std::exchange(held_, f)) {}
    ~Holding() { held_ = outer; }
    Holding(const Holding&) = delete;
    Holding& operator=(const Holding&) = delete;
    const Fabric* outer;
  };

  static thread_local const Fabric* held_;  // the fabric whose lock this thread holds
  std::shared_ptr<Fabric> fabric_;
  int rank_;
};

thread_local const Fabric* InprocTransport::held_ = nullptr;

}  // namespace

std::vector<std::unique_ptr<Transport>> make_inproc_transports(int world) {
  if (world < 1) throw InputError("inproc transport: world size must be at least 1");
  auto fabric = std::make_shared<Fabric>(world);
  std::vector<std::unique_ptr<Transport>> out;
  for (int r = 0; r < world; ++r)
    out.push_back(std::make_unique<InprocTransport>(fabric, r));
  return out;
}

}  // namespace rrfp
