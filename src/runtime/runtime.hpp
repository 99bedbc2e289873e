#pragma once
// The threaded, message-driven runtime: one compute thread per (stage, tensor-parallel rank),
// each dispatching through the shared StageArbiter, with outputs moved by a Transport. A step
// returns the same record a simulated step does (StepRecord), with real timestamps, so every
// report, trace and invariant check works on both.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/buffer_pool.hpp"
#include "comm/transport.hpp"
#include "runtime/stage.hpp"

namespace rrfp {

// The dispatch every executor shares (the arbiter's options, resolved by the runtime against
// the hint; the communication mode, blocking being the rendezvous baseline; the TP protocol),
// and what the threaded runtime adds.
struct RuntimeOptions : DispatchOptions {
  int tp = 1;
  // Watchdog: when no task starts or ends and no message arrives for this long, the step ends
  // with a StallError describing every stage. 0 disables it. It must exceed the longest task.
  std::int64_t timeout_ms = 60'000;
  LatencyFn latency;  // emulated message latency; empty: messages leave at once
  // Tasks of a rank that may have work pending at once (TaskContext::defer): 1, each task is
  // done when it returns; k > 1, a rank starts its next task while up to k - 1 earlier ones
  // still run on a device (a GPU stream), which hides the host's launch time behind the
  // device's work. At most 64; more than 1 needs `tp` 1.
  int window = 1;
  // Blocking mode over a transport that moves bytes: false (the default), a payload travels
  // with its offer and is taken at the acceptance, so its copy can overlap the receiver's
  // compute; true, the offer leaves it with the sender and the receiver pulls it once it
  // accepts, semantics.md §3's rendezvous (the transfer starts when both sides are ready). Needs
  // no emulated latency (which runs from the acceptance anyway). docs/runtime.md.
  bool rendezvous_pull = false;
  // An idle rank (nothing ready, nothing in flight) spins this many microseconds before it
  // sleeps, polling its transport meanwhile (Transport::progress: an arrival is then taken on
  // the rank's own thread, without the transport thread's hand-off and the wake-up). 0 (the
  // default): it sleeps at once. Spinning takes a core: worth it with a core per rank.
  // 0 to 10,000. docs/results-speed.md, "The MPI transport's hand-off".
  int idle_spin_us = 0;
};

// Throws InputError naming the option (`tp`, `timeout`); the arbiter's options are checked
// against the hint when a Runtime is made (resolve_options).
void validate(const RuntimeOptions& o);
// A watchdog timeout given in seconds (a flag, a Python argument) as `timeout_ms`; throws
// InputError naming `name` (`timeout`, or another limit given alike) unless 0 <= seconds <= a
// day.
std::int64_t timeout_ms_of(double seconds, const char* name = "`timeout`");
// Throws InputError naming `name` unless 0 <= ms <= a day (timeout_ms_of's range): far beyond,
// a deadline's nanoseconds overflowed and it expired at once.
void check_timeout_ms(std::int64_t ms, const char* name = "`timeout`");

// Where the endpoints of a runtime live when they are not all threads of this process: the
// endpoint ids (stage * T + tp rank) hosted here, their transports, and the tensor-parallel
// collective of a group spread over processes. A process of an mpirun job hosts one endpoint.
struct Hosting {
  std::vector<int> local;                              // endpoint ids run by this process
  std::vector<std::unique_ptr<Transport>> transports;  // one per entry of `local`
  // The collective of `stage`'s group when some of its ranks are elsewhere.
  std::function<std::unique_ptr<TpCollective>(int stage)> make_group;
  std::function<std::string(int endpoint)> peer_name;  // for error messages
  // E.g. a barrier, so that every process has its receivers set and the steps start together
  // (a front end that closes each step with a collective of its own may enter it once).
  std::function<void()> before_step;
  // Called once another process has told this one that it failed its step, before this step
  // fails with it: the job is ending, that process speaks for it and ends it (a front end
  // quiets its stop signals, so that the SIGTERM mpirun then sends reads as no user's stop).
  std::function<void()> on_peer_failure;
};

// Every one of `world` endpoints in this process, over in-process transports.
Hosting in_process_hosting(int world);

struct StepResult {
  StepRecord run;                           // measured: times in ns since the step began
  std::vector<std::int64_t> dispatch_gaps;  // ns from a task's end to the next dispatch
  // Payload buffers this process mapped afresh since the runtime's previous step ended (or it
  // was built): their page faults are in this step's times. A steady step maps none.
  std::int64_t fresh_buffers = 0;
  // When the step began on this process's steady clock (now_ns()), which `run`'s times count
  // from; a merged record's (dist/step_merge.hpp) is on job rank 0's clock.
  std::int64_t origin_ns = 0;
};

// The longest a stalled step's report waits for the other processes' answers (chase_stall's
// three rounds of at most a second) before the step fails.
inline constexpr std::int64_t kStallChaseMaxMs = 3000;
// How much longer than `timeout` a Python pipeline's job waits between and after steps: under
// mpirun (MpiWorld's deadlines), and over c10d on the pipeline's own groups (C10dWorld's step
// limit: the closing exchange, the barrier, the replicas' sums and gathers, the checkpoint's
// gather). A process that completed its part must not give up before a stalled one has asked
// around and said what stalled: the first process to fail ends the job, and a replica that had
// completed its step failed in the closing exchange at `timeout`, naming nobody, where the
// stalled replica's report, naming the stopped process, was never written.
inline constexpr std::int64_t kJobGraceMs = kStallChaseMaxMs + 2000;

class Runtime {
 public:
  // `endpoints`: P * T transports, endpoint i serving stage i / T, rank i % T; empty means
  // in-process transports. The hint must outlive the runtime.
  Runtime(const WorkModel& m, const Hint& hint, const ProgramFactory& programs, RuntimeOptions opt,
          std::vector<std::unique_ptr<Transport>> endpoints = {});
  // Hosts only `hosting.local`; the factory is called for those endpoints only. The step's
  // result holds the records of the local ranks.
  Runtime(const WorkModel& m, const Hint& hint, const ProgramFactory& programs, RuntimeOptions opt,
          Hosting hosting);
  // The model and the hint are kept by reference: a temporary would be gone before the first
  // step read it, so none compiles.
  Runtime(WorkModel&&, const Hint&, const ProgramFactory&, RuntimeOptions,
          std::vector<std::unique_ptr<Transport>> = {}) = delete;
  Runtime(const WorkModel&, Hint&&, const ProgramFactory&, RuntimeOptions,
          std::vector<std::unique_ptr<Transport>> = {}) = delete;
  Runtime(WorkModel&&, const Hint&, const ProgramFactory&, RuntimeOptions, Hosting) = delete;
  Runtime(const WorkModel&, Hint&&, const ProgramFactory&, RuntimeOptions, Hosting) = delete;
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  // Runs one step to completion on every stage. Rethrows the first error (TaskError,
  // StallError, ProtocolError, CollectiveMismatchError, a cancel()'s reason, a peer's told
  // failure) after every thread has been joined;
  // a runtime whose step failed refuses further steps. A failure, unless it came from a peer
  // (PeerFailure, PeerStall, PeerBroken, PeerCancelled), is sent to the endpoints hosted
  // elsewhere (Control::Abort), whose step then fails with a PeerFailure (a task's failure or a
  // protocol's refusal), a PeerBroken (a transport's break), a PeerCancelled (a cancel()) or a
  // PeerStall (anything else) naming this process, at once instead of at their timeout.
  StepResult run_step(int step);
  // Ends the running step from another thread (a front end's Ctrl-C): every wait wakes, the
  // tasks see aborted(), and run_step rethrows `why` once its threads are joined. Any thread,
  // any time: called before a step starts, that step fails at once. A null `why` fails it with
  // Error("runtime: the step was cancelled").
  void cancel(std::exception_ptr why);
  // The running step's failure, once it has one (a task's error, the watchdog's, a cancel),
  // while its threads may still be ending; null before. Any thread, any time.
  std::exception_ptr failure() const { return failure_.error(); }
  // The running step's tasks that the ranks hosted here have ended, of those they have in all
  // (the last step's once it ended): a front end's progress within a long step. Any thread,
  // any time.
  struct StepProgress {
    std::int64_t ended = 0, total = 0;
  };
  StepProgress step_progress() const;
  // Endpoint ids hosted by this runtime.
  const std::vector<int>& local() const { return local_; }
  const ArbiterOptions& arbiter() const { return opt_.arbiter; }

 private:
  void watch(int workers);
  // One thread per local rank, each running its rank's step; a thread that cannot be started
  // fails the step (the ones started end with it).
  std::vector<std::thread> start_compute_threads();
  // The step failed: its stages woken, its groups aborted, the peers told; it throws nothing,
  // as the compute threads are still to be joined.
  void stop_step(int step) noexcept;
  StepResult collect() const;
  // Whether a rank hosted here, in a step and not in a task, waits for a message from another
  // stage.
  bool waits_elsewhere() const;
  std::vector<int> endpoint_slots(int world) const;
  // peer_failure.cpp: the failure, told to the endpoints hosted elsewhere, and heard from them.
  void tell_peers(int step, const std::exception_ptr& why);
  void on_peer_abort(const Message& msg);
  std::string peer_name(int endpoint) const;
  // Endpoint `r` of `st` can receive nothing more (its transport's error): the step running
  // fails with it at once where that rank still waits for a message from another stage, and
  // goes on where it waits for none (a peer that ended its part of the last step and exited
  // breaks its connections); a later step fails at once with it, and a stall names it as its
  // likely cause.
  void on_transport_broken(std::exception_ptr why, const Stage& st, int r);
  std::string transport_broken_text();
  // stall_chase.cpp: a stalled process asks the processes it waits on what they wait on, in
  // turn, so that its report names where the chain ends (a process that does not answer, or
  // one busy in a task) rather than only its neighbour.
  struct Chase {
    std::string text;           // "; asked in turn: ...", or empty
    std::int64_t defer_ns = 0;  // > 0: how long to await a process nearer the end reporting it
  };
  Chase chase_stall(std::int64_t now);
  void answer_query(const Message& msg, const Stage& st, int r, Transport& ep);
  void on_answer(Message&& msg);

  const WorkModel& m_;
  RuntimeOptions opt_;
  FailureState failure_;
  std::mutex cancel_mu_;
  std::exception_ptr cancel_;            // a cancel() that run_step's reset must not forget
  std::exception_ptr cancelled_;         // under cancel_mu_: the last cancel()'s reason
  std::exception_ptr transport_broken_;  // under cancel_mu_: the first endpoint's break
  std::unique_ptr<DelayLine> delay_;
  std::vector<std::unique_ptr<Transport>> endpoints_;  // by position in local_
  std::vector<int> local_;
  std::function<void()> before_step_;
  std::function<void()> on_peer_failure_;  // Hosting::on_peer_failure
  std::function<std::string(int endpoint)> peer_name_;
  int completed_step_ = -1;  // under cancel_mu_: the last step run_step returned (a peer's
                             // abort may come for it after it ended here)
  std::vector<std::unique_ptr<TpCollective>> groups_;  // by stage (nullptr: not hosted)
  std::vector<std::unique_ptr<Stage>> stages_;         // by stage (nullptr: not hosted)
  bool broken_ = false;
  std::uint64_t fresh_seen_ = BufferPool::fresh_total();  // when the previous step ended
  // The stall chase's answers to the current round of queries, by endpoint.
  struct PeerAnswer {
    int step = -1;                // the step the peer was in (-1: none)
    std::int64_t idle_ns = 0;     // how long it had made no progress
    std::vector<int> awaits;      // the endpoints it expects messages from
    std::string text;             // its stages' description
    std::int64_t arrived_ns = 0;  // when the answer came
  };
  std::mutex ask_mu_;
  std::condition_variable ask_cv_;
  std::int32_t ask_round_ = 0;  // under ask_mu_: answers of other rounds are stale
  std::map<int, PeerAnswer> answers_;
  // One round of the chase: a query to each endpoint of `wave`, then a wait of up to `wave_ns`
  // (not past `end`) for their answers; one the query cannot reach is said so in `said`.
  struct Round {
    std::vector<int> asked;         // the endpoints the query reached
    std::map<int, PeerAnswer> got;  // their answers, by endpoint
    std::int64_t waited_ns = 0;     // the wait's limit
    std::int64_t from_ns = 0;       // when it was asked
  };
  Round ask_round(const std::vector<int>& wave, int step, std::int64_t end, std::int64_t wave_ns,
                  std::vector<std::string>& said);
  std::atomic<int> step_now_{-1};               // the step running (-1: between steps)
  std::atomic<std::int64_t> step_start_ns_{0};  // when it began
};

}  // namespace rrfp
