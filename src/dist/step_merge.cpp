#include "dist/step_merge.hpp"

#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
#include <type_traits>

#include "core/error.hpp"
#include "core/format.hpp"
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
  if (all.size() > 1) cut_waits_at_end(r.run);  // the root's record, of every stage now
}

namespace {

// kRelayed: failed because a peer's task failed and told it (PeerFailure), so that the notice
// names the process that failed apart from those that passed it on.
enum Outcome : std::uint8_t { kCompleted = 0, kFailed = 1, kSilent = 2, kRelayed = 3 };

Outcome outcome_of(const std::exception_ptr& error) {
  if (!error) return kCompleted;
  if (!failed_in_task(error)) return kSilent;  // silent: a process may be gone
  return holds<PeerFailure>(error) ? kRelayed : kFailed;
}

// A process's part of the closing all-gather: its outcome; when it completed, the size of what
// it carries (8 bytes), those bytes, and in replica 0 its packed record.
// A failed process's part carries its error's first line (at most kWhyBytes), so that the
// others say why: "joining the step's microbatch losses: ValueError: ..." reached the other
// processes as a bare "failed on job rank 1".
struct ClosingPart {
  Outcome outcome = kFailed;
  std::span<const std::byte> carried, record;
  std::string why;  // a failed part's
};

constexpr std::size_t kWhyBytes = 400;

// `s` cut to at most kWhyBytes, at a UTF-8 character's start: a character cut in two made the
// whole message undecodable where Python raised it (an exception with no text).
std::string cut_whole(std::string s) {
  if (s.size() <= kWhyBytes) return s;
  std::size_t n = kWhyBytes;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80)
    --n;  // s[n] continues a character: cut before the character it belongs to
  s.resize(n);
  return s;
}

std::string why_of(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return cut_whole(first_line(e.what()));
  } catch (...) {
    return "";
  }
}

std::vector<std::byte> pack_part(Outcome mine, std::span<const std::byte> carried,
                                 const StepResult* record, const std::string& why) {
  std::vector<std::byte> out{std::byte{mine}};
  if (mine == kFailed) {
    const auto* w = reinterpret_cast<const std::byte*>(why.data());
    out.insert(out.end(), w, w + why.size());
  }
  if (mine != kCompleted) return out;
  const std::uint64_t n = carried.size();
  const auto* p = reinterpret_cast<const std::byte*>(&n);
  out.insert(out.end(), p, p + sizeof n);
  out.insert(out.end(), carried.begin(), carried.end());
  if (record) {
    const std::vector<std::byte> packed = pack_step(*record);
    out.insert(out.end(), packed.begin(), packed.end());
  }
  return out;
}

ClosingPart unpack_part(std::span<const std::byte> b) {
  ClosingPart part;
  if (!b.empty() && b[0] == std::byte{kRelayed}) part.outcome = kRelayed;
  if (!b.empty() && b[0] == std::byte{kFailed})
    part.why = cut_whole(std::string(reinterpret_cast<const char*>(b.data()) + 1, b.size() - 1));
  if (b.empty() || b[0] != std::byte{kCompleted}) return part;
  std::uint64_t n = 0;
  if (b.size() < 1 + sizeof n) throw Error("step record: truncated");
  std::memcpy(&n, b.data() + 1, sizeof n);
  if (n > b.size() - 1 - sizeof n) throw Error("step record: truncated");
  part.outcome = kCompleted;
  part.carried = b.subspan(1 + sizeof n, n);
  part.record = b.subspan(1 + sizeof n + n);
  return part;
}

// The job ranks whose step did not complete: those whose own task failed, then those a peer
// told ("job ranks 2, 3" read as if both had failed where one raised and one passed it on).
std::string failed_ranks(const std::vector<ClosingPart>& parts) {
  auto ranks = [&](bool relayed, int& n) {
    std::string where;
    for (size_t r = 0; r < parts.size(); ++r)
      if (parts[r].outcome != kCompleted && (parts[r].outcome == kRelayed) == relayed)
        where += (n++ ? ", " : "") + std::to_string(r);
    return where;
  };
  int own = 0, told = 0;
  const std::string failed = ranks(false, own), relayed = ranks(true, told);
  if (own == 0 && told == 0) return "";
  if (own == 0) return (told > 1 ? "job ranks " : "job rank ") + relayed;
  return (own > 1 ? "job ranks " : "job rank ") + failed +
         (told ? " (told to job rank" + std::string(told > 1 ? "s " : " ") + relayed + ")" : "");
}

// " (job rank 1: why)" for the first failed part that said why; "" where none did.
std::string first_why(const std::vector<ClosingPart>& parts) {
  for (size_t r = 0; r < parts.size(); ++r)
    if (parts[r].outcome == kFailed && !parts[r].why.empty())
      return " (job rank " + std::to_string(r) + ": " + parts[r].why + ")";
  return "";
}

// Replica 0's record, merged alike on every process from the parts that hold one (replica 0's
// processes, in job rank order: rank 0's first).
StepResult merged_record(const std::vector<ClosingPart>& parts) {
  std::optional<StepResult> merged;
  for (const ClosingPart& part : parts) {
    if (part.record.empty()) continue;
    if (merged)
      merge_step(*merged, part.record);
    else
      merged = unpack_step(part.record);
  }
  if (!merged) throw Error("step record: none came from replica 0");
  return std::move(*merged);
}

}  // namespace

std::vector<std::vector<std::byte>> finish_step_over_job(Job& job, int step, StepResult& r,
                                                         std::exception_ptr& error,
                                                         std::span<const std::byte> carried) {
  const Outcome mine = outcome_of(error);
  if (mine == kSilent) return {};
  try {
    // Each record's start goes on rank 0's clock first (a collective the first time, which
    // every process therefore makes, whatever its outcome).
    const std::int64_t offset = job.clock_offset().ns;
    const bool records = mine == kCompleted && job.replica() == 0;
    if (records) r.origin_ns -= offset;
    // One all-gather over the job: every process learns every outcome, and merges replica 0's
    // records itself (another replica runs the same tasks again: merged in, each task would
    // appear once per replica).
    const auto got = job.all_gather_bytes(
        pack_part(mine, carried, records ? &r : nullptr, mine == kFailed ? why_of(error) : ""));
    std::vector<ClosingPart> parts;
    for (const auto& b : got)
      parts.push_back(unpack_part(b));
    if (const std::string where = failed_ranks(parts); !where.empty()) {
      if (!error)
        error = std::make_exception_ptr(
            PeerFailure("step " + std::to_string(step) + " failed on " + where +
                        " after this process had done its part" + first_why(parts) +
                        ": every process of the job drops the step alike (none keeps a part "
                        "of it)"));
      return {};
    }
    StepResult merged = merged_record(parts);
    merged.run.arbiter = r.run.arbiter;  // what is not packed: the same everywhere
    r = std::move(merged);
    std::vector<std::vector<std::byte>> every;
    for (const ClosingPart& part : parts)
      every.emplace_back(part.carried.begin(), part.carried.end());
    return every;
  } catch (...) {
    // A record that does not fit fails alike on every process, which all drop the step.
    if (!error) error = std::current_exception();
    return {};
  }
}

}  // namespace rrfp
