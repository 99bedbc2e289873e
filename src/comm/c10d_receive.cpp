// The c10d transport's receiving side (c10d_impl.hpp): a loop of headers from any source, and
// one per source that has sent here, each with a receive posted ahead for its next payload.
// A loop runs until its peers' close messages (or Gloo's error): shutdown() aborts no receive,
// which Gloo cannot take back.
#include "comm/c10d_impl.hpp"
#include "core/error.hpp"
#include "core/format.hpp"

namespace rrfp {

using namespace c10d_detail;

void C10dTransport::Impl::start_rx(int src) {
  // Started after shutdown() too: the new source's close message comes to its own loop.
  if (src >= 0 && own_rx[src]) return;
  if (src >= 0) own_rx[src] = true;
  Rx& r = rx.emplace_back();
  start(r.thread, [this, &r, src] { receive_loop(r, src); });
}

void C10dTransport::Impl::post_ahead(Rx& r, int src) {
  // A buffer still ours alone (its payload was copied out) is posted again.
  if (r.ahead.empty() || r.ahead.owner().use_count() > 1)
    r.ahead = pool->get(C10dTransport::kAheadBytes);
  std::vector<at::Tensor> t{bytes_tensor(r.ahead.data(), r.ahead.size())};
  r.ahead_work = pg->recv(t, src, header_tag + kAhead);
}

Payload C10dTransport::Impl::take_payload(Rx& r, int src, int from, const Wire& w) {
  if (w.data_tag == header_tag + kAhead) {
    if (src < 0 || w.size > C10dTransport::kAheadBytes || !r.ahead_work)
      throw Error("c10d transport: rank " + std::to_string(from) +
                  " sent a payload ahead that no receive awaits");
    await(*r.ahead_work);
    r.ahead_work.reset();
    Payload p = w.size < kCopyOutBytes ? Payload::copy_of(r.ahead.bytes().first(w.size))
                                       : Payload(r.ahead.owner(), r.ahead.data(), w.size);
    post_ahead(r, src);
    return p;
  }
  Payload p = Payload::allocate(w.size);
  std::vector<at::Tensor> dt{bytes_tensor(p.data(), p.size())};
  await(*pg->recv(dt, from, w.data_tag));
  return p;
}

void C10dTransport::Impl::receive_loop(Rx& r, int src) {
  {
    std::unique_lock lk(mu);
    cv.wait(lk, [&] { return receiving || closing; });
  }
  try {
    if (src >= 0) post_ahead(r, src);
    for (int firsts = 0;;) {
      std::vector<at::Tensor> ht{bytes_tensor(r.header.data(), r.header.size())};
      auto hw = src < 0 ? pg->recvAnysource(ht, header_tag + kFirst)
                        : pg->recv(ht, src, header_tag + kHeader);
      await(*hw);
      const int from = src < 0 ? hw->sourceRank() : src;
      Wire w;
      std::memcpy(&w, r.header.data(), sizeof w);
      if (w.flags & kFlagClose) {
        if (src >= 0) {  // and a byte to the receive posted ahead, which is not posted again
          settle(r);
          return;
        }
        if (++firsts == size - 1) return;  // every peer has sent its one message here
        continue;
      }
      Payload p;
      if (w.flags & kFlagFollows) {
        p = take_payload(r, src, from, w);
      } else if (const std::size_t n = std::min<std::size_t>(w.size, kInlineBytes); n) {
        p = Payload::copy_of(std::span(r.header).subspan(sizeof w, n));
      }
      if (enter()) {
        Entered in{*this};
        receiver(Message{from, decode(w), std::move(p)});
      }
      if (src < 0) {
        std::lock_guard lk(mu);
        start_rx(from);  // its later messages: a receive posted for it alone
        if (++firsts == size - 1) return;
      }
    }
  } catch (...) {
    report_broken(src);
    settle(r);
  }
}

void C10dTransport::Impl::settle(Rx& r) noexcept {
  if (!r.ahead_work) return;
  try {
    await(*r.ahead_work);  // Gloo's error of the pair ends it; a peer silent for ever, never
  } catch (...) {
  }
  r.ahead_work.reset();
}

void C10dTransport::Impl::report_broken(int src) noexcept {
  if (closed.load()) return;  // a peer gone after shutdown: no one to tell
  try {
    std::string text;
    try {
      throw;
    } catch (const Error& e) {
      text = e.what();  // ours, naming the rank already
    } catch (const std::exception& e) {
      text =
          "c10d transport: " + who(rank) + ": receiving from " +
          (src < 0 ? std::string("any rank") : who(src)) +
          " failed (Gloo's receive; a peer exited or stopped answering?): " + first_line(e.what());
    }
    if (!enter()) return;
    Entered in{*this};
    std::call_once(broken_once, [&] {
      if (broken) broken(std::make_exception_ptr(Error(text)));
    });
  } catch (...) {
    // Not an exception of ours or the standard's, or no memory for the message: the runtime's
    // watchdog still names what is missing.
  }
}

}  // namespace rrfp
