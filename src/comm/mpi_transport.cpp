#include "comm/mpi_transport.hpp"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <iostream>
#include <limits>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "comm/mpi_check.hpp"
#include "comm/mpi_impl.hpp"
#include "core/clock.hpp"
#include "core/error.hpp"

namespace rrfp {

using namespace mpi_detail;

BytesType::BytesType(std::uint64_t n, const MpiLargeMessages& large) {
  if (n <= large.largest_plain) {
    count = static_cast<int>(n);
    return;
  }
  const std::uint64_t blocks = n / static_cast<std::uint64_t>(large.block);
  const std::uint64_t rest = n % static_cast<std::uint64_t>(large.block);
  if (blocks > static_cast<std::uint64_t>(std::numeric_limits<int>::max()))
    throw Error("mpi transport: a payload of " + std::to_string(n) + " bytes is past any count");
  MPI_Datatype block = MPI_DATATYPE_NULL, body = MPI_DATATYPE_NULL;
  mpi_check(MPI_Type_contiguous(large.block, MPI_BYTE, &block), "MPI_Type_contiguous");
  if (const int err = MPI_Type_contiguous(static_cast<int>(blocks), block, &body);
      err != MPI_SUCCESS) {
    MPI_Type_free(&block);
    mpi_check(err, "MPI_Type_contiguous");
  }
  int lengths[2] = {1, static_cast<int>(rest)};
  MPI_Aint at[2] = {0, static_cast<MPI_Aint>(blocks * static_cast<std::uint64_t>(large.block))};
  MPI_Datatype parts[2] = {body, MPI_BYTE};
  const int err = MPI_Type_create_struct(rest > 0 ? 2 : 1, lengths, at, parts, &type);
  MPI_Type_free(&body);  // before a failure is thrown: nothing else would free them
  MPI_Type_free(&block);
  mpi_check(err, "MPI_Type_create_struct");
  made = true;  // freed by release() from here, the constructor's throw included
  count = 1;
  try {
    mpi_check(MPI_Type_commit(&type), "MPI_Type_commit");
  } catch (...) {
    release();
    throw;
  }
}

void BytesType::release() {
  if (made) MPI_Type_free(&type);
  made = false;
}

MpiTransport::Impl::Retired& MpiTransport::Impl::retired() {
  static Retired* const r = new Retired;  // never destroyed: MPI may write as the process ends
  return *r;
}

void MpiTransport::Impl::reap_retired() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  Retired& r = retired();
  std::lock_guard lk(r.mu);
  std::erase_if(r.sends, [](auto& s) {
    int flag = 0;
    return MPI_Testall(2, s->req, &flag, MPI_STATUSES_IGNORE) != MPI_SUCCESS || flag;
  });
  std::erase_if(r.recvs, [](auto& x) {
    int flag = 0;
    return MPI_Test(&x.req, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS || flag;
  });
}

std::size_t MpiTransport::transfers_kept() {
  Impl::reap_retired();
  Impl::Retired& r = Impl::retired();
  std::lock_guard lk(r.mu);
  return r.sends.size() + r.recvs.size();
}

bool MpiTransport::Impl::poll_sends() {
  {
    std::lock_guard lk(send_mu);
    for (auto& s : posted)
      sends.push_back(std::move(s));
    posted.clear();
  }
  // No lock while testing: MPI_Testall runs MPI's progress engine, which may copy a whole
  // incoming message (milliseconds for a large single copy) before it returns, and a compute
  // thread sending an output must not wait for that.
  std::vector<std::unique_ptr<PendingSend>> finished;
  for (std::size_t i = 0; i < sends.size();) {
    int flag = 0;
    mpi_check(MPI_Testall(2, sends[i]->req, &flag, MPI_STATUSES_IGNORE), "MPI_Testall");
    if (!flag) {
      ++i;
      continue;
    }
    finished.push_back(std::move(sends[i]));
    sends[i] = std::move(sends.back());
    sends.pop_back();
  }
  for (auto& s : finished)
    if (s->done) s->done(nullptr);
  return !finished.empty();
}

void MpiTransport::Impl::loop() {
  tighten_timer_slack();  // a 5 us nap must not become Linux's default 50 us
  using clock = std::chrono::steady_clock;
  auto last = clock::now();
  int sleep_us = 0;
  while (!stop.load(std::memory_order_acquire)) {
    // A lent thread polling now takes what comes; this one keeps polling as if a transfer
    // were in flight (one may be, and MPI moves it only while someone calls in).
    bool did = false, busy = true;
    {
      std::unique_lock lk(poll_mu, std::try_to_lock);
      if (lk.owns_lock()) {
        try {
          if (failed) std::rethrow_exception(failed);
          did = poll_once();
        } catch (const std::exception& e) {  // an Error, or an allocation refused
          // Sends in flight fail now; the peers' and this rank's watchdogs report what then
          // never arrives. Say why here, where it is known.
          const std::string what =
              "mpi transport rank " + std::to_string(rank) + ": progress stopped: " + e.what();
          const std::string line = "rrfp: " + what + "\n";
          std::cerr.write(line.data(), static_cast<std::streamsize>(line.size()));  // one write
          fail_pending(std::current_exception());
          // Nothing more arrives here either: the runtime hears why (a later step fails at
          // once with it, and a stall's report names it).
          if (receiving.load(std::memory_order_acquire) && broken && !closed.load())
            broken(std::make_exception_ptr(Error(what)));
          return;
        }
        busy = in_flight();
      }
    }
    if (did) {
      last = clock::now();
      sleep_us = 0;
      continue;
    }
    // MPI moves a large message only while someone calls into it, so the thread keeps
    // polling while any transfer is in flight; it sleeps only when idle.
    // Yield between polls: with more processes than cores, a peer whose progress this
    // transfer needs may be waiting for this core (spinning without yielding slowed
    // oversubscribed steps: docs/design-decisions.md, "Processes (Open MPI)").
    if (busy || clock::now() - last < std::chrono::microseconds(poll.spin_us)) {
      std::this_thread::yield();
      continue;
    }
    const int cap =
        in_step.load(std::memory_order_acquire) ? poll.max_sleep_us : poll.between_steps_sleep_us;
    sleep_us = sleep_us ? std::min(sleep_us * 2, cap) : 5;
    naps.fetch_add(1, std::memory_order_relaxed);
    last_nap_us.store(sleep_us, std::memory_order_relaxed);
    std::unique_lock lk(kick_mu);
    sleeping.store(true, std::memory_order_release);
    kick_cv.wait_for(lk, std::chrono::microseconds(sleep_us), [&] { return kicked; });
    sleeping.store(false, std::memory_order_release);
    if (kicked) {
      last = clock::now();
      sleep_us = 0;  // a nap of milliseconds between steps must not outlast the kick
    }
    kicked = false;
  }
}

bool MpiTransport::Impl::poll_once() {
  bool did = false;
  if (receiving.load(std::memory_order_acquire)) did |= poll_receives();
  return poll_sends() || did;
}

bool MpiTransport::Impl::in_flight() {  // under poll_mu
  if (!recvs.empty() || !sends.empty()) return true;
  std::lock_guard lk(send_mu);
  return !posted.empty();
}

bool MpiTransport::Impl::fail_pending(std::exception_ptr e) {
  bool kept = false;
  std::vector<std::unique_ptr<PendingSend>> left;
  left.swap(sends);
  {
    std::lock_guard lk(send_mu);
    for (auto& s : posted)
      left.push_back(std::move(s));
    posted.clear();
  }
  for (auto& s : left) {
    if (s->done) s->done(e);
    s->done = nullptr;
    // MPI may still read an unfinished send's buffers: kept until it is done with them.
    int flag = 0;
    MPI_Testall(2, s->req, &flag, MPI_STATUSES_IGNORE);
    if (!flag) {
      Retired& r = retired();
      std::lock_guard lk(r.mu);
      r.sends.push_back(std::move(s));
      kept = true;
    }
  }
  return kept;
}

MpiTransport::MpiTransport(void* comm, MpiPollOptions poll, MpiLargeMessages large)
    : impl_(std::make_unique<Impl>()) {
  Impl::reap_retired();  // a failed step's transfers, done since
  Impl& d = *impl_;
  if (large.block < 1 || large.largest_plain > std::numeric_limits<int>::max() || large.max_tag < 0)
    throw InputError(
        "mpi transport: large messages: `block` must be at least 1, `largest_plain` at most "
        "2^31 - 1 and `max_tag` at least 0");
  d.large = large;
  mpi_check(MPI_Comm_dup(static_cast<MPI_Comm>(comm), &d.comm), "MPI_Comm_dup");
  mpi_check(MPI_Comm_dup(static_cast<MPI_Comm>(comm), &d.data_comm), "MPI_Comm_dup");
  MPI_Comm_set_errhandler(d.comm, MPI_ERRORS_RETURN);
  MPI_Comm_set_errhandler(d.data_comm, MPI_ERRORS_RETURN);
  MPI_Comm_rank(d.comm, &d.rank);
  MPI_Comm_size(d.comm, &d.size);
  d.next_seq.assign(d.size, 0);
  int* bound = nullptr;
  int has = 0;
  MPI_Comm_get_attr(d.data_comm, MPI_TAG_UB, &bound, &has);
  const int ub = has && bound ? *bound : 32767;  // the least bound MPI allows
  d.tags = static_cast<std::uint32_t>(large.max_tag > 0 ? std::min(large.max_tag, ub) : ub) + 1;
  d.poll = poll;
  d.progress = std::thread([&d] { d.loop(); });
}

MpiTransport::~MpiTransport() {
  shutdown();
}

int MpiTransport::rank() const {
  return impl_->rank;
}

int MpiTransport::size() const {
  return impl_->size;
}

void MpiTransport::set_receiver(Receiver r) {
  Impl& d = *impl_;
  if (d.receiving.load()) throw Error("mpi transport: the receiver is already set");
  d.receiver = std::move(r);
  d.receiving.store(true, std::memory_order_release);
  d.kick();
}

void MpiTransport::set_broken_handler(Broken b) {
  Impl& d = *impl_;
  if (d.receiving.load()) throw Error("mpi transport: set the broken handler before the receiver");
  d.broken = std::move(b);
}

void MpiTransport::send(int dst, const MessageTag& tag, Payload payload, SendDone done) {
  Impl& d = *impl_;
  if (dst < 0 || dst >= d.size)
    throw InputError("mpi transport: destination rank " + std::to_string(dst) +
                     " out of range [0, " + std::to_string(d.size) + ")");
  if (d.closed.load()) {
    if (done)
      done(std::make_exception_ptr(Error("mpi transport: rank " + std::to_string(d.rank) +
                                         " cannot send " + to_string(tag) + " to rank " +
                                         std::to_string(dst) + ": endpoint shut down")));
    return;
  }
  auto s = std::make_unique<Impl::PendingSend>();
  Wire w = encode(tag, payload.size());
  const bool inline_ = payload.size() <= kInlineBytes;
  std::unique_lock lk(d.send_mu);
  if (!inline_) {
    w.flags |= kFlagFollows;
    // Wrapped below the bound: a payload's receive is posted as its header arrives, in the
    // order sent, so even a tag still in use would be matched in order.
    w.data_tag = static_cast<std::int32_t>(d.next_seq[dst]);
    d.next_seq[dst] = (d.next_seq[dst] + 1) % d.tags;
  }
  s->packed.resize(sizeof w + (inline_ ? payload.size() : 0));
  std::memcpy(s->packed.data(), &w, sizeof w);
  if (inline_ && !payload.empty())
    std::memcpy(s->packed.data() + sizeof w, payload.data(), payload.size());
  mpi_check(MPI_Isend(s->packed.data(), static_cast<int>(s->packed.size()), MPI_BYTE, dst,
                      kTagHeader, d.comm, &s->req[0]),
            "MPI_Isend");
  if (!inline_) {
    s->keep = std::move(payload);
    const BytesType bytes(s->keep.size(), d.large);
    mpi_check(MPI_Isend(s->keep.data(), bytes.count, bytes.type, dst, w.data_tag, d.data_comm,
                        &s->req[1]),
              "MPI_Isend");
  } else {
    // A small message usually leaves at once (eager): complete it here, no queue, no wake-up.
    int flag = 0;
    mpi_check(MPI_Test(&s->req[0], &flag, MPI_STATUS_IGNORE), "MPI_Test");
    if (flag) {
      lk.unlock();
      if (done) done(nullptr);
      return;
    }
  }
  s->done = std::move(done);
  d.posted.push_back(std::move(s));
  lk.unlock();
  d.kick();
}

void MpiTransport::shutdown() {
  Impl& d = *impl_;
  // From inside the receiver, on the progress thread, it waited to join its own thread (an
  // error swallowed, then std::terminate when the transport went).
  if (Impl::delivering == &d)
    throw Error(
        "mpi transport: shutdown() called from inside its receiver; call it after the "
        "receiver returns");
  if (d.closed.exchange(true)) return;
  d.stop.store(true);
  d.wake();
  if (d.progress.joinable()) d.progress.join();
  std::lock_guard poller(d.poll_mu);  // a lent thread's poll ends first; later ones see stop
  d.poll_sends();
  bool kept = d.fail_pending(std::make_exception_ptr(
      Error("mpi transport: rank " + std::to_string(d.rank) + " shut down with sends in flight")));
  // A receive not yet matched is cancelled; one under way goes on, its buffer kept (Retired).
  for (auto& r : d.recvs) {
    MPI_Cancel(&r.req);
    int flag = 0;
    MPI_Test(&r.req, &flag, MPI_STATUS_IGNORE);
    if (flag) continue;
    kept = true;
    Impl::Retired& gone = Impl::retired();
    std::lock_guard lk(gone.mu);
    gone.recvs.push_back(std::move(r));
  }
  for (auto& r : d.ring) {
    MPI_Cancel(&r);
    MPI_Wait(&r, MPI_STATUS_IGNORE);  // a cancelled receive completes at once
  }
  // A communicator with requests still in flight is left to MPI_Finalize.
  if (!kept && d.recvs.empty()) {
    MPI_Comm_free(&d.comm);
    MPI_Comm_free(&d.data_comm);
  }
  d.recvs.clear();
  Impl::reap_retired();
}

void MpiTransport::set_in_step(bool in_step) {
  Impl& d = *impl_;
  d.in_step.store(in_step, std::memory_order_release);
  // wake(), not kick(): a thread about to nap for milliseconds must not miss it.
  if (in_step) d.wake();
}

std::uint64_t MpiTransport::naps() const {
  return impl_->naps.load(std::memory_order_relaxed);
}

int MpiTransport::max_data_tag() const {
  return static_cast<int>(impl_->tags - 1);
}

int MpiTransport::last_nap_us() const {
  return impl_->last_nap_us.load(std::memory_order_relaxed);
}

bool MpiTransport::progress() {
  Impl& d = *impl_;
  std::unique_lock lk(d.poll_mu, std::try_to_lock);
  if (!lk.owns_lock() || d.stop.load(std::memory_order_acquire) || d.failed) return false;
  try {
    return d.poll_once();
  } catch (const std::exception&) {
    d.failed = std::current_exception();  // the progress thread says why and fails what is pending
    return false;
  }
}

}  // namespace rrfp
