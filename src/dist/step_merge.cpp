#include "dist/step_merge.hpp"

#include <algorithm>
#include <cstring>
#include <string>
#include <type_traits>

#include "core/error.hpp"
#include "runtime/errors.hpp"

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
  w.put(r.origin_ns);
  w.put(r.run.makespan);
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

namespace {

// A packed record, all but the run's options (the same on every process).
StepResult unpack_step(std::span<const std::byte> packed) {
  Reader rd(packed);
  StepResult out;
  StepRecord& r = out.run;
  r.pp = rd.get<int>();
  r.tp = rd.get<int>();
  out.origin_ns = rd.get<std::int64_t>();
  r.makespan = rd.get<std::int64_t>();
  r.coordination_rounds = rd.get<std::int64_t>();
  r.failed_rounds = rd.get<std::int64_t>();
  r.ranks = rd.get_all<RankStats>();
  r.peak_d = rd.get_all<int>();
  r.peak_pending_w = rd.get_all<int>();
  r.tasks = rd.get_all<TaskRecord>();
  r.blocked = rd.get_all<BlockedSpan>();
  out.dispatch_gaps = rd.get_all<std::int64_t>();
  out.fresh_buffers = rd.get<std::int64_t>();
  return out;
}

// Moves every time of `r` `by` ns later: its times counted from an origin that much earlier.
void shift_times(StepRecord& r, std::int64_t by) {
  if (by == 0) return;
  r.makespan += by;
  for (TaskRecord& t : r.tasks) {
    t.start += by;
    t.compute_end += by;
    t.end += by;
    if (t.input_at >= 0) t.input_at += by;
  }
  for (BlockedSpan& b : r.blocked) {
    b.start += by;
    b.end += by;
  }
}

}  // namespace

void merge_step(StepResult& into, std::span<const std::byte> packed) {
  StepResult other = unpack_step(packed);
  StepRecord& r = into.run;
  const StepRecord& o = other.run;
  if (o.pp != r.pp || o.tp != r.tp)
    throw Error("step record: shape P=" + std::to_string(o.pp) + " T=" + std::to_string(o.tp) +
                " does not match P=" + std::to_string(r.pp) + " T=" + std::to_string(r.tp));
  if (o.ranks.size() != r.ranks.size() || o.peak_d.size() != r.peak_d.size() ||
      o.peak_pending_w.size() != r.peak_pending_w.size())
    throw Error("step record: per-rank tables do not match");
  // Both on one clock, from the earlier of the two starts, so that no time is negative.
  const std::int64_t origin = std::min(into.origin_ns, other.origin_ns);
  shift_times(r, into.origin_ns - origin);
  shift_times(other.run, other.origin_ns - origin);
  into.origin_ns = origin;
  r.coordination_rounds += o.coordination_rounds;
  r.failed_rounds += o.failed_rounds;
  for (size_t i = 0; i < o.ranks.size(); ++i)
    r.ranks[i] += o.ranks[i];
  for (size_t i = 0; i < o.peak_d.size(); ++i) {
    r.peak_d[i] = std::max(r.peak_d[i], o.peak_d[i]);
    r.peak_pending_w[i] = std::max(r.peak_pending_w[i], o.peak_pending_w[i]);
  }
  r.makespan = std::max(r.makespan, o.makespan);
  r.tasks.insert(r.tasks.end(), o.tasks.begin(), o.tasks.end());
  r.blocked.insert(r.blocked.end(), o.blocked.begin(), o.blocked.end());
  into.dispatch_gaps.insert(into.dispatch_gaps.end(), other.dispatch_gaps.begin(),
                            other.dispatch_gaps.end());
  into.fresh_buffers += other.fresh_buffers;
  send_times_from_arrivals(r);  // messages between the processes merged so far
}

void merge_over_job(Job& job, StepResult& r) {
  // Every process takes part; another replica's sends nothing, so rank 0 merges what it gets.
  // Each record's start goes on rank 0's clock first (a collective the first time).
  r.origin_ns -= job.clock_offset().ns;
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

namespace {

enum Outcome : std::uint8_t { kCompleted = 0, kFailed = 1, kSilent = 2 };

Outcome outcome_of(const std::exception_ptr& error) {
  if (!error) return kCompleted;
  return failed_in_task(error) ? kFailed : kSilent;  // silent: a process may be gone
}

// Rank 0's part of the all-gather: its outcome, then, when every process of replica 0 completed
// (`all`: what they sent to it), 1 and the replica's merged record; else 0.
std::vector<double> root_part(Outcome mine, StepResult& r,
                              const std::vector<std::vector<std::byte>>& all) {
  for (const auto& sent : all)
    if (sent.empty() || sent[0] != std::byte{kCompleted}) return {static_cast<double>(mine), 0.0};
  try {
    for (size_t i = 1; i < all.size(); ++i)
      if (all[i].size() > 1) merge_step(r, std::span(all[i]).subspan(1));
  } catch (const Error&) {
    // A record that does not fit: every process drops the step, rather than rank 0 leaving the
    // all-gather that the others wait in.
    return {static_cast<double>(kFailed), 0.0};
  }
  std::vector<double> part = as_doubles(pack_step(r));
  part.insert(part.begin(), {static_cast<double>(mine), 1.0});
  return part;
}

// The job ranks whose step did not complete, by the all-gather's first value of each.
std::string failed_ranks(const std::vector<std::vector<double>>& got) {
  std::string where;
  int n = 0;
  for (size_t r = 0; r < got.size(); ++r)
    if (got[r].empty() || got[r][0] != kCompleted) where += (n++ ? ", " : "") + std::to_string(r);
  if (n == 0) return "";
  return (n > 1 ? "job ranks " : "job rank ") + where;
}

}  // namespace

void finish_step_over_job(Job& job, int step, StepResult& r, std::exception_ptr& error) {
  const Outcome mine = outcome_of(error);
  if (mine == kSilent) return;
  try {
    // Each record's start goes on rank 0's clock first (a collective the first time, which
    // every process therefore makes, whatever its outcome).
    const std::int64_t offset = job.clock_offset().ns;
    std::vector<std::byte> sent{std::byte{mine}};
    if (mine == kCompleted && job.replica() == 0) {
      r.origin_ns -= offset;
      const std::vector<std::byte> packed = pack_step(r);
      sent.insert(sent.end(), packed.begin(), packed.end());
    }
    // Rank 0 merges replica 0's records (gather_to_root may reach that replica alone); every
    // process's outcome then reaches every other in the all-gather, which spans the job.
    const auto all = job.gather_to_root(sent);
    const auto got = job.all_gather(
        job.rank() == 0 ? root_part(mine, r, all) : std::vector<double>{static_cast<double>(mine)});
    if (const std::string where = failed_ranks(got); !where.empty()) {
      if (!error)
        error = std::make_exception_ptr(
            PeerFailure("step " + std::to_string(step) + " failed on " + where +
                        " after this process had done its part: every process of the job "
                        "drops the step, so that all keep the same weights"));
      return;
    }
    if (job.rank() == 0) return;
    const std::vector<double>& root = got.at(0);
    if (root.size() < 2 || root[1] != 1.0) throw Error("step record: none came from rank 0");
    StepResult merged = unpack_step(as_bytes(std::vector<double>(root.begin() + 2, root.end())));
    merged.run.arbiter = r.run.arbiter;  // what is not packed: the same everywhere
    r = std::move(merged);
  } catch (...) {
    if (!error) error = std::current_exception();
  }
}

}  // namespace rrfp
