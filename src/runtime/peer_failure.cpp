// How the processes of one pipeline tell each other that a step failed. Without it a failure
// was the failing process's alone: its peers waited for messages that would never come until
// their watchdog's timeout (two minutes by default), and then reported a stall that named the
// wrong cause.
#include <algorithm>
#include <condition_variable>
#include <memory>
#include <mutex>

#include "core/clock.hpp"
#include "runtime/control_text.hpp"
#include "runtime/errors.hpp"
#include "runtime/runtime.hpp"

namespace rrfp {

namespace {

// Far above any one-line error, far below what a header-inline message may carry.
constexpr std::size_t kMaxAbortText = 1000;

// What an abort's `round` says of the failure: a task's (every peer is alive), a stall, the
// teller's transport broken, or its step cancelled (for the last three, the process waited for
// may be gone, so that none of its receivers waits for a gone process in a later collective;
// they raise a stall, a broken transport's error and a cancel's, as the teller did).
constexpr std::int32_t kAbortInTask = 0, kAbortStalled = 1, kAbortBroken = 2, kAbortCancelled = 3;

// Long enough for a message to leave over any live transport; short, because a peer that
// has stopped answering would otherwise hold up this process's own report.
constexpr std::int64_t kAbortSendDeadlineNs = 1'000'000'000;

// At most `n` bytes of `s`, cut before a character, not inside one (Python refuses a message
// that is not UTF-8, and raised UnicodeDecodeError where the peer's StageError was due), on one
// line.
std::string utf8_prefix(std::string s, std::size_t n) {
  if (s.size() > n) {
    while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80)
      --n;  // s[n] continues a character that starts before it
    s.resize(n);
  }
  std::replace_if(
      s.begin(), s.end(), [](char c) { return c == '\n' || c == '\r'; }, ' ');
  return s;
}

}  // namespace

std::string Runtime::peer_name(int endpoint) const {
  if (peer_name_) return peer_name_(endpoint);
  return endpoint_name(endpoint, opt_.tp);
}

void Runtime::tell_peers(int step, const std::exception_ptr& why) {
  std::vector<int> remote;
  for (int e = 0; e < m_.pp() * std::max(1, opt_.tp); ++e)
    if (std::find(local_.begin(), local_.end(), e) == local_.end()) remote.push_back(e);
  if (remote.empty() || endpoints_.empty()) return;
  std::string text = "unknown error";
  try {
    std::rethrow_exception(why);
  } catch (const std::exception& e) {
    if (from_peer(e)) return;  // the peers heard it from where it began
    text = e.what();
  } catch (...) {
  }
  const bool in_task = failed_in_task(why);  // then every peer is alive
  bool broken = false;                       // the step failed with its transport's break
  bool cancelled = false;                    // or with a cancel()
  {
    std::lock_guard lk(cancel_mu_);
    broken = (transport_broken_ && transport_broken_ == why) || failure_.failed_by_send(why);
    cancelled = cancelled_ && cancelled_ == why;
  }
  text = utf8_prefix(text, kMaxAbortText);
  MessageTag tag;
  tag.step = step;
  tag.control = Control::Abort;
  tag.round = in_task     ? kAbortInTask
              : broken    ? kAbortBroken
              : cancelled ? kAbortCancelled
                          : kAbortStalled;
  // Shared with the completions, which may come after this stops waiting.
  struct Sent {
    std::mutex mu;
    std::condition_variable cv;
    std::size_t done = 0;
  };
  auto sent = std::make_shared<Sent>();
  std::size_t posted = 0;
  const Payload payload = payload_of_text(text);
  for (int dst : remote) {
    try {
      endpoints_[0]->send(dst, tag, payload, [sent](std::exception_ptr) {
        std::lock_guard lk(sent->mu);
        ++sent->done;
        sent->cv.notify_all();
      });
      ++posted;
    } catch (const std::exception&) {
      // A transport already shut down: that peer learns from its own watchdog.
    }
  }
  std::unique_lock lk(sent->mu);
  sent->cv.wait_for(lk, std::chrono::nanoseconds(kAbortSendDeadlineNs),
                    [&] { return sent->done >= posted; });
}

void Runtime::on_peer_abort(const Message& msg) {
  const std::string text = utf8_prefix(text_of_payload(msg.payload), kMaxAbortText);
  if (on_peer_failure_) on_peer_failure_();
  const int step = msg.tag.step;
  const std::string who = peer_name(msg.src);
  std::lock_guard lk(cancel_mu_);  // run_step's commit of a completed step takes it too
  std::string what = who + " failed step " + std::to_string(step);
  if (step <= completed_step_)
    what +=
        ", which this process had completed: the processes no longer agree on that step "
        "(its error: " +
        text + ")";
  else
    what += ": " + text;
  if (!cancel_)
    cancel_ = msg.tag.round == kAbortInTask      ? std::make_exception_ptr(PeerFailure(what))
              : msg.tag.round == kAbortBroken    ? std::make_exception_ptr(PeerBroken(what))
              : msg.tag.round == kAbortCancelled ? std::make_exception_ptr(PeerCancelled(what))
                                                 : std::make_exception_ptr(PeerStall(what));
  failure_.fail(cancel_);
}

void Runtime::on_transport_broken(std::exception_ptr why, const Stage& st, int r) {
  {
    std::lock_guard lk(cancel_mu_);
    if (!transport_broken_) transport_broken_ = why;
  }
  // What it waits for will not come: the step waited for its watchdog (two minutes by
  // default), whose report named the cause last. A rank that waits for nothing more (a peer
  // done with its part of the step has exited) finishes its step.
  if (st.waits_on_other_stages(r)) failure_.fail(std::move(why));
}

std::string Runtime::transport_broken_text() {
  std::exception_ptr b;
  {
    std::lock_guard lk(cancel_mu_);
    b = transport_broken_;
  }
  if (!b) return {};
  try {
    std::rethrow_exception(b);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "a transport broke";
  }
}

}  // namespace rrfp
