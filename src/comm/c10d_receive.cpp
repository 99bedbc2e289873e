// The c10d transport's receiving side (c10d_impl.hpp): a loop of headers from any source, and
// one per source that has sent here, each with a receive posted ahead for its next payload.
#include "comm/c10d_impl.hpp"
#include "core/error.hpp"
#include "core/format.hpp"

namespace rrfp {

using namespace c10d_detail;

void C10dTransport::Impl::start_rx(int src) {
  if (stop || (src >= 0 && own_rx[src])) return;
  if (src >= 0) own_rx[src] = true;
  Rx& r = rx.emplace_back();
  r.thread = std::thread([this, &r, src] { receive_loop(r, src); });
}

bool C10dTransport::Impl::post_ahead(Rx& r, int src) {
  // A buffer still ours alone (its payload was copied out) is posted again.
  if (r.ahead.empty() || r.ahead.owner().use_count() > 1)
    r.ahead = pool->get(C10dTransport::kAheadBytes);
  std::vector<at::Tensor> t{bytes_tensor(r.ahead.data(), r.ahead.size())};
  auto w = pg->recv(t, src, header_tag + kAhead);
  std::lock_guard lk(mu);
  if (stop) {
    w->abort();
    aborted.push_back(std::move(w));  // into r.ahead, kept with the Impl
    return false;
  }
  r.ahead_work = std::move(w);
  return true;
}

Payload C10dTransport::Impl::take_payload(Rx& r, int src, int from, const Wire& w, bool& ok) {
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
  if (!ok) {  // the receive stays posted into p
    std::lock_guard lk(mu);
    receiving_into.push_back(std::move(p));
    return {};
  }
  return p;
}

void C10dTransport::Impl::receive_loop(Rx& r, int src) {
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
  } catch (...) {
    report_broken(src);
  }
}

void C10dTransport::Impl::report_broken(int src) noexcept {
  if (closed.load()) return;  // a shutdown's aborted receive, not a failure
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
    std::call_once(broken_once, [&] {
      if (broken) broken(std::make_exception_ptr(Error(text)));
    });
  } catch (...) {
    // Not an exception of ours or the standard's, or no memory for the message: the runtime's
    // watchdog still names what is missing.
  }
}

}  // namespace rrfp
