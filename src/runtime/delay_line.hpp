#pragma once
// One thread that runs actions at absolute times: it emulates message latency (a send leaves
// when the modelled transfer would have ended) without ever holding the compute thread.
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <queue>
#include <thread>
#include <vector>

namespace rrfp {

class DelayLine {
 public:
  // An action that throws hands its exception to `on_error` (the runtime fails its step with
  // it) and the line goes on; without one it would have ended the process (std::terminate).
  explicit DelayLine(std::function<void(std::exception_ptr)> on_error = {});
  ~DelayLine();  // drops what is still pending and joins
  DelayLine(const DelayLine&) = delete;
  DelayLine& operator=(const DelayLine&) = delete;

  // Runs `fn` on the delay thread at now_ns() >= due; actions due at the same time run in
  // the order they were posted.
  void post(std::int64_t due, std::function<void()> fn);
  // Drops every pending action (a failed step) and waits for one under way to end, so that no
  // send of the failed step runs after the step has returned (one raced the step's end on its
  // transport); the thread keeps serving later posts. Not from an action.
  void clear();

 private:
  struct Item {
    std::int64_t due;
    std::uint64_t seq;
    std::function<void()> fn;
  };
  struct Later {
    bool operator()(const Item& a, const Item& b) const {
      return a.due != b.due ? a.due > b.due : a.seq > b.seq;
    }
  };
  void loop();

  std::mutex mu_;
  std::condition_variable cv_;
  std::condition_variable idle_;  // an action under way has ended
  bool running_ = false;          // an action is under way (outside mu_)
  std::priority_queue<Item, std::vector<Item>, Later> queue_;
  std::uint64_t seq_ = 0;
  bool stop_ = false;
  std::function<void(std::exception_ptr)> on_error_;
  std::thread thread_;  // last: started once the rest is set
};

}  // namespace rrfp
