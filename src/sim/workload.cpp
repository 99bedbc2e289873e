#include "sim/workload.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>

#include "core/error.hpp"
#include "core/format.hpp"
#include "core/modes.hpp"
#include "sim/parallel.hpp"
#include "sim/rng.hpp"

namespace rrfp {

namespace {

// Independent random streams of the model.
enum Stream : std::uint64_t {
  kTokens = 1,
  kImages,
  kRatio,
  kNoise,
  kTpNoise,
  kJitterHit,
  kJitterSize,
  kStragglerStage,
  kStragglerWindow,
  kComm,
  kCommSlow
};

}  // namespace

double microbatch_tokens(const WorkloadParams& w, std::uint64_t seed, int mb) {
  double t = w.tokens_mean;
  if (w.tokens_sigma > 0) {
    // Log-normal with the requested mean: long right tail, like packed documents.
    const double s = w.tokens_sigma;
    t = w.tokens_mean * std::exp(s * std_normal(hash_keys(seed, kTokens, mb)) - 0.5 * s * s);
  }
  return std::clamp(std::round(t), w.tokens_min, w.tokens_max);
}

int microbatch_images(const WorkloadParams& w, std::uint64_t seed, int mb) {
  if (w.images_scale <= 0) return 0;
  const double u = unit_open(hash_keys(seed, kImages, mb));
  const double n = std::floor(w.images_scale * (std::pow(u, -1.0 / w.images_alpha) - 1.0));
  return static_cast<int>(std::min<double>(n, w.images_max));
}

double jittered_us(const JitterLevel& j, double d_us, std::uint64_t seed, const TaskId& t,
                   int rank) {
  // The paper sleeps on F and B only. Keying the draw by what the task computes rather than by
  // its index makes a run with a split backward see the same hits as one without.
  if (j.p <= 0 || t.kind == Kind::W) return d_us;
  const auto kind = static_cast<std::uint64_t>(t.kind);
  if (unit_open(hash_keys(seed, kJitterHit, kind, t.chunk, t.mb, rank)) >= j.p) return d_us;
  const double u = unit_open(hash_keys(seed, kJitterSize, kind, t.chunk, t.mb, rank));
  return d_us + j.alpha * std::max(j.floor_us, d_us) * (0.5 + u);
}

// A split B takes the whole backward's stall, sized by B + W, as realize() draws it: sized by B
// alone, BFW faced smaller stalls than the runs whose backward is whole (1.25x at P=1 M=1 under
// J3, where nothing can be scheduled). W takes none, so its duration is read unchanged.
void apply_jitter(RealizedWork& w, const WorkModel& m, const JitterLevel& j, std::uint64_t seed) {
  for (int rank = 0; rank < w.tp; ++rank) {
    const std::int64_t* row = w.compute_ns.data() + static_cast<size_t>(rank) * w.num_tasks;
    for (int idx = 0; idx < w.num_tasks; ++idx) {
      const TaskId t = m.task(idx);
      const std::int64_t whole =
          m.split() && t.kind == Kind::B ? row[idx] + row[m.index({Kind::W, t.chunk, t.mb})] : 0;
      auto& ns = w.compute_ns[static_cast<size_t>(rank) * w.num_tasks + idx];
      if (whole == 0) {
        ns = duration_ns(jittered_us(j, static_cast<double>(ns) / 1000, seed, t, rank), "jitter",
                         "lower the workload's times or the jitter");
        continue;
      }
      const double d = static_cast<double>(whole) / 1000;
      const double stall = jittered_us(j, d, seed, t, rank) - d;
      ns = duration_ns(static_cast<double>(ns) / 1000 + stall, "jitter",
                       "lower the workload's times or the jitter");
    }
  }
  check_total(w);
}

bool sends_across_stages(const WorkModel& m, const TaskId& t) {
  Deps deps{};
  const int nc = m.consumers(t, deps);
  for (int i = 0; i < nc; ++i)
    if (deps[i].cross_stage) return true;
  return false;
}

namespace {

// A task's compute before its TP split and jitter: its forward by the microbatch's tokens (and
// images), a backward drawn as a ratio of it, the compute noise and the straggler's windows.
// A split backward's B and W are the whole backward's draws, in the shares `weight_share` sets
// (rank_compute_ns): B + W is the backward a run without the split computes. W drew noise of its
// own, so BFW faced other work than 1F1B (1.137x at P=1 M=1, where nothing can be scheduled).
double task_base_us(const WorkloadParams& w, const WorkModel& m, const TaskId& t, double tokens,
                    double images, std::uint64_t seed, int straggler) {
  const int kind = static_cast<int>(t.kind == Kind::W ? Kind::B : t.kind), chunks = m.chunks();
  const double q = w.quadratic_share;
  const double x = tokens / w.tokens_mean;
  double fwd = w.forward_us / m.vpp() * ((1 - q) * x + q * x * x);
  if (t.chunk == chunks - 1) fwd *= w.head_factor;
  if (w.vision_chunks > 0 && t.chunk < w.vision_chunks)
    fwd += images * w.image_us / w.vision_chunks;
  double base = fwd;
  if (t.kind != Kind::F) {
    const double u = unit_open(hash_keys(seed, kRatio, t.chunk, t.mb));
    base = fwd * (w.backward_ratio_min + u * (w.backward_ratio_max - w.backward_ratio_min));
  }
  if (w.compute_sigma > 0)
    base *= std::exp(w.compute_sigma * std_normal(hash_keys(seed, kNoise, kind, t.chunk, t.mb)));
  if (m.stage_of(t) == straggler && w.straggler_factor != 1.0) {
    const double u = unit_open(hash_keys(seed, kStragglerWindow, t.mb / w.straggler_window));
    if (u < w.straggler_prob) base *= w.straggler_factor;
  }
  return base;
}

// Task `t`'s compute on TP rank `rank`, in ns, from its draws before the TP split (`base`) and
// its TP noise (keyed by `drawn`). A split B and W are shares of the whole backward, which takes
// the stall (W none, as jittered_us says): W is rounded, and B is the whole less W, so that B + W
// is, to the nanosecond, the backward a run without the split computes, and W the same with
// jitter or without. Each rounded on its own, they were up to 1 ns over it (tasks of 1 ns: BFW
// took 7 ns at P=2 M=2 where 1F1B took 6).
std::int64_t rank_compute_ns(const WorkloadParams& w, const WorkModel& m, const TaskId& t,
                             double base, int tp, int drawn, int rank, std::uint64_t seed) {
  double d = base / tp;
  if (tp > 1 && w.tp_sigma > 0)
    d *= std::exp(w.tp_sigma * std_normal(hash_keys(seed, kTpNoise, drawn, rank)));
  try {
    if (!m.split() || t.kind == Kind::F)
      return duration_ns(jittered_us(w.jitter, d, seed, t, rank), "workload");
    const double whole = jittered_us(w.jitter, d, seed, {Kind::B, t.chunk, t.mb}, rank);
    const std::int64_t whole_ns = duration_ns(whole, "workload");
    // The min: a W of the whole backward (weight_share 1) is never 1 ns over it by rounding.
    const std::int64_t w_ns = std::min(whole_ns, duration_ns(d * w.weight_share, "workload"));
    return t.kind == Kind::W ? w_ns : whole_ns - w_ns;
  } catch (const InputError&) {
    // Named by its task and the fields it is drawn from: each field within its range, a draw
    // may still pass the bound ("a task or message of 1037891386 us" named neither).
    throw InputError("workload: " + to_string(t) + " draws a compute time past the " +
                     fmt("%g", kMaxTaskUs) +
                     " us (1000 s) a task may take: lower forward_us or image_us, or what "
                     "multiplies them (backward_ratio_max, head_factor, compute_sigma, "
                     "quadratic_share, the tokens' and images' fields, straggler_factor, "
                     "tp_sigma), or the jitter's (jitter_floor_us, jitter_alpha)");
  }
}

// The latency of the message task `idx` sends from TP rank `rank`, `bytes` split over the group.
double message_us(const WorkloadParams& w, double bytes, int tp, std::uint64_t seed, int idx,
                  int rank) {
  double lat = w.comm_latency_us;
  if (w.comm_bandwidth_gbps > 0) lat += bytes / tp / (w.comm_bandwidth_gbps * 1e3);
  if (w.comm_sigma > 0)
    lat *= std::exp(w.comm_sigma * std_normal(hash_keys(seed, kComm, idx, rank)));
  if (w.comm_slow_prob > 0 && unit_open(hash_keys(seed, kCommSlow, idx, rank)) < w.comm_slow_prob)
    lat += w.comm_slow_us * std::exp(0.2 * std_normal(hash_keys(seed, kCommSlow, idx, rank, 1)));
  return lat;
}

// `v` as `n` zeros, on 2 MiB pages where the kernel gives them on request (transparent huge
// pages in madvise mode, Debian's default): a large simulation's durations fill tens of MB, and
// on 4 KiB pages their first touch was a tenth of its time (P=M=1024: 12,000 page faults).
void assign_zeros(std::vector<std::int64_t>& v, std::size_t n) {
  constexpr std::uintptr_t kHuge = std::uintptr_t{2} << 20;
  v.reserve(n);
  const auto first = reinterpret_cast<std::uintptr_t>(v.data());
  const std::uintptr_t begin = (first + kHuge - 1) & ~(kHuge - 1);
  const std::uintptr_t end = (first + n * sizeof(std::int64_t)) & ~(kHuge - 1);
  if (end > begin)  // advice only: where refused, the pages stay small
    ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
  v.assign(n, 0);
}

// The fields whose range depends on the shape, which validate() cannot know.
void check_against_shape(const WorkloadParams& w, const WorkModel& m) {
  // A stage past P would slow nothing, silently.
  if (w.straggler_stage >= m.pp())
    throw InputError("workload straggler_stage: " + std::to_string(w.straggler_stage) + " for " +
                     std::to_string(m.pp()) + " stages; a stage between 0 and " +
                     std::to_string(m.pp() - 1) +
                     ", -1 for none or -2 for one drawn from the seed");
  // More vision chunks than the model has were capped to them, silently.
  if (w.vision_chunks > m.chunks())
    throw InputError("workload vision_chunks: " + std::to_string(w.vision_chunks) + " for " +
                     std::to_string(m.chunks()) + " chunks (P x V); a count from 0 to " +
                     std::to_string(m.chunks()));
}

RealizedWork realize_work(const WorkloadParams& w, const WorkModel& m, int tp, std::uint64_t seed) {
  validate(w);
  check_against_shape(w, m);
  RealizedWork r;
  r.tp = checked_tp(tp);
  r.num_tasks = m.num_tasks();
  assign_zeros(r.compute_ns, static_cast<size_t>(tp) * r.num_tasks);
  assign_zeros(r.message_ns, static_cast<size_t>(tp) * r.num_tasks);
  assign_zeros(r.message_bytes, static_cast<size_t>(r.num_tasks));
  r.collective_ns = tp > 1 ? duration_ns(w.tp_collective_us, "workload tp_collective_us") : 0;
  r.coord_ns = tp > 1 ? duration_ns(w.coord_latency_us, "workload coord_latency_us") : 0;
  r.links = w.comm_links;
  r.serial_receive = w.comm_serial_receive;
  r.two_slowdown = w.comm_two_slowdown;
  r.offer_payload = w.comm_offer_payload;
  r.link_latency_ns = duration_ns(w.comm_latency_us, "workload comm_latency_us");
  r.wake_ns = duration_ns(w.comm_wake_us, "workload comm_wake_us");
  r.wake_per_copy_ns = duration_ns(w.comm_wake_per_copy_us, "workload comm_wake_per_copy_us");

  const int mbs = m.microbatches();
  std::vector<double> tokens(mbs), images(mbs);
  for (int mb = 0; mb < mbs; ++mb) {
    images[mb] = microbatch_images(w, seed, mb);
    tokens[mb] = microbatch_tokens(w, seed, mb) + images[mb] * w.image_tokens;
    // Each field in its range let a message pass 2^63 bytes, and its size wrapped negative
    // (the adaptive rule's entry order changed with it, silently).
    if (tokens[mb] * w.bytes_per_token > kMaxMessageBytes)
      throw InputError("workload bytes_per_token: microbatch " + std::to_string(mb) +
                       "'s message would be " + fmt("%.4g", tokens[mb] * w.bytes_per_token) +
                       " bytes (its " + fmt("%.4g", tokens[mb]) +
                       " tokens, images' included, x bytes_per_token); at most 2^40 (1 TiB): "
                       "lower bytes_per_token, the tokens or image_tokens");
  }
  int straggler = w.straggler_stage;
  if (straggler == -2) straggler = static_cast<int>(hash_keys(seed, kStragglerStage) % m.pp());
  // Every draw is a function of its keys alone, so ranges of tasks are drawn on threads of their
  // own (a quarter of a large simulation's time was these draws).
  parallel_ranges(
      r.num_tasks, parallel_parts(r.num_tasks, kMinTasksPerThread), [&](int, int begin, int end) {
        for (int idx = begin; idx < end; ++idx) {
          const TaskId t = m.task(idx);
          const double base = task_base_us(w, m, t, tokens[t.mb], images[t.mb], seed, straggler);
          // A W draws as its B (a B's index is the same with the split and without).
          const int drawn = t.kind == Kind::W ? m.index({Kind::B, t.chunk, t.mb}) : idx;
          // Message: activations forward, activation gradients backward, both tokens x hidden.
          const bool sends = sends_across_stages(m, t);
          const double bytes = tokens[t.mb] * w.bytes_per_token;
          if (t.kind != Kind::W) r.message_bytes[idx] = std::llround(bytes / tp);
          for (int rank = 0; rank < tp; ++rank) {
            const size_t at = static_cast<size_t>(rank) * r.num_tasks + idx;
            r.compute_ns[at] = rank_compute_ns(w, m, t, base, tp, drawn, rank, seed);
            if (sends)
              r.message_ns[at] = duration_ns(message_us(w, bytes, tp, seed, idx, rank), "workload",
                                             "raise comm_bandwidth_gbps, or lower comm_latency_us, "
                                             "comm_sigma, comm_slow_us or "
                                             "bytes_per_token");
          }
        }
      });
  check_total(r);
  // Each time in its range, every task may still round to 0 ns (forward_us 0.001 over TP 4): a
  // step of messages alone, reported as a run of 0 ms work without a word.
  if ((w.forward_us > 0 || w.image_us > 0) && std::all_of(r.compute_ns.begin(), r.compute_ns.end(),
                                                          [](std::int64_t ns) { return ns == 0; }))
    throw InputError("workload forward_us: " + fmt_given(w.forward_us) +
                     " us draws every task as 0 ns (times are counted in whole nanoseconds" +
                     (tp > 1 ? ", and each of the TP ranks takes its share of a task" : "") +
                     "): raise forward_us");
  return r;
}

}  // namespace

RealizedWork realize(const WorkloadParams& w, const WorkModel& m, int tp, std::uint64_t seed) {
  try {
    return realize_work(w, m, tp, seed);
  } catch (const InputError& e) {
    // A file's fields each in range may still not fit the shape, or draw past a bound: the
    // refusal named the field but not the file it came from.
    if (w.origin.empty()) throw;
    throw InputError(w.origin + ": " + e.what());
  }
}

std::int64_t microbatch_size(const WorkModel& m, const RealizedWork& w, int mb) {
  return w.message_bytes[m.index({Kind::F, 0, mb})];
}

RealizedWork unit_cost_work(const WorkModel& m) {
  WorkloadParams w;
  w.forward_us = m.vpp();
  w.backward_ratio_min = w.backward_ratio_max = m.split() ? 2.0 : 1.0;
  w.weight_share = 0.5;
  return realize(w, m, 1, 0);
}

}  // namespace rrfp
