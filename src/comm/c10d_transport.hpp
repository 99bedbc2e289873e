#pragma once
// The transport over a c10d ProcessGroup (Gloo: its messages are host bytes, which NCCL does
// not take), for processes started by torchrun or holding a torch.distributed group: one
// endpoint per rank of the group. Like the MPI transport, every message starts with a header, so
// arrivals come in any order; a payload too large to ride inline follows its header. A header
// leaves at its own size (up to 8 KiB).
//
// c10d's point-to-point work completes only inside a blocking wait() (Gloo does not progress
// it otherwise), so threads wait: receivers (a header, then its payload, then the next
// header) and the sender's completions (in the order sends were made). One receiver takes
// headers from any source (recvAnysource). Each source that has sent here then gets a
// receiver of its own, with a receive posted for that source alone: Gloo moves such a message
// as soon as it is sent, where a receive from any source first answers the sender's notice,
// a round trip more. For the same reason a source's own receiver keeps a receive for its next
// payload posted ahead (up to kAheadBytes, buffers from a pool), and the sender sends a payload
// of up to that size under the tag that receive waits on; a larger one, or one that comes with
// a sender's first message, goes under a tag of its own, received once its header has named
// it. Gloo writes a message into the socket in the thread that posts it, once the receive is
// posted: a payload over kPostBytes is posted by a thread of the transport's (the poster),
// after which every message waits its turn there until the poster's queue is empty, so that
// messages leave in the order they were sent; the sending stage goes back to its tasks (a 4 MiB
// payload held it for about 1.2 ms). A send that Gloo fails (a peer gone: "Connection reset by
// peer") completes with an Error naming this rank, the peer and the message, Gloo's line kept.
//
// Gloo cannot take back a receive once posted, and writes into its buffer when the message
// comes; a peer's messages of a failed step may still be on their way. So shutdown() aborts
// nothing: it stops the callbacks (waiting for one under way), sends each peer a close message
// behind its others, and returns. The loops go on taking (and dropping) what comes until each
// peer's close message: every peer sends a rank exactly one message to its receive from any
// source (its first, or its close message), so that loop ends after one from each, and a
// source's own loop ends on its close message, which comes with a byte for its receive posted
// ahead. Then the transport's state, and its hold on the group, can go: release_closed() frees
// it when a transport is made or destroyed. One whose peer never closes (it stopped, or lives
// on with its transport), or ended before it sent here, is kept, its receives posted, for the
// life of the process.
//
// The header includes LibTorch's c10d (only transports include c10d); the rest of rrfp sees
// the Transport interface.
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <functional>
#include <memory>
#include <string>

#include "comm/transport.hpp"

namespace rrfp {

class C10dTransport final : public Transport {
 public:
  // `channel` (0..126) separates transports sharing one group (each pipeline, each runtime of a
  // pipeline, has its own): its messages use tags channel << 24 and up. Every rank must give
  // its transports the same channels. `name(rank)` says who a rank of the group is in errors
  // ("stage 1 (c10d rank 3)"; by default "rank 1").
  explicit C10dTransport(c10::intrusive_ptr<c10d::ProcessGroup> group, int channel = 0,
                         std::function<std::string(int rank)> name = {});
  ~C10dTransport() override;  // shutdown()

  int rank() const override;
  int size() const override;
  void set_receiver(Receiver r) override;
  void set_broken_handler(Broken b) override;  // before set_receiver
  void send(int dst, const MessageTag& tag, Payload payload, SendDone done = {}) override;
  void shutdown() override;

  // Frees the state of the transports shut down whose peers have all shut theirs down too
  // (their close messages came, or Gloo failed the connection of a peer this transport had
  // heard from): their threads, buffers and their hold on the group, whose sockets and threads
  // go once nothing else holds it. Runs whenever a transport is made or destroyed. Returns how
  // many are still kept: a peer lives and has not shut down, or one that never sent here is
  // gone (Gloo does not fail a receive from any source when one connection closes).
  static std::size_t release_closed();

  // The next channel of `group` in this process, from 0: the processes make their transports
  // in the same order, so their channels agree. A group freed is forgotten (a later group at
  // its address starts at 0, as the other processes' new group does). Throws Error past 126.
  static int next_channel(const c10::intrusive_ptr<c10d::ProcessGroup>& group);

  // Payloads up to this many bytes ride inside their header message.
  static constexpr std::size_t kInlineBytes = 8152;  // an 8 KiB header message
  // Payloads up to this many bytes are received into a receive posted ahead of their header
  // (one such buffer per source that has sent here).
  static constexpr std::size_t kAheadBytes = std::size_t{4} << 20;
  // A larger payload is posted by the transport's poster thread, not the sender's: Gloo copies
  // it into the socket in the thread that posts it. Smaller ones are posted at once, where the
  // hand-off to another thread would cost more than the copy.
  static constexpr std::size_t kPostBytes = std::size_t{64} << 10;

 private:
  struct Impl;
  struct Retired;
  static Retired& retired();
  // Keeps a shut-down transport's state until its threads have ended: Gloo cannot cancel a
  // posted receive, and writes into its buffer when the message comes.
  static void retire(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace rrfp
