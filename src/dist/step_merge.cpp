#include "dist/step_merge.hpp"

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "core/error.hpp"

namespace rrfp {

namespace {

class Writer {
 public:
  template <typename T>
  void put(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    const auto* p = reinterpret_cast<const std::byte*>(&v);
    out.insert(out.end(), p, p + sizeof v);
  }
  template <typename T>
  void put_all(const std::vector<T>& v) {
    put(static_cast<std::uint64_t>(v.size()));
    for (const T& x : v)
      put(x);
  }
  std::vector<std::byte> out;
};

class Reader {
 public:
  explicit Reader(std::span<const std::byte> in) : in_(in) {}
  template <typename T>
  T get() {
    T v;
    if (pos_ + sizeof v > in_.size()) throw Error("step record: truncated");
    std::memcpy(&v, in_.data() + pos_, sizeof v);
    pos_ += sizeof v;
    return v;
  }
  template <typename T>
  std::vector<T> get_all() {
    const auto n = get<std::uint64_t>();
    if (n > in_.size()) throw Error("step record: truncated");
    std::vector<T> v;
    for (std::uint64_t i = 0; i < n; ++i)
      v.push_back(get<T>());
    return v;
  }

 private:
  std::span<const std::byte> in_;
  std::size_t pos_ = 0;
};

}  // namespace

std::vector<std::byte> pack_step(const StepResult& r) {
  Writer w;
  w.put(r.run.pp);
  w.put(r.run.tp);
  w.put(r.run.coordination_rounds);
  w.put(r.run.failed_rounds);
  w.put_all(r.run.ranks);
  w.put_all(r.run.peak_d);
  w.put_all(r.run.peak_pending_w);
  w.put_all(r.run.tasks);
  w.put_all(r.run.blocked);
  w.put_all(r.dispatch_gaps);
  w.put(r.fresh_buffers);
  return std::move(w.out);
}

void merge_step(StepResult& into, std::span<const std::byte> packed) {
  Reader rd(packed);
  StepRecord& r = into.run;
  const int pp = rd.get<int>(), tp = rd.get<int>();
  if (pp != r.pp || tp != r.tp)
    throw Error("step record: shape P=" + std::to_string(pp) + " T=" + std::to_string(tp) +
                " does not match P=" + std::to_string(r.pp) + " T=" + std::to_string(r.tp));
  r.coordination_rounds += rd.get<std::int64_t>();
  r.failed_rounds += rd.get<std::int64_t>();
  const auto ranks = rd.get_all<RankStats>();
  const auto peak_d = rd.get_all<int>();
  const auto peak_w = rd.get_all<int>();
  if (ranks.size() != r.ranks.size() || peak_d.size() != r.peak_d.size() ||
      peak_w.size() != r.peak_pending_w.size())
    throw Error("step record: per-rank tables do not match");
  for (size_t i = 0; i < ranks.size(); ++i) {
    r.ranks[i].busy += ranks[i].busy;
    r.ranks[i].blocked += ranks[i].blocked;
  }
  for (size_t i = 0; i < peak_d.size(); ++i) {
    r.peak_d[i] = std::max(r.peak_d[i], peak_d[i]);
    r.peak_pending_w[i] = std::max(r.peak_pending_w[i], peak_w[i]);
  }
  for (const TaskRecord& t : rd.get_all<TaskRecord>()) {
    r.tasks.push_back(t);
    r.makespan = std::max(r.makespan, t.end);
  }
  const auto blocked = rd.get_all<BlockedSpan>();
  r.blocked.insert(r.blocked.end(), blocked.begin(), blocked.end());
  const auto gaps = rd.get_all<std::int64_t>();
  into.dispatch_gaps.insert(into.dispatch_gaps.end(), gaps.begin(), gaps.end());
  into.fresh_buffers += rd.get<std::int64_t>();
  send_times_from_arrivals(r);  // messages between the processes merged so far
}

void merge_over_job(Job& job, StepResult& r) {
  // Every process takes part; another replica's sends nothing, so rank 0 merges what it gets.
  const auto all = job.gather_to_root(job.replica() == 0 ? pack_step(r) : std::vector<std::byte>{});
  for (size_t i = 1; i < all.size(); ++i)
    if (!all[i].empty()) merge_step(r, all[i]);
}

}  // namespace rrfp
