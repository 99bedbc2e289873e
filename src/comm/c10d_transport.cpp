#include "comm/c10d_transport.hpp"

#include "comm/c10d_impl.hpp"
#include "core/error.hpp"
#include "core/format.hpp"

namespace rrfp {

using namespace c10d_detail;

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

bool C10dTransport::Impl::wait(c10::intrusive_ptr<c10d::Work> w,
                               c10::intrusive_ptr<c10d::Work>& current) {
  {
    std::lock_guard lk(mu);
    if (stop) {
      w->abort();
      aborted.push_back(std::move(w));
      return false;
    }
    current = w;
  }
  bool ok = false;
  std::exception_ptr err;
  try {
    ok = w->wait(kMessageWait);
  } catch (...) {
    err = std::current_exception();
  }
  std::lock_guard lk(mu);
  if (stop) {
    aborted.push_back(std::move(current));
    return false;
  }
  current.reset();
  if (err) std::rethrow_exception(err);
  return ok;
}

void C10dTransport::Impl::post(Send& s) {
  std::vector<at::Tensor> h{bytes_tensor(s.header.data(), s.header.size())};
  s.header_work = pg->send(h, s.dst, header_tag + (s.first ? kFirst : kHeader));
  if (s.payload.size() > C10dTransport::kInlineBytes) {
    Wire w;
    std::memcpy(&w, s.header.data(), sizeof w);
    std::vector<at::Tensor> t{bytes_tensor(s.payload.data(), s.payload.size())};
    s.data_work = pg->send(t, s.dst, w.data_tag);
  }
}

void C10dTransport::Impl::keep_failed(std::unique_ptr<Send> s) {
  if (!s->header_work) return;
  s->done = nullptr;
  sends.push_back(std::move(s));
  cv.notify_all();
}

void C10dTransport::Impl::post_loop() {
  for (;;) {
    std::unique_ptr<Send> s;
    {
      std::unique_lock lk(mu);
      cv.wait(lk, [&] { return stop || !to_post.empty(); });
      if (stop) return;
      s = std::move(to_post.front());
      to_post.pop_front();
      posting = true;
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
    SendDone done = err ? std::move(s->done) : nullptr;
    {
      std::lock_guard lk(mu);
      posting = false;
      if (err)
        keep_failed(std::move(s));
      else
        sends.push_back(std::move(s));
      cv.notify_all();
    }
    if (done) done(err);
  }
}

void C10dTransport::Impl::send_loop() {
  for (;;) {
    Send* s;
    {
      std::unique_lock lk(mu);
      cv.wait(lk, [&] { return stop || !sends.empty(); });
      if (stop) return;
      s = sends.front().get();
    }
    std::exception_ptr err;
    try {
      try {
        if (!wait(s->header_work, tx_wait)) return;
        if (s->data_work && !wait(s->data_work, tx_wait)) return;
      } catch (...) {
        rethrow_send_failure(s->dst, s->tag);
      }
    } catch (...) {
      err = std::current_exception();
    }
    std::unique_ptr<Send> done;
    {
      std::lock_guard lk(mu);
      done = std::move(sends.front());
      sends.pop_front();
    }
    if (done->done) done->done(err);
  }
}

C10dTransport::C10dTransport(c10::intrusive_ptr<c10d::ProcessGroup> group, int channel,
                             std::function<std::string(int rank)> name)
    : impl_(std::make_unique<Impl>()) {
  if (channel < 0 || channel > 126)
    throw InputError("c10d transport: channel must be between 0 and 126, got " +
                     std::to_string(channel));
  Impl& d = *impl_;
  d.header_tag = channel << kTagBits;
  d.pg = std::move(group);
  d.name = std::move(name);
  d.rank = d.pg->getRank();
  d.size = d.pg->getSize();
  d.own_rx.assign(d.size, false);
  d.sent_to.assign(d.size, false);
  {
    std::lock_guard lk(d.mu);
    d.start_rx(-1);
  }
  d.tx = std::thread([&d] { d.send_loop(); });
  d.poster = std::thread([&d] { d.post_loop(); });
}

// At most 127 transports on a process group (its channels), each keeping its receive buffers
// (8 KiB of header and 4 MiB posted ahead per peer that sent to it) and its unfinished sends.
void C10dTransport::retire(std::unique_ptr<Impl> impl) {
  impl->pool.reset();  // its free buffers: no receive is posted into one (receiving_into)
  static auto* const mu = new std::mutex;  // never destroyed: a transport may die at exit
  static auto* const kept = new std::vector<std::unique_ptr<Impl>>;
  std::lock_guard lk(*mu);
  kept->push_back(std::move(impl));
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
  if (d.stop) {
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
  if (s->payload.size() > kPostBytes || !d.to_post.empty() || d.posting) {
    d.to_post.push_back(std::move(s));
    d.cv.notify_all();
    return;
  }
  try {  // Gloo may refuse at once (a pair it already knows closed)
    d.post(*s);
  } catch (...) {
    d.keep_failed(std::move(s));
    d.rethrow_send_failure(dst, tag);
  }
  d.sends.push_back(std::move(s));
  d.cv.notify_all();
}

void C10dTransport::shutdown() {
  Impl& d = *impl_;
  if (d.closed.exchange(true)) return;
  std::deque<std::unique_ptr<Impl::Send>> left;
  {
    std::lock_guard lk(d.mu);
    d.stop = true;  // no receiving loop starts after this
    for (Impl::Rx& r : d.rx) {
      if (r.current) r.current->abort();
      if (r.ahead_work) r.ahead_work->abort();
    }
    if (d.tx_wait) d.tx_wait->abort();
    d.cv.notify_all();
  }
  for (Impl::Rx& r : d.rx)
    r.thread.join();
  d.tx.join();
  d.poster.join();
  {
    std::lock_guard lk(d.mu);
    left.swap(d.sends);
    for (auto& s : d.to_post)  // never posted: Gloo holds none of their buffers
      left.push_back(std::move(s));
    d.to_post.clear();
  }
  for (auto& s : left) {
    for (auto* w : {s->header_work.get(), s->data_work.get()})
      if (w && !w->isCompleted()) w->abort();
    if (s->done)
      s->done(std::make_exception_ptr(Error("c10d transport: rank " + std::to_string(d.rank) +
                                            " shut down with sends in flight")));
    s->done = nullptr;
  }
  std::lock_guard lk(d.mu);
  for (auto& s : left)
    d.unfinished.push_back(std::move(s));  // Gloo may still read their buffers
}

}  // namespace rrfp
