#pragma once
// The MPI transport's state, shared by its two source files: mpi_transport.cpp (the endpoint,
// the sending side and the progress thread's loop) and mpi_receive.cpp (the ring of header
// receives and the payload receives). Private to comm/ (mpi_transport.hpp is the interface).
#include <mpi.h>

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "comm/buffer_pool.hpp"
#include "comm/mpi_transport.hpp"
#include "comm/wire.hpp"

namespace rrfp {
namespace mpi_detail {

inline constexpr int kTagHeader = 1;
inline constexpr int kRing = 16;  // receives kept posted for headers
inline constexpr std::size_t kSlotBytes = sizeof(Wire) + kInlineBytes;
inline constexpr std::size_t kCopyOutBytes =
    512;  // smaller inline payloads are copied out of the ring

// The datatype and count that carry a payload of `n` bytes in one message (MpiLargeMessages):
// MPI_BYTE x n up to `large.largest_plain`, else one element of a type made for it, committed;
// release() frees a made one (MPI keeps it for the operations already posted with it).
struct BytesType {
  MPI_Datatype type = MPI_BYTE;
  int count = 0;
  bool made = false;
  BytesType(std::uint64_t n, const MpiLargeMessages& large);
  ~BytesType() { release(); }
  BytesType(const BytesType&) = delete;
  BytesType& operator=(const BytesType&) = delete;
  void release();
};

}  // namespace mpi_detail

struct MpiTransport::Impl {
  struct PendingSend {
    MPI_Request req[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    std::vector<std::byte> packed;  // the header, or header and payload
    Payload keep;                   // a large payload, sent from its own buffer
    SendDone done;
  };
  struct PendingRecv {
    MPI_Request req = MPI_REQUEST_NULL;
    int src = 0;
    MessageTag tag;
    Payload buf;
  };

  // Transfers a transport shut down could not end: a receive that had matched its message goes
  // on writing into its buffer, and an unfinished send on reading from its own, whenever
  // anything in the process calls into MPI next (the next step's collectives). They are kept,
  // buffers and all, until MPI completes them; each transport made or shut down frees those
  // done. (A failed step's receive buffer went back to its pool while MPI still wrote the
  // message's fragments into it, and the next step crashed in opal_convertor_unpack under a
  // fragmenting transport: single copy off, or TCP.)
  struct Retired {
    std::mutex mu;
    std::vector<std::unique_ptr<PendingSend>> sends;
    std::vector<PendingRecv> recvs;
  };
  static Retired& retired();
  static void reap_retired();  // frees those MPI has completed (none once it is finalized)

  MPI_Comm comm = MPI_COMM_NULL, data_comm = MPI_COMM_NULL;
  int rank = 0, size = 0;
  MpiPollOptions poll;
  MpiLargeMessages large;
  Receiver receiver;
  Broken broken;  // set before `receiving`; read by the progress thread once it is
  std::atomic<bool> receiving{false}, stop{false}, closed{false};
  std::mutex send_mu;                                // guards posted and next_seq
  std::vector<std::unique_ptr<PendingSend>> posted;  // by send(), for the progress thread
  // The poller's (the progress thread, or a thread lent by progress()), under poll_mu, then
  // shutdown's.
  std::mutex poll_mu;
  std::vector<std::unique_ptr<PendingSend>> sends;
  std::vector<PendingRecv> recvs;
  std::vector<MPI_Request> ring;
  int ring_head = 0;          // the slot posted longest ago
  std::exception_ptr failed;  // a lent thread's poll failed: the progress thread reports it
  std::vector<Payload> ring_buf;
  std::vector<std::uint32_t> next_seq;  // per destination, under send_mu: below tags
  std::uint32_t tags = 0;               // data tags in use: 0 to tags - 1
  std::shared_ptr<BufferPool> pool = std::make_shared<BufferPool>();
  std::mutex kick_mu;
  std::condition_variable kick_cv;
  bool kicked = false;
  std::atomic<bool> sleeping{false};
  std::atomic<bool> in_step{true};  // set_in_step: which nap cap holds
  std::atomic<std::uint64_t> naps{0};
  std::atomic<int> last_nap_us{0};  // the latest nap's length
  std::thread progress;

  // Ends the progress thread's nap, if it naps (a send's wake-up: cheap when it does not).
  void kick() {
    if (sleeping.load(std::memory_order_acquire)) wake();
  }
  // Ends its nap, or the next one before it begins: never missed.
  void wake() {
    std::lock_guard lk(kick_mu);
    kicked = true;
    kick_cv.notify_one();
  }

  // Runs the receiver on a message (it must not throw; if it does, that is said and the
  // message dropped).
  void deliver(int src, const MessageTag& tag, Payload p);
  // The transport whose receiver this thread runs now (its progress thread, or a lent one).
  static thread_local const Impl* delivering;

  // The receiving side (mpi_receive.cpp).
  void post_slot(int i);
  void repost_slot(int i);
  bool finish_payloads();
  bool poll_receives();

  // The sending side and the loop (mpi_transport.cpp).
  bool poll_sends();
  void loop();
  bool poll_once();
  bool in_flight();  // under poll_mu
  // Fails every send in flight with `e`; true where one is kept (Retired), unfinished.
  bool fail_pending(std::exception_ptr e);
};

}  // namespace rrfp
