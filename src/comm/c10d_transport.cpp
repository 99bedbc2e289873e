#include "comm/c10d_transport.hpp"

#include <map>

#include "comm/c10d_impl.hpp"
#include "core/error.hpp"
#include "core/format.hpp"

namespace rrfp {

using namespace c10d_detail;

thread_local const C10dTransport::Impl* C10dTransport::Impl::calling = nullptr;

void C10dTransport::Impl::rethrow_send_failure(int dst, const MessageTag& tag) const {
  std::string why = "unknown error";
  try {
    throw;
  } catch (const std::exception& e) {
    why = first_line(e.what());
  } catch (...) {
  }
  throw Error("c10d transport: " + who(rank) + ": sending " + to_string(tag) + " to " + who(dst) +
              " failed (Gloo's send; the peer exited or stopped answering?): " + why);
}

void C10dTransport::Impl::await(c10d::Work& w) {
  if (!w.wait(kMessageWait)) throw Error("c10d transport: a message took longer than a year");
}

C10dTransport::Impl::~Impl() {
  // A thread never started (arguments refused, or no thread to be had) is not joined.
  for (std::thread* t : {&tx, &poster})
    if (t->joinable()) t->join();
  for (Rx& r : rx)
    if (r.thread.joinable()) r.thread.join();
}

bool C10dTransport::Impl::enter() {
  std::lock_guard lk(mu);
  if (closing) return false;
  ++in_callback;
  return true;
}

void C10dTransport::Impl::leave() {
  std::lock_guard lk(mu);
  --in_callback;
  cv.notify_all();
}

C10dTransport::SendDone C10dTransport::Impl::take_done(Send& s) {
  if (closing || !s.done) return nullptr;
  ++in_callback;
  return std::move(s.done);
}

void C10dTransport::Impl::post(Send& s) {
  std::vector<at::Tensor> h{bytes_tensor(s.header.data(), s.header.size())};
  s.header_work = pg->send(h, s.dst, header_tag + (s.first ? kFirst : kHeader));
  Wire w;
  std::memcpy(&w, s.header.data(), sizeof w);
  if (w.flags & kFlagFollows) {
    std::vector<at::Tensor> t{bytes_tensor(s.payload.data(), s.payload.size())};
    s.data_work = pg->send(t, s.dst, w.data_tag);
  }
}

void C10dTransport::Impl::enqueue(std::unique_ptr<Send> s) {
  if (s->payload.size() > kPostBytes || !to_post.empty() || posting) {
    to_post.push_back(std::move(s));
    cv.notify_all();
    return;
  }
  try {  // Gloo may refuse at once (a pair it already knows closed)
    post(*s);
  } catch (...) {
    const int dst = s->dst;
    const MessageTag tag = s->tag;
    keep_failed(std::move(s));
    rethrow_send_failure(dst, tag);
  }
  sends.push_back(std::move(s));
  cv.notify_all();
}

void C10dTransport::Impl::keep_failed(std::unique_ptr<Send> s) {
  if (!s->header_work) return;
  s->done = nullptr;
  sends.push_back(std::move(s));
  cv.notify_all();
}

void C10dTransport::Impl::say_goodbye() {
  for (int q = 0; q < size; ++q) {
    if (q == rank) continue;
    auto s = std::make_unique<Send>();
    Wire w = encode(MessageTag{}, 0);
    w.flags = kFlagClose;
    s->dst = q;
    s->first = !sent_to[q];
    sent_to[q] = true;
    if (!s->first) {
      w.flags |= kFlagFollows;
      w.data_tag = header_tag + kAhead;
      s->payload = Payload::allocate(1);
    }
    s->header.resize(sizeof w);
    std::memcpy(s->header.data(), &w, sizeof w);
    try {
      enqueue(std::move(s));
    } catch (...) {
      // The peer is gone (Gloo knows the pair closed): its loop here ends on Gloo's error.
    }
  }
}

void C10dTransport::Impl::post_loop() {
  for (;;) {
    std::unique_ptr<Send> s;
    {
      std::unique_lock lk(mu);
      cv.wait(lk, [&] { return closing || !to_post.empty(); });
      if (to_post.empty()) return;  // closing, and every close message posted
      s = std::move(to_post.front());
      to_post.pop_front();
      posting = true;
      being_posted = s.get();  // its completion is shutdown()'s to call, should it come now
    }
    std::exception_ptr err;
    try {
      try {
        post(*s);
      } catch (...) {
        rethrow_send_failure(s->dst, s->tag);
      }
    } catch (...) {
      err = std::current_exception();
    }
    SendDone done;
    {
      std::lock_guard lk(mu);
      posting = false;
      being_posted = nullptr;
      if (err) {
        done = take_done(*s);
        keep_failed(std::move(s));
      } else {
        sends.push_back(std::move(s));
      }
      cv.notify_all();
    }
    if (done) {
      Entered in{*this};
      done(err);
    }
  }
}

void C10dTransport::Impl::send_loop() {
  for (;;) {
    Send* s;
    {
      std::unique_lock lk(mu);
      cv.wait(lk, [&] { return !sends.empty() || (closing && to_post.empty() && !posting); });
      if (sends.empty()) return;  // closing, and every send (the close messages too) ended
      s = sends.front().get();
    }
    std::exception_ptr err;
    try {
      try {
        await(*s->header_work);
        if (s->data_work) await(*s->data_work);
      } catch (...) {
        rethrow_send_failure(s->dst, s->tag);
      }
    } catch (...) {
      err = std::current_exception();
    }
    std::unique_ptr<Send> ended;
    SendDone done;
    {
      std::lock_guard lk(mu);
      ended = std::move(sends.front());
      sends.pop_front();
      done = take_done(*ended);
    }
    if (done) {
      Entered in{*this};
      done(err);
    }
  }
}

C10dTransport::C10dTransport(c10::intrusive_ptr<c10d::ProcessGroup> group, int channel,
                             std::function<std::string(int rank)> name)
    : impl_(std::make_unique<Impl>()) {
  if (channel < 0 || channel > 126)
    throw InputError("c10d transport: channel must be between 0 and 126, got " +
                     std::to_string(channel));
  release_closed();  // what earlier transports' peers have closed since
  Impl& d = *impl_;
  d.header_tag = channel << kTagBits;
  d.pg = std::move(group);
  d.name = std::move(name);
  d.rank = d.pg->getRank();
  d.size = d.pg->getSize();
  d.own_rx.assign(d.size, false);
  d.sent_to.assign(d.size, false);
  std::string refused;
  bool started = false;
  {
    std::lock_guard lk(d.mu);
    try {
      if (d.size > 1) d.start_rx(-1);
      d.start(d.tx, [&d] { d.send_loop(); });
      d.start(d.poster, [&d] { d.post_loop(); });
    } catch (const std::system_error& e) {
      refused = e.what();
      d.closing = true;  // what started ends, or waits for its peers, untold
      started = d.running > 0;
      if (started) ++d.running;  // kept for good: its loop may wait for peers that never send
      d.cv.notify_all();
    }
  }
  if (refused.empty()) return;
  if (started) retire(std::move(impl_));
  throw Error("c10d transport: rank " + std::to_string(d.rank) +
              " could not start its threads (the process's thread limit, ulimit -u?): " + refused);
}

// The transports shut down whose threads may still run, and each group's next channel.
struct C10dTransport::Retired {
  using Group = c10::weak_intrusive_ptr<c10d::ProcessGroup>;
  std::mutex mu;
  std::vector<std::unique_ptr<Impl>> kept;
  // A weak reference lets the group go, but keeps its memory, and so its address, until the
  // entry goes (forget_freed()), and with it the group's destructor: its sockets and threads.
  std::map<const c10d::ProcessGroup*, std::pair<Group, int>> next;

  // Under mu: the entries of groups freed, to be dropped by the caller outside mu.
  std::vector<Group> forget_freed() {
    std::vector<Group> gone;
    std::erase_if(next, [&](auto& e) {
      if (!e.second.first.expired()) return false;
      gone.push_back(std::move(e.second.first));
      return true;
    });
    return gone;
  }
};

C10dTransport::Retired& C10dTransport::retired() {
  static auto* const r = new Retired;  // never destroyed: a transport may die at exit
  return *r;
}

void C10dTransport::retire(std::unique_ptr<Impl> impl) {
  {
    Retired& r = retired();
    std::lock_guard lk(r.mu);
    r.kept.push_back(std::move(impl));
  }
  release_closed();
}

std::size_t C10dTransport::release_closed() {
  Retired& r = retired();
  std::vector<std::unique_ptr<Impl>> ended;
  std::size_t left = 0;
  {
    std::lock_guard lk(r.mu);
    std::erase_if(r.kept, [&](std::unique_ptr<Impl>& i) {
      std::lock_guard ilk(i->mu);
      if (i->running > 0) return false;
      ended.push_back(std::move(i));
      return true;
    });
    left = r.kept.size();
  }
  ended.clear();  // joins their threads and lets their groups go, outside the lock
  std::vector<Retired::Group> gone;
  {
    std::lock_guard lk(r.mu);
    gone = r.forget_freed();
  }
  return left;  // `gone` destroys the groups freed, outside the lock
}

int C10dTransport::next_channel(const c10::intrusive_ptr<c10d::ProcessGroup>& group) {
  Retired& r = retired();
  std::vector<Retired::Group> gone;
  std::lock_guard lk(r.mu);
  gone = r.forget_freed();
  auto it = r.next.try_emplace(group.get(), Retired::Group(group), 0).first;
  const int c = it->second.second++;
  if (c > 126) throw Error("c10d: more than 127 runtimes on one process group; make a new group");
  return c;
}

C10dTransport::~C10dTransport() {
  shutdown();
  retire(std::move(impl_));
}

int C10dTransport::rank() const {
  return impl_->rank;
}

int C10dTransport::size() const {
  return impl_->size;
}

void C10dTransport::set_receiver(Receiver r) {
  Impl& d = *impl_;
  std::lock_guard lk(d.mu);
  d.receiver = std::move(r);
  d.receiving = true;
  d.cv.notify_all();
}

void C10dTransport::set_broken_handler(Broken b) {
  Impl& d = *impl_;
  std::lock_guard lk(d.mu);
  if (d.receiving) throw Error("c10d transport: set the broken handler before the receiver");
  d.broken = std::move(b);
}

void C10dTransport::send(int dst, const MessageTag& tag, Payload payload, SendDone done) {
  Impl& d = *impl_;
  if (dst < 0 || dst >= d.size)
    throw InputError("c10d transport: destination " + std::to_string(dst) +
                     " is not a rank of the group (0.." + std::to_string(d.size - 1) + ")");
  // Gloo has no pair to a rank's own self (it crashed inside Gloo); the runtime never sends to
  // its own endpoint, whose inputs it hands over in memory.
  if (dst == d.rank)
    throw InputError("c10d transport: destination " + std::to_string(dst) +
                     " is this rank itself, which Gloo cannot send to");
  auto fail = [&] {
    if (done)
      done(std::make_exception_ptr(
          Error("c10d transport: rank " + std::to_string(d.rank) + " is shut down")));
  };
  if (d.closed.load()) return fail();
  auto s = std::make_unique<Impl::Send>();
  Wire w = encode(tag, payload.size());
  const bool follows = payload.size() > kInlineBytes;
  // The header leaves at its own size: the receive's buffer may be larger (kSlotBytes).
  s->header.resize(sizeof w + (follows ? 0 : payload.size()));
  if (!follows && !payload.empty())
    std::memcpy(s->header.data() + sizeof w, payload.data(), payload.size());
  s->done = std::move(done);
  s->dst = dst;
  s->tag = tag;
  std::lock_guard lk(d.mu);  // the header and its data leave in the order of the queue
  if (d.closing) {
    done = std::move(s->done);
    return fail();
  }
  // The first message to a rank goes to its receive from any source, which then starts a loop
  // for this sender alone; every later one goes to that loop, whose receive posted ahead takes
  // a payload of up to kAheadBytes. (Only this order keeps a payload sent ahead from meeting
  // the loop from any source, which has no such receive.)
  const bool first = !d.sent_to[dst];
  d.sent_to[dst] = true;
  if (follows) {
    w.flags |= kFlagFollows;
    w.data_tag = !first && payload.size() <= kAheadBytes
                     ? d.header_tag + kAhead
                     : d.header_tag + kTagsBefore +
                           static_cast<std::int32_t>(d.next_tag.fetch_add(1) %
                                                     ((1u << kTagBits) - kTagsBefore));
  }
  std::memcpy(s->header.data(), &w, sizeof w);
  s->payload = std::move(payload);
  s->first = first;
  d.enqueue(std::move(s));
}

void C10dTransport::shutdown() {
  Impl& d = *impl_;
  if (Impl::calling == &d)  // it would wait for itself
    throw Error(
        "c10d transport: shutdown() called from inside its receiver, broken handler or a send's "
        "completion; call it after the callback returns");
  std::lock_guard once(d.shutdown_mu);
  if (d.closed.exchange(true)) return;
  std::vector<SendDone> dropped;
  {
    std::unique_lock lk(d.mu);
    d.closing = true;  // no callback starts after this
    for (auto* q : {&d.sends, &d.to_post})
      for (auto& s : *q)
        if (s->done) dropped.push_back(std::exchange(s->done, nullptr));
    if (d.being_posted && d.being_posted->done)  // post() reads no completion
      dropped.push_back(std::exchange(d.being_posted->done, nullptr));
    d.say_goodbye();
    d.cv.notify_all();
    d.cv.wait(lk, [&] { return d.in_callback == 0; });  // those under way
  }
  // The sends go on (Gloo holds their buffers; their peers' loops take them), untold.
  const auto err = std::make_exception_ptr(
      Error("c10d transport: rank " + std::to_string(d.rank) + " shut down with sends in flight"));
  for (auto& done : dropped)
    done(err);
}

}  // namespace rrfp
