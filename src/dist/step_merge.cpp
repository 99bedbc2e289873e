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
  for (size_t i = 0; i < ranks.size(); ++i)
    r.ranks[i] += ranks[i];
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

namespace {

// Bytes as doubles, six to one (each an integer below 2^48, which a double holds exactly), after
// their count: how a record rides on the job's all_gather of doubles.
std::vector<double> as_doubles(const std::vector<std::byte>& b) {
  std::vector<double> out{static_cast<double>(b.size())};
  for (size_t i = 0; i < b.size(); i += 6) {
    std::uint64_t v = 0;
    for (size_t k = 0; k < 6 && i + k < b.size(); ++k)
      v |= static_cast<std::uint64_t>(b[i + k]) << (8 * k);
    out.push_back(static_cast<double>(v));
  }
  return out;
}

std::vector<std::byte> as_bytes(const std::vector<double>& d) {
  if (d.empty()) throw Error("step record: none came from rank 0");
  const auto n = static_cast<size_t>(d[0]);
  if ((n + 5) / 6 != d.size() - 1) throw Error("step record: truncated");
  std::vector<std::byte> out(n);
  for (size_t i = 0; i < n; ++i)
    out[i] = static_cast<std::byte>(static_cast<std::uint64_t>(d[1 + i / 6]) >> (8 * (i % 6)));
  return out;
}

}  // namespace

void share_over_job(Job& job, StepResult& r) {
  merge_over_job(job, r);
  const auto all =
      job.all_gather(job.rank() == 0 ? as_doubles(pack_step(r)) : std::vector<double>{});
  if (job.rank() == 0) return;
  // Rank 0's record into an empty one of the same shape (what is not packed is the same
  // everywhere: the run's options).
  StepResult merged = r;
  StepRecord& m = merged.run;
  m.coordination_rounds = m.failed_rounds = 0;
  for (auto& rank : m.ranks)
    rank = RankStats{};
  std::fill(m.peak_d.begin(), m.peak_d.end(), 0);
  std::fill(m.peak_pending_w.begin(), m.peak_pending_w.end(), 0);
  m.tasks.clear();
  m.blocked.clear();
  m.makespan = 0;
  merged.dispatch_gaps.clear();
  merged.fresh_buffers = 0;
  merge_step(merged, as_bytes(all.at(0)));
  r = std::move(merged);
}

}  // namespace rrfp
