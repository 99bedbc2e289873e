#pragma once
// The narrow interface every transport implements (inproc threads, Open MPI): one
// endpoint per pipeline rank, asynchronous tagged sends, arrivals delivered to one handler.
//
// Receives are matched, not posted per message: the transport hands every arrival, in any
// order, to the endpoint's handler, and the runtime matches it against the tasks that still
// expect an input (the MPI transport keeps header receives posted from any source).
// That is what lets out-of-order arrivals never block, and lets the runtime reject a message
// that fits no task instead of leaving it unmatched forever.
#include <exception>
#include <functional>

#include "comm/message.hpp"

namespace rrfp {

class Transport {
 public:
  // Runs on the transport's progress context (inproc: the sending thread). Must not block
  // for long and must not throw, and must not call its transport's set_receiver() or
  // shutdown() (the inproc and MPI transports refuse them there with Error) nor destroy it.
  using Receiver = std::function<void(Message&&)>;
  // Runs once the payload has been handed over (nullptr) or the send failed.
  using SendDone = std::function<void(std::exception_ptr)>;
  // Runs at most once, on the transport's thread, when this endpoint can receive nothing more
  // (its group broke: a peer exited, a connection failed), with the transport's error naming
  // this rank (and the peer, where known); never after shutdown(). Must not block for long and
  // must not throw.
  using Broken = std::function<void(std::exception_ptr)>;

  virtual ~Transport() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Set before any peer sends to this endpoint.
  virtual void set_receiver(Receiver r) = 0;
  // Set before the receiver. Without it a broken endpoint was silent: the step waited for its
  // watchdog, which then named the messages missing but not why. Default: a transport that
  // cannot break so (in-process) never calls it.
  virtual void set_broken_handler(Broken) {}
  // Never blocks on the receiver. Throws InputError for a destination out of range.
  virtual void send(int dst, const MessageTag& tag, Payload payload, SendDone done = {}) = 0;
  // Stops delivery to and from this endpoint; later sends complete with an error. Idempotent.
  virtual void shutdown() = 0;
  // Lends the calling thread to the transport for one poll, if it has a progress thread and
  // nobody else polls at the moment: arrivals found are delivered on the calling thread. True
  // when a message moved. A thread waiting for an input calls it while it spins (SpinPark), so
  // an arrival reaches it without a hand-off from the progress thread (a futex wake and a
  // context switch). The caller holds no lock the receiver takes. Default: nothing to lend to.
  virtual bool progress() { return false; }
  // Whether this endpoint's runtime is in a step (true until told otherwise). Between steps
  // nothing waits for an arrival, so a transport that polls may nap longer (a pipeline a script
  // keeps while it evaluates, or several built one after another, then costs no core); told
  // true, it polls at its step's pace again at once. Default: nothing changes.
  virtual void set_in_step(bool) {}
};

}  // namespace rrfp
