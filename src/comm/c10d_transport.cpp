#include "comm/c10d_transport.hpp"

#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include "comm/buffer_pool.hpp"
#include "comm/wire.hpp"
#include "core/error.hpp"
#include "core/format.hpp"

namespace rrfp {
namespace {

// A channel's tags start at channel << 24: the headers of later messages (kHeader, received
// per source), the header of each sender's first message to a rank (kFirst, received from any
// source), the payloads received into a receive posted ahead (kAhead), then one tag for each
// other payload.
constexpr int kTagBits = 24;
constexpr int kHeader = 0, kFirst = 1, kAhead = 2, kTagsBefore = 3;
constexpr std::size_t kSlotBytes = sizeof(Wire) + C10dTransport::kInlineBytes;  // 8 KiB
// A payload received ahead of its header and smaller than this is copied out, so that the
// receive's buffer (kAheadBytes) is held only by a payload of at least a quarter of its size.
constexpr std::size_t kCopyOutBytes = C10dTransport::kAheadBytes / 4;

// A uint8 tensor over `n` bytes at `p`; the caller keeps the memory until the work that uses
// it has completed.
at::Tensor bytes_tensor(const std::byte* p, std::size_t n) {
  return at::from_blob(const_cast<std::byte*>(p), {static_cast<std::int64_t>(n)},
                       at::TensorOptions().dtype(at::kByte));
}

}  // namespace

struct C10dTransport::Impl {
  c10::intrusive_ptr<c10d::ProcessGroup> pg;
  int rank = 0, size = 1;
  int header_tag = 0;                      // channel << kTagBits
  std::atomic<std::uint32_t> next_tag{0};  // data tags follow kTagsBefore
  std::shared_ptr<BufferPool> pool = std::make_shared<BufferPool>();
  Receiver receiver;
  std::atomic<bool> closed{false};
  std::function<std::string(int)> name;  // a rank of the group, as errors say it

  struct Send {
    std::vector<std::byte> header;
    Payload payload;  // kept until its data message completes
    c10::intrusive_ptr<c10d::Work> header_work, data_work;
    SendDone done;
    int dst = 0;
    MessageTag tag;      // for the error, should Gloo fail it
    bool first = false;  // the first message to dst: to its receive from any source
  };

  std::string who(int r) const { return name ? name(r) : "rank " + std::to_string(r); }

  // Gloo's own failure of a send ("[../gloo/transport/tcp/pair.cc:589] Read error ...:
  // Connection reset by peer") named neither this process, the peer nor the message: said
  // here with all three, Gloo's first line kept. Rethrows the current exception so.
  [[noreturn]] void rethrow_send_failure(int dst, const MessageTag& tag) const {
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

  // A receiving loop: one takes headers from any source, and each source that has sent here
  // gets one of its own. A receive posted for one source lets Gloo move the message as soon as
  // it is sent; one from any source first waits for the sender's notice, then answers it (a
  // round trip more per message).
  struct Rx {
    // Reused for every header. c10d may still hold it after an aborted receive: it lives as
    // long as Impl.
    std::vector<std::byte> header = std::vector<std::byte>(kSlotBytes);
    c10::intrusive_ptr<c10d::Work> current;  // being waited on, for abort
    // A source's own loop keeps a receive posted on kAhead, so a payload that follows its
    // header finds it there without the round trip of a receive posted once the header is in.
    Payload ahead;
    c10::intrusive_ptr<c10d::Work> ahead_work;  // under mu; aborted at shutdown
    std::thread thread;
  };

  // Everything below is guarded by mu.
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false, receiving = false;
  c10::intrusive_ptr<c10d::Work> tx_wait;   // the send being waited on, for abort
  std::deque<std::unique_ptr<Send>> sends;  // in flight, in the order they were made
  // Made, to be posted by the poster thread, in order: a payload over kPostBytes, and every
  // send made while one is waiting or being posted (posting), so that none overtakes another.
  std::deque<std::unique_ptr<Send>> to_post;
  bool posting = false;
  std::deque<Rx> rx;          // [0]: any source; then one per source seen
  std::vector<bool> own_rx;   // by source: has a loop of its own
  std::vector<bool> sent_to;  // by destination: a message went there before
  std::thread tx, poster;

  // Waits for `w` (made current under mu so shutdown can abort it); false once stopping.
  bool wait(c10::intrusive_ptr<c10d::Work> w, c10::intrusive_ptr<c10d::Work>& current) {
    {
      std::lock_guard lk(mu);
      if (stop) {
        w->abort();
        return false;
      }
      current = w;
    }
    bool ok = false;
    std::exception_ptr err;
    try {
      ok = w->wait();
    } catch (...) {
      err = std::current_exception();
    }
    std::lock_guard lk(mu);
    current.reset();
    if (stop) return false;
    if (err) std::rethrow_exception(err);
    return ok;
  }

  // Starts the loop of headers from any source (src < 0) or from `src` alone; under mu.
  void start_rx(int src) {
    if (stop || (src >= 0 && own_rx[src])) return;
    if (src >= 0) own_rx[src] = true;
    Rx& r = rx.emplace_back();
    r.thread = std::thread([this, &r, src] { receive_loop(r, src); });
  }

  // Posts r's receive ahead (its own source's loop): into a fresh buffer from the pool, the
  // last one having gone with its payload. False once stopping.
  bool post_ahead(Rx& r, int src) {
    // A buffer still ours alone (its payload was copied out) is posted again.
    if (r.ahead.empty() || r.ahead.owner().use_count() > 1)
      r.ahead = pool->get(C10dTransport::kAheadBytes);
    std::vector<at::Tensor> t{bytes_tensor(r.ahead.data(), r.ahead.size())};
    auto w = pg->recv(t, src, header_tag + kAhead);
    std::lock_guard lk(mu);
    if (stop) {
      w->abort();
      return false;
    }
    r.ahead_work = std::move(w);
    return true;
  }

  // The payload that follows header `w` from `from`: received into the receive posted ahead
  // (kAhead), or into a receive posted now for its own tag. Empty with `ok` false once stopping.
  Payload take_payload(Rx& r, int src, int from, const Wire& w, bool& ok) {
    if (w.data_tag == header_tag + kAhead) {
      if (src < 0 || w.size > C10dTransport::kAheadBytes)
        throw Error("c10d transport: rank " + std::to_string(from) +
                    " sent a payload ahead that no receive awaits");
      c10::intrusive_ptr<c10d::Work> aw;
      {
        std::lock_guard lk(mu);
        aw = r.ahead_work;
      }
      if (!(ok = wait(aw, r.current))) return {};
      {
        std::lock_guard lk(mu);
        r.ahead_work.reset();  // done: nothing for shutdown to abort until the next is posted
      }
      Payload p = w.size < kCopyOutBytes ? Payload::copy_of(r.ahead.bytes().first(w.size))
                                         : Payload(r.ahead.owner(), r.ahead.data(), w.size);
      ok = post_ahead(r, src);
      return p;
    }
    Payload p = Payload::allocate(w.size);
    std::vector<at::Tensor> dt{bytes_tensor(p.data(), p.size())};
    ok = wait(pg->recv(dt, from, w.data_tag), r.current);
    return p;
  }

  void receive_loop(Rx& r, int src) {
    {
      std::unique_lock lk(mu);
      cv.wait(lk, [&] { return receiving || stop; });
      if (stop) return;
    }
    try {
      if (src >= 0 && !post_ahead(r, src)) return;
      for (;;) {
        std::vector<at::Tensor> ht{bytes_tensor(r.header.data(), r.header.size())};
        auto hw = src < 0 ? pg->recvAnysource(ht, header_tag + kFirst)
                          : pg->recv(ht, src, header_tag + kHeader);
        if (!wait(hw, r.current)) return;
        const int from = src < 0 ? hw->sourceRank() : src;
        Wire w;
        std::memcpy(&w, r.header.data(), sizeof w);
        Payload p;
        if (w.flags & kFlagFollows) {
          bool ok = false;
          p = take_payload(r, src, from, w, ok);
          if (!ok) return;
        } else if (const std::size_t n = std::min<std::size_t>(w.size, kInlineBytes); n) {
          p = Payload::copy_of(std::span(r.header).subspan(sizeof w, n));
        }
        if (!closed.load()) receiver(Message{from, decode(w), std::move(p)});
        if (src < 0) {
          std::lock_guard lk(mu);
          start_rx(from);  // its later messages: a receive posted for it alone
        }
      }
    } catch (const std::exception&) {
      // A broken group: nothing more arrives; the runtime's watchdog names what is missing.
    }
  }

  // Posts s's header and its payload to Gloo, which writes them into the socket in the calling
  // thread where the receive is posted (up to the socket's buffer, sized to the message): a
  // copy of the whole payload. Throws what Gloo throws.
  void post(Send& s) {
    std::vector<at::Tensor> h{bytes_tensor(s.header.data(), s.header.size())};
    s.header_work = pg->send(h, s.dst, header_tag + (s.first ? kFirst : kHeader));
    if (s.payload.size() > C10dTransport::kInlineBytes) {
      Wire w;
      std::memcpy(&w, s.header.data(), sizeof w);
      std::vector<at::Tensor> t{bytes_tensor(s.payload.data(), s.payload.size())};
      s.data_work = pg->send(t, s.dst, w.data_tag);
    }
  }

  // s, whose post threw: Gloo holds the header's buffer until that send ends once the header
  // was posted, so the send loop keeps s till then (freed here, Gloo would write from freed
  // memory), with no one to tell. Under mu.
  void keep_failed(std::unique_ptr<Send> s) {
    if (!s->header_work) return;
    s->done = nullptr;
    sends.push_back(std::move(s));
    cv.notify_all();
  }

  // Posts what send() queued, in order. A large payload's copy into the socket then takes this
  // thread's time, not the sending stage's (4 MiB: about 1.2 ms, measured).
  void post_loop() {
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

  void send_loop() {
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
};

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

C10dTransport::~C10dTransport() {
  shutdown();
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

void C10dTransport::send(int dst, const MessageTag& tag, Payload payload, SendDone done) {
  Impl& d = *impl_;
  if (dst < 0 || dst >= d.size)
    throw InputError("c10d transport: destination " + std::to_string(dst) +
                     " is not a rank of the group (0.." + std::to_string(d.size - 1) + ")");
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
  }
}

}  // namespace rrfp
