// The MPI transport's receiving side: the ring of header receives kept posted from any source,
// small payloads copied out of it, larger ones received under their data tag into pooled
// buffers, and their hand-over to the receiver (mpi_impl.hpp holds the state).
#include <algorithm>
#include <cstring>
#include <iostream>
#include <string>
#include <utility>

#include "comm/mpi_check.hpp"
#include "comm/mpi_impl.hpp"

namespace rrfp {

using namespace mpi_detail;

void MpiTransport::Impl::deliver(int src, const MessageTag& tag, Payload p) {
  const Impl* const outer = std::exchange(delivering, this);
  try {
    receiver(Message{src, tag, std::move(p)});
  } catch (const std::exception& e) {
    // The receiver's contract is not to throw; a bug there must not kill the progress thread,
    // but it is said (a shutdown() refused there went unseen).
    const std::string line = "rrfp: mpi transport rank " + std::to_string(rank) +
                             ": the receiver threw, which it must not: " + e.what() + "\n";
    std::cerr.write(line.data(), static_cast<std::streamsize>(line.size()));
  } catch (...) {
  }
  delivering = outer;
}

// Posts (again) the header receive of ring slot i, into a fresh buffer: the old one now
// backs a delivered payload.
void MpiTransport::Impl::post_slot(int i) {
  ring_buf[i] = Payload::allocate(kSlotBytes);
  repost_slot(i);
}

void MpiTransport::Impl::repost_slot(int i) {
  mpi_check(MPI_Irecv(const_cast<std::byte*>(ring_buf[i].data()), kSlotBytes, MPI_BYTE,
                      MPI_ANY_SOURCE, kTagHeader, comm, &ring[i]),
            "MPI_Irecv");
}

// Hands over every payload whose transfer has finished. First in each poll, and again before
// a new payload's receive is posted: over shared memory in one copy, MPI moves a payload inside
// the call that posts or tests its receive, and a payload already here must not wait behind
// the next one's copy (measured: docs/data/twin-history.md, "The fixes, in order": the first
// large message of a step into each stage was handed over with the one after it).
bool MpiTransport::Impl::finish_payloads() {
  bool did = false;
  for (std::size_t i = 0; i < recvs.size();) {
    int flag = 0;
    mpi_check(MPI_Test(&recvs[i].req, &flag, MPI_STATUS_IGNORE), "MPI_Test");
    if (!flag) {
      ++i;
      continue;
    }
    did = true;
    PendingRecv r = std::move(recvs[i]);
    recvs.erase(recvs.begin() + static_cast<std::ptrdiff_t>(i));
    deliver(r.src, r.tag, std::move(r.buf));
  }
  return did;
}

bool MpiTransport::Impl::poll_receives() {
  if (ring_buf.empty()) {
    ring.assign(kRing, MPI_REQUEST_NULL);
    ring_buf.resize(kRing);
    for (int i = 0; i < kRing; ++i)
      post_slot(i);
  }
  bool did = finish_payloads();
  // Receives posted alike match arrivals in the order they were posted, so the next header
  // always lands in the oldest slot: one MPI_Test per poll, not a scan of the ring. (A slot
  // matched to a message still in transfer holds back the ones behind it until it is done.)
  for (;;) {
    const int i = ring_head;
    int flag = 0;
    MPI_Status st;
    mpi_check(MPI_Test(&ring[i], &flag, &st), "MPI_Test");
    if (!flag) break;
    did = true;
    ring_head = (ring_head + 1) % kRing;
    Wire w;
    std::memcpy(&w, ring_buf[i].data(), sizeof w);
    if (!(w.flags & kFlagFollows)) {
      // An inline payload is what arrived, whatever the header says: a header that lies
      // about its size cannot make us read past the buffer (the runtime rejects the size).
      int count = 0;
      MPI_Get_count(&st, MPI_BYTE, &count);
      w.size = static_cast<std::uint64_t>(std::max<int>(0, count - static_cast<int>(sizeof w)));
    }
    if (!(w.flags & kFlagFollows) && w.size <= kCopyOutBytes) {
      // Small: copy it out and post the slot's buffer again (no 16 KiB allocation).
      Payload p =
          w.size ? Payload::copy_of(ring_buf[i].bytes().subspan(sizeof w, w.size)) : Payload{};
      repost_slot(i);
      deliver(st.MPI_SOURCE, decode(w), std::move(p));
      continue;
    }
    Payload buf = std::move(ring_buf[i]);
    post_slot(i);
    auto* base = const_cast<std::byte*>(buf.data());
    const int src = st.MPI_SOURCE;
    if (w.flags & kFlagFollows) {
      finish_payloads();
      // The data tag names this payload, so the order payloads complete in does not matter.
      PendingRecv r;
      r.src = src;
      r.tag = decode(w);
      r.buf = pool->get(w.size);
      const BytesType bytes(w.size, large);
      mpi_check(MPI_Irecv(const_cast<std::byte*>(r.buf.data()), bytes.count, bytes.type, r.src,
                          w.data_tag, data_comm, &r.req),
                "MPI_Irecv");
      recvs.push_back(std::move(r));
    } else {
      deliver(src, decode(w), w.size ? Payload(buf.owner(), base + sizeof w, w.size) : Payload{});
    }
  }
  return finish_payloads() || did;
}

thread_local const MpiTransport::Impl* MpiTransport::Impl::delivering = nullptr;

}  // namespace rrfp
