#include "comm/ping_pong.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "core/clock.hpp"
#include "core/error.hpp"
#include "core/format.hpp"

namespace rrfp {

namespace {

// A buffer of `bytes` whose pages are already mapped and written.
Payload written(std::size_t bytes) {
  Payload p = Payload::allocate(bytes);
  std::memset(const_cast<std::byte*>(p.data()), 1, p.size());
  return p;
}

// Waits until `pred` holds, for at most `wait` of this process's running time: a slice of
// the wait that ends half a second or more late was a stop of the process (SIGSTOP, Ctrl-Z, a
// suspended machine), which counts towards no deadline, as in the runtime's watchdog. A rank
// stopped past its deadline, continued by mpirun to be ended, said its healthy peer had sent
// nothing, beside that peer's true line naming it.
template <class Pred>
bool wait_running(SpinPark& cv, std::unique_lock<std::mutex>& lk,
                  std::chrono::steady_clock::duration wait, Pred pred) {
  using Clock = std::chrono::steady_clock;
  constexpr Clock::duration kSlice = std::chrono::milliseconds(250);
  constexpr Clock::duration kStopped = std::chrono::milliseconds(500);
  for (Clock::duration left = wait; left > Clock::duration::zero();) {
    const Clock::duration slice = std::min(left, kSlice);
    const Clock::time_point from = Clock::now();
    if (cv.wait_until(lk, from + slice, pred)) return true;
    const Clock::duration took = Clock::now() - from;
    left -= took - slice >= kStopped ? slice : took;
  }
  return pred();
}

}  // namespace

PingPong::PingPong(Transport& t) : t_(t), link_(std::make_shared<Link>()) {
  link_->owner = this;
  t_.set_receiver([link = link_](Message&& m) { deliver(*link, std::move(m)); });
}

PingPong::~PingPong() {
  std::unique_lock lk(link_->mu);
  link_->owner = nullptr;
  link_->idle.wait(lk, [&] { return link_->inside == 0; });  // a handler under way
}

void PingPong::deliver(Link& link, Message&& m) {
  PingPong* owner;
  {
    std::lock_guard lk(link.mu);
    if (!(owner = link.owner)) return;  // freed: a late message of a failed round
    ++link.inside;
  }
  struct Leave {
    Link& link;
    ~Leave() {
      std::lock_guard lk(link.mu);
      if (--link.inside == 0) link.idle.notify_all();
    }
  } leave{link};
  owner->on_message(std::move(m));
}

// The last round trip carries tag.round == iters - 1 on both sides.
void PingPong::reply(Message&& m) {
  MessageTag tag = m.tag;
  if (o_.initiator) ++tag.round;
  t_.send(o_.peer, tag, next_source(std::move(m.payload)));
}

Payload PingPong::next_source(Payload arrived) {
  if (o_.sources == 0) return arrived;
  return sources_[next_++ % static_cast<std::size_t>(o_.sources)];
}

void PingPong::on_message(Message&& m) {
  std::unique_lock lk(mu_);
  ++arrived_;
  const bool last = m.tag.round == o_.iters - 1;
  if (!o_.reply_in_handler) {
    inbox_.push_back(Arrival{std::move(m), now_ns()});
    cv_.notify_all();
    return;
  }
  if (o_.initiator && last) {
    end_ns_ = now_ns();
    done_ = true;
    cv_.notify_all();
    return;
  }
  lk.unlock();  // a synchronous transport may call back into this handler from send
  reply(std::move(m));
  if (!o_.initiator && last) {
    lk.lock();
    done_ = true;
    cv_.notify_all();
  }
}

double PingPong::round(const PingPongOptions& o, const std::function<void()>& barrier) {
  if (o.stream && o.reply_in_handler)
    throw InputError("ping-pong: a stream hands its messages to the calling thread");
  if (o.stream && o.iters < 2) throw InputError("ping-pong: a stream needs 2 messages or more");
  // None: no message is the last, and the round waited for good (each arrival renewed its
  // deadline).
  if (o.iters < 1)
    throw InputError("ping-pong: iters must be at least 1, got " + std::to_string(o.iters));
  // Past about 292 years the wait's nanoseconds overflowed, and the round failed at once.
  if (!(o.deadline_s > 0 && o.deadline_s <= 1e9))
    throw InputError("ping-pong: deadline_s must be above 0 and at most 1e9 (31 years), got " +
                     fmt_given(o.deadline_s));
  if (o.sources < 0 || o.sources > 16)
    throw InputError("ping-pong: sources must be 0 to 16, got " + std::to_string(o.sources));
  if (o.spin_us < 0 || o.spin_us > 10'000)
    throw InputError("ping-pong: spin_us must be 0 to 10000, got " + std::to_string(o.spin_us));
  {
    // Under the lock: a receive handler of this round reads them (reply_in_handler).
    std::lock_guard lk(mu_);
    o_ = o;
    cv_.set_spin(std::int64_t{o.spin_us} * 1000, [this] { return t_.progress(); });
    done_ = false;
    arrived_ = 0;
    inbox_.clear();
    wake_us_ = 0;
    // Kept from round to round at the same size (rounds without them in between): writing
    // them anew each time would cost more than the rounds.
    if (o.sources > 0 && !sources_.empty() && sources_.front().size() != o.bytes) sources_.clear();
    while (static_cast<int>(sources_.size()) < o.sources)
      sources_.push_back(written(o.bytes));
    next_ = 0;
  }
  // The first message's pages are written before the clock starts: a fresh buffer maps its
  // pages inside the first transfer, which at 32 MiB (always a fresh mapping in glibc) cost more
  // than the transfer itself and made two round trips read a fraction of what 31 MiB read
  // (measured: docs/twin.md, "Calibrating to a transport"). A stream sends this one buffer
  // every time (without sources).
  Payload first;
  if (o.initiator != o.stream || o.both_ways)  // the sender's
    first = o.sources > 0 ? next_source({}) : written(o.bytes);
  barrier();
  // A wait for the next message, not the round: a calibration under --timeout 2 failed a round
  // of 444 round trips that took longer than 2 s with every message arriving.
  const auto wait = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(o.deadline_s));
  // Called holding mu_. How many messages came tells a lost message (the count stops early)
  // from a machine too loaded to go on.
  auto fail = [&] {
    return Error("ping-pong with endpoint " + std::to_string(o.peer) + ": no message within " +
                 fmt("%g", o.deadline_s) + " s (" + std::to_string(arrived_) + " of the " +
                 std::to_string(o.iters) + " messages due here arrived)");
  };
  if (o.stream) {
    const double seconds = stream(o, wait, std::move(first));
    barrier();
    return seconds;
  }
  const std::int64_t start_ns = now_ns();
  if (o.initiator) t_.send(o.peer, MessageTag{}, std::move(first));
  std::unique_lock lk(mu_);
  if (o.reply_in_handler) {  // the handlers reply: the calling thread sees the round's end
    if (!wait_running(cv_, lk, wait, [&] { return done_; })) throw fail();
  }
  while (!done_) {
    if (!wait_running(cv_, lk, wait, [&] { return !inbox_.empty(); })) throw fail();
    Message m = std::move(inbox_.front().m);
    inbox_.pop_front();
    const bool last = m.tag.round == o.iters - 1;
    lk.unlock();
    if (o.initiator && last)
      end_ns_ = now_ns();
    else
      reply(std::move(m));
    lk.lock();
    done_ = last;
  }
  const double seconds = static_cast<double>(end_ns_ - start_ns) / 1e9 / o.iters;
  lk.unlock();
  barrier();
  return o.initiator ? seconds : 0;
}

// The peer sends; the initiator takes the messages over one by one, as a stage's thread takes
// its inputs, and times the first to the last. Both ways, each side does both.
double PingPong::stream(const PingPongOptions& o, std::chrono::steady_clock::duration wait,
                        Payload sent) {
  if (!o.initiator || o.both_ways)
    for (int i = 0; i < o.iters; ++i) {
      MessageTag tag;
      tag.round = i;
      t_.send(o.peer, tag, next_source(sent));
    }
  if (!o.initiator && !o.both_ways) return 0;
  std::int64_t first_ns = 0, last_ns = 0, woken_ns = 0;
  int wakes = 0;
  std::unique_lock lk(mu_);
  for (int i = 0; i < o.iters; ++i) {
    const bool asleep = inbox_.empty();
    if (!wait_running(cv_, lk, wait, [&] { return !inbox_.empty(); }))
      throw Error("stream from endpoint " + std::to_string(o.peer) + ": no message within " +
                  fmt("%g", o.deadline_s) + " s (" + std::to_string(i) + " of the " +
                  std::to_string(o.iters) + " messages came)");
    const std::int64_t now = now_ns();
    if (asleep) {
      woken_ns += now - inbox_.front().at_ns;
      ++wakes;
    }
    inbox_.pop_front();  // its buffer goes back to the transport's pool now, as a used input's
    (i == 0 ? first_ns : last_ns) = now;
  }
  wake_us_ = wakes > 0 ? static_cast<double>(woken_ns) / 1e3 / wakes : 0;
  return static_cast<double>(last_ns - first_ns) / 1e9 / (o.iters - 1);
}

}  // namespace rrfp
