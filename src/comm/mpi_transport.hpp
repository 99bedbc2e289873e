#pragma once
// Open MPI point-to-point behind the Transport interface: one endpoint per process, over a
// communicator of its own (a duplicate, so nothing else on the job can steal its messages).
//
// Wire format: a 40-byte header (step, task, flags, round, payload size, data tag). A message
// of up to kInlineBytes travels as one MPI message, header and payload packed; a larger one as
// the header, then the payload under the data tag the header names, on a second communicator,
// sent straight from the caller's buffer (no copy) and received into a pooled buffer.
//
// Headers land in a ring of receives kept posted from any source, so arrivals in any order are
// taken at once and handed to the receiver, which matches them to the task that needs them. One
// progress thread polls the ring, the payload receives and the sends; it never blocks inside
// MPI (a blocking call would spin a core the compute threads need), polls while a transfer is
// in flight (MPI moves large messages only while someone calls into it), and when idle backs
// off from spinning to short naps (MpiPollOptions). Sends are posted by the calling thread
// (MPI_THREAD_MULTIPLE) and never wait for the receiver. A thread waiting for an input may poll
// in the progress thread's stead (progress()); one poll lock keeps them from polling at once.
// See docs/mpi.md.
#include <cstdint>
#include <limits>
#include <memory>

#include "comm/transport.hpp"

namespace rrfp {

inline constexpr std::size_t kInlineBytes = 16 * 1024;

// What the progress thread does when nothing arrives (see docs/mpi.md): it keeps polling for
// `spin_us` after the last event, then naps, doubling the nap up to `max_sleep_us`; a send
// wakes it, and it never naps while a transfer is in flight. The spin must outlast a typical
// reply, or two idle peers answer each other one nap late. Between steps (set_in_step(false))
// the naps go on doubling up to `between_steps_sleep_us`: at 50 us each idle endpoint woke
// 20,000 times a second (two processes' Python test on a 2-core VM: 39 s of CPU, now 22).
struct MpiPollOptions {
  int spin_us = 200;
  int max_sleep_us = 50;
  int between_steps_sleep_us = 2000;
};

// How a payload too large for one MPI count (an int: 2 GiB) travels: as one element of a
// derived datatype of `block`-byte blocks and the rest, which both sides make from its size
// (such a payload was refused: an activation of 2.4 GB failed the step under mpirun, where
// torchrun's transport carried it). Tests lower both to take that path with small payloads.
//
// `max_tag`: the largest tag a payload's transfer takes; its tags count up per destination and
// wrap past it. 0 takes the MPI library's own bound (MPI_TAG_UB: 2^31 - 1 under Open MPI's ob1,
// 2^23 - 1 under UCX, where the 2^23-th payload to one rank failed its send); tests lower it.
struct MpiLargeMessages {
  std::uint64_t largest_plain = std::numeric_limits<int>::max();
  int block = 1 << 30;
  int max_tag = 0;
};

class MpiTransport final : public Transport {
 public:
  // `comm` is an MPI_Comm (kept opaque here); the transport duplicates it.
  MpiTransport(void* comm, MpiPollOptions poll, MpiLargeMessages large = {});
  ~MpiTransport() override;

  int rank() const override;
  int size() const override;
  void set_receiver(Receiver r) override;
  void set_broken_handler(Broken b) override;  // before set_receiver
  void send(int dst, const MessageTag& tag, Payload payload, SendDone done = {}) override;
  void shutdown() override;
  bool progress() override;  // one poll under the poll lock, if it is free
  void set_in_step(bool in_step) override;
  // How many naps the progress thread has taken: how often an idle endpoint wakes.
  std::uint64_t naps() const;
  // The latest nap's length (us): which cap the naps have reached.
  int last_nap_us() const;
  // The largest tag a payload's transfer takes (MpiLargeMessages::max_tag, or MPI_TAG_UB).
  int max_data_tag() const;
  // Transfers of transports shut down that MPI has not completed yet, their buffers kept until
  // it does (a failed step's message under way); those done are freed first.
  static std::size_t transfers_kept();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace rrfp
