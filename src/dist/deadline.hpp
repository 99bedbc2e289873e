#pragma once
// A deadline for calls that cannot be given one themselves: MPI start-up, communicator splits,
// blocking collectives and shutdown wait inside the library, and a peer process that is stopped
// or gone leaves them waiting forever. While a phase is armed, one watchdog thread waits for it;
// if the phase outlives its deadline, the thread calls `on_expiry` with the phase's name, which
// must end the process (it cannot unblock the call). Phases may overlap (several threads). Time
// this process spends stopped (SIGSTOP, Ctrl-Z) counts towards no deadline, and an expiry says
// when the process was stopped, within its phase or before it: the others may have ended for
// want of it.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

namespace rrfp {

class DeadlineGuard {
 public:
  // What this process knows of its own stops at an expiry, each seen as its watcher woke half a
  // second or more late (stopped, or not run): how long within the phase (0: none), and the
  // last one's length and how long before the expiry it ended (-1: none since the guard was
  // made). A stop before the phase began, the others ending for want of it meanwhile, leaves
  // the first 0 and the last recent.
  struct Stopped {
    std::int64_t within_ms = 0;
    std::int64_t last_ms = -1, last_ago_ms = -1;
  };
  using Expiry =
      std::function<void(const std::string& phase, std::int64_t deadline_ms, Stopped stopped)>;
  explicit DeadlineGuard(Expiry on_expiry);
  ~DeadlineGuard();
  DeadlineGuard(const DeadlineGuard&) = delete;
  DeadlineGuard& operator=(const DeadlineGuard&) = delete;

  // Disarms its phase when it goes out of scope.
  class Phase {
   public:
    Phase(DeadlineGuard* g, std::uint64_t id) : guard_(g), id_(id) {}
    Phase(Phase&& o) noexcept : guard_(o.guard_), id_(o.id_) { o.guard_ = nullptr; }
    Phase(const Phase&) = delete;
    Phase& operator=(const Phase&) = delete;
    Phase& operator=(Phase&&) = delete;
    ~Phase();

   private:
    DeadlineGuard* guard_;
    std::uint64_t id_;
  };
  // Arms `phase` for `deadline_ms` from now; 0, or over 1e12 ms (31 years), means no deadline
  // (nothing is armed).
  [[nodiscard]] Phase arm(std::string phase, std::int64_t deadline_ms);

 private:
  struct Armed {
    std::string phase;
    std::int64_t deadline_ms;
    std::chrono::steady_clock::time_point until;
    std::chrono::steady_clock::duration stopped{};  // this process, within the phase
  };
  void watch();
  void disarm(std::uint64_t id);

  Expiry on_expiry_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::uint64_t, Armed> armed_;
  // The last stop seen (none yet: empty): its length, and when the watcher woke after it.
  struct Stop {
    std::chrono::steady_clock::duration length;
    std::chrono::steady_clock::time_point ended;
  };
  std::optional<Stop> last_stop_;
  std::uint64_t next_id_ = 1;
  bool stop_ = false;
  std::thread thread_;  // started last, so every member above exists when it runs
};

}  // namespace rrfp
