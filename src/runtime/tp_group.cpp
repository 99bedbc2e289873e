#include "runtime/tp_group.hpp"

#include <algorithm>
#include <stdexcept>

#include "core/clock.hpp"
#include "runtime/errors.hpp"
#include "runtime/failure.hpp"
#include "runtime/program.hpp"

namespace rrfp {

void TpGroup::all_reduce(int rank, const TaskId& task, std::span<float> data,
                         CollectiveIdle* idle) {
  std::unique_lock lk(mu_);
  if (aborted_) throw_aborted();
  if (arrived_ == 0) {
    task_ = task;
    first_rank_ = rank;
  } else if (!(*task_ == task) || in_[first_rank_].size() != data.size()) {
    const std::string what =
        "stage " + std::to_string(stage_) + ": tensor-parallel rank " + std::to_string(rank) +
        " entered the all-reduce of " + to_string(task) + " (" + std::to_string(data.size()) +
        " floats) while rank " + std::to_string(first_rank_) + " is in the all-reduce of " +
        to_string(*task_) + " (" + std::to_string(in_[first_rank_].size()) +
        " floats): collective order diverged";
    // The ranks waiting here learn why, rather than as torn down: woken before this thread has
    // failed the step, an Aborted without a failure would fail it first, naming no divergence.
    diverged_ = std::make_exception_ptr(CollectiveMismatchError(what));
    aborted_ = true;
    cv_.notify_all();
    std::rethrow_exception(diverged_);
  }
  in_[rank].assign(data.begin(), data.end());
  if (++arrived_ == size_) {
    // Rank order, whoever came first: the same bits as the multi-process group. result_ is
    // only rewritten when the next collective completes, which needs every rank, including
    // the ones still copying this result out.
    result_ = in_[0];
    for (int r = 1; r < size_; ++r)
      for (std::size_t i = 0; i < result_.size(); ++i)
        result_[i] += in_[r][i];
    arrived_ = 0;
    ++generation_;
    cv_.notify_all();
  } else {
    const std::uint64_t gen = generation_;
    for (;;) {
      cv_.wait(lk, [&] { return aborted_ || generation_ != gen || (idle && poked_[rank]); });
      if (generation_ != gen) break;
      if (aborted_) throw_aborted();
      poked_[rank] = 0;
      lk.unlock();  // its idle work takes the stage's lock, under which poke() takes this one
      idle->serve();
      lk.lock();
    }
  }
  std::copy(result_.begin(), result_.end(), data.begin());
}

void TpGroup::throw_aborted() const {
  if (diverged_) std::rethrow_exception(diverged_);
  throw Aborted();
}

void TpGroup::poke(int rank) {
  std::lock_guard lk(mu_);
  poked_[rank] = 1;
  cv_.notify_all();
}

void TpGroup::abort() {
  std::lock_guard lk(mu_);
  aborted_ = true;
  cv_.notify_all();
}

bool TaskContext::aborted() const {
  return failure_ && failure_->failed();
}

void TaskContext::wait_until(std::int64_t deadline, bool spin) const {
  // Slices short enough that a torn-down step is noticed at once, long enough that a task of
  // the usual milliseconds sleeps once, to the exact deadline (absolute: no drift), as before.
  constexpr std::int64_t kSlice = 50'000'000;
  for (;;) {
    if (aborted()) throw Aborted();
    const std::int64_t now = now_ns();
    if (now >= deadline) return;
    const std::int64_t until = std::min(deadline, now + kSlice);
    if (spin)
      spin_until_ns(until);
    else
      sleep_until_ns(until);
  }
}

void TaskContext::defer(std::unique_ptr<PendingWork> work) {
  if (window_ < 2)
    throw std::logic_error("task " + to_string(task_) +
                           " deferred its work, but the runtime's window is 1");
  pending_ = std::move(work);
}

int TaskContext::tp_size() const {
  return group_ ? group_->size() : 1;
}

void TaskContext::all_reduce(std::span<float> data, std::int64_t emulated_ns) {
  if (!group_) return;
  const std::int64_t since = now_ns();
  {
    if (in_collective_) in_collective_->store(since);
    // Cleared however it ends (a failed step's report must not show a collective left), and
    // before the emulated network time: every peer is in by then.
    struct Left {
      std::atomic<std::int64_t>* at;
      ~Left() {
        if (at) at->store(-1);
      }
    } left{in_collective_};
    group_->all_reduce(tp_rank_, task_, data, idle_);
  }
  if (emulated_ns > 0) sleep_until_ns(now_ns() + emulated_ns);
  wait_ns_ += now_ns() - since;
}

}  // namespace rrfp
