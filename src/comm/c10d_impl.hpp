#pragma once
// The c10d transport's state, shared by its two source files: c10d_transport.cpp (the endpoint
// and the sending side: the poster and the completions of sends) and c10d_receive.cpp (the
// receiving loops). Private to comm/ (c10d_transport.hpp is the interface).
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include "comm/buffer_pool.hpp"
#include "comm/c10d_transport.hpp"
#include "comm/wire.hpp"

namespace rrfp {
namespace c10d_detail {

// A channel's tags start at channel << 24: the headers of later messages (kHeader, received
// per source), the header of each sender's first message to a rank (kFirst, received from any
// source), the payloads received into a receive posted ahead (kAhead), then one tag for each
// other payload.
inline constexpr int kTagBits = 24;
inline constexpr int kHeader = 0, kFirst = 1, kAhead = 2, kTagsBefore = 3;
inline constexpr std::size_t kSlotBytes = sizeof(Wire) + C10dTransport::kInlineBytes;  // 8 KiB
// A payload received ahead of its header and smaller than this is copied out, so that the
// receive's buffer (kAheadBytes) is held only by a payload of at least a quarter of its size.
inline constexpr std::size_t kCopyOutBytes = C10dTransport::kAheadBytes / 4;

// How long the transport waits for one of its sends or receives: a year, longer than any
// pause between two steps (a receive stays posted between them), so that the group's own
// timeout, which Gloo applies where a wait names none and at which it closes every connection
// of the group, bounds the group's making alone (a process that ended inside new_group held
// the others for the group's timeout). A step that stops making progress is the runtime's
// watchdog's to end; a receive outlives its transport's shutdown until the peer's close
// message (shutdown()).
inline constexpr std::chrono::milliseconds kMessageWait = std::chrono::hours(24 * 365);

// A uint8 tensor over `n` bytes at `p`; the caller keeps the memory until the work that uses
// it has completed.
inline at::Tensor bytes_tensor(const std::byte* p, std::size_t n) {
  return at::from_blob(const_cast<std::byte*>(p), {static_cast<std::int64_t>(n)},
                       at::TensorOptions().dtype(at::kByte));
}

}  // namespace c10d_detail

struct C10dTransport::Impl {
  c10::intrusive_ptr<c10d::ProcessGroup> pg;
  int rank = 0, size = 1;
  int header_tag = 0;                      // channel << kTagBits
  std::atomic<std::uint32_t> next_tag{0};  // data tags follow kTagsBefore
  std::shared_ptr<BufferPool> pool = std::make_shared<BufferPool>();
  Receiver receiver;
  Broken broken;  // set before `receiving`, under mu; called at most once (broken_once)
  std::once_flag broken_once;
  std::atomic<bool> closed{false};
  std::function<std::string(int)> name;  // a rank of the group, as errors say it

  struct Send {
    std::vector<std::byte> header;
    Payload payload;  // kept until its data message completes
    c10::intrusive_ptr<c10d::Work> header_work, data_work;
    SendDone done;
    int dst = 0;
    MessageTag tag;      // for the error, should Gloo fail it
    bool first = false;  // the first message to dst: to its receive from any source
  };

  std::string who(int r) const { return name ? name(r) : "rank " + std::to_string(r); }

  // Gloo's own failure of a send ("[../gloo/transport/tcp/pair.cc:589] Read error ...:
  // Connection reset by peer") named neither this process, the peer nor the message: said
  // here with all three, Gloo's first line kept. Rethrows the current exception so.
  [[noreturn]] void rethrow_send_failure(int dst, const MessageTag& tag) const;

  // A receiving loop: one takes headers from any source, and each source that has sent here
  // gets one of its own. A receive posted for one source lets Gloo move the message as soon as
  // it is sent; one from any source first waits for the sender's notice, then answers it (a
  // round trip more per message).
  struct Rx {
    std::vector<std::byte> header = std::vector<std::byte>(c10d_detail::kSlotBytes);
    // A source's own loop keeps a receive posted on kAhead, so a payload that follows its
    // header finds it there without the round trip of a receive posted once the header is in.
    Payload ahead;
    c10::intrusive_ptr<c10d::Work> ahead_work;  // the loop's own
    std::thread thread;
  };

  // Everything below is guarded by mu.
  std::mutex mu;
  std::condition_variable cv;
  bool closing = false;    // shutdown() was called: the peers are told, the loops run down
  bool receiving = false;  // the receiver is set
  int running = 0;         // the transport's threads that have not ended
  int in_callback = 0;     // calls of the receiver, the broken handler or a send's completion
  std::deque<std::unique_ptr<Send>> sends;  // in flight, in the order they were made
  // Made, to be posted by the poster thread, in order: a payload over kPostBytes, and every
  // send made while one is waiting or being posted (posting), so that none overtakes another.
  std::deque<std::unique_ptr<Send>> to_post;
  bool posting = false;
  Send* being_posted = nullptr;  // by the poster, out of to_post and not yet in sends
  std::deque<Rx> rx;             // [0]: any source (with peers); then one per source seen
  std::vector<bool> own_rx;      // by source: has a loop of its own
  std::vector<bool> sent_to;     // by destination: a message went there before
  std::thread tx, poster;
  std::mutex shutdown_mu;  // a second shutdown() returns once the first has

  // Joins the threads, which have ended (running == 0; release_closed()).
  ~Impl();

  // Starts `f` on thread `t`, counted in `running` until it returns; under mu (so the thread's
  // own count down waits for the count up). Throws std::system_error where no thread starts.
  template <class F>
  void start(std::thread& t, F f) {
    t = std::thread([this, f = std::move(f)] {
      f();
      std::lock_guard lk(mu);
      --running;
    });
    ++running;
  }

  // The gate of the callbacks: none starts once closing, and shutdown() waits for those under
  // way, so that none runs after it returns (the runtime that set them may be gone). enter()
  // says whether the caller may call one (then leave() after it). take_done(s), under mu:
  // s's completion, entered, or nothing.
  bool enter();
  void leave();
  SendDone take_done(Send& s);
  // Marks the calling thread as in one of d's callbacks until it ends, then leave().
  static thread_local const Impl* calling;
  struct Entered {
    Impl& d;
    const Impl* outer = calling;
    explicit Entered(Impl& i) : d(i) { calling = &d; }
    ~Entered() {
      calling = outer;
      d.leave();
    }
  };

  // Waits for `w`; a wait that runs out (a year) throws.
  static void await(c10d::Work& w);

  // The receiving side (c10d_receive.cpp).
  // Starts the loop of headers from any source (src < 0) or from `src` alone; under mu.
  void start_rx(int src);
  // Posts r's receive ahead (its own source's loop): into a fresh buffer from the pool, the
  // last one having gone with its payload.
  void post_ahead(Rx& r, int src);
  // The payload that follows header `w` from `from`: received into the receive posted ahead
  // (kAhead), or into a receive posted now for its own tag.
  Payload take_payload(Rx& r, int src, int from, const Wire& w);
  void receive_loop(Rx& r, int src);
  // What a loop that ends does: a receive of its own still posted is waited for, so that the
  // transport's memory outlives it (Gloo cannot cancel one, and writes into it when it comes).
  static void settle(Rx& r) noexcept;
  // A receiving loop ended by an error, not by shutdown: the runtime hears why, once.
  void report_broken(int src) noexcept;

  // Posts s's header and, where one follows it, its payload to Gloo, which writes them into the
  // socket in the calling thread where the receive is posted (up to the socket's buffer, sized
  // to the message): a copy of the whole payload. Throws what Gloo throws.
  void post(Send& s);
  // Under mu: posts s now, or queues it for the poster (a large payload, or one behind another
  // in the poster's queue). What Gloo throws, said with s's peer and tag (s is then kept).
  void enqueue(std::unique_ptr<Send> s);

  // s, whose post threw: Gloo holds the header's buffer until that send ends once the header
  // was posted, so the send loop keeps s till then (freed here, Gloo would write from freed
  // memory), with no one to tell. Under mu.
  void keep_failed(std::unique_ptr<Send> s);

  // Under mu, at shutdown: a close message to every peer, after the messages sent it before.
  // One the peer has had a message from goes to its loop for this rank, with a byte to its
  // receive posted ahead; to any other, to its receive from any source, which so gets exactly
  // one message from each peer (a first message, or this) and then ends.
  void say_goodbye();

  // Posts what send() queued, in order. A large payload's copy into the socket then takes this
  // thread's time, not the sending stage's (4 MiB: about 1.2 ms, measured).
  void post_loop();

  void send_loop();
};

}  // namespace rrfp
