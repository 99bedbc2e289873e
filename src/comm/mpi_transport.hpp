#pragma once
// Open MPI point-to-point behind the Transport interface: one endpoint per process, over a
// communicator of its own (a duplicate, so nothing else on the job can steal its messages).
//
// Wire format: a 32-byte header (step, task, flags, round, payload size). A message of up to
// kInlineBytes travels as one MPI message, header and payload packed; a larger one as the
// header, then the payload sent straight from the caller's buffer (no copy) under a second
// tag. MPI keeps messages of one sender, communicator and tag in order, and the pair is posted
// under one lock, so each header's payload is the next payload message from that sender.
//
// Receives are matched from a probe (MPI_Improbe for the header tags), so arrivals in any
// order are taken at once into a buffer of the probed size and handed to the receiver. One
// progress thread polls for arrivals and send completions; it never blocks inside MPI (a
// blocking call would spin a core the compute threads need), and when idle it backs off from
// spinning to short sleeps (MpiPollOptions). Sends are posted by the calling thread
// (MPI_THREAD_MULTIPLE) and never wait for the receiver.
#include <memory>

#include "comm/mpi_world.hpp"
#include "comm/transport.hpp"

namespace rrfp {

inline constexpr std::size_t kInlineBytes = 16 * 1024;

class MpiTransport final : public Transport {
 public:
  // `comm` is an MPI_Comm (kept opaque here); the transport duplicates it.
  MpiTransport(void* comm, MpiPollOptions poll);
  ~MpiTransport() override;

  int rank() const override;
  int size() const override;
  void set_receiver(Receiver r) override;
  void send(int dst, const MessageTag& tag, Payload payload, SendDone done = {}) override;
  void shutdown() override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace rrfp
