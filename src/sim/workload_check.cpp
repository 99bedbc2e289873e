// A workload's checks: each field's range, a realized work's sizes, the step's total time
// (which must fit the simulation's 64-bit nanosecond clock), and a message model's fields as
// they are set on a realized work.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "core/error.hpp"
#include "core/format.hpp"
#include "core/modes.hpp"
#include "sim/workload.hpp"

namespace rrfp {

namespace {

// Throws InputError naming `what` unless lo <= v <= hi (NaN never is).
void check_in(const std::string& what, double v, double lo, double hi) {
  if (!(v >= lo && v <= hi))
    throw InputError(what + ": must be a finite number in [" + fmt("%g", lo) + ", " +
                     fmt("%g", hi) + "], got " + fmt_given(v));
}

// comm_links: 0 (each message on its own) or a capacity of at least one message's worth, at
// most 4096; `what` names the value in the error.
void check_links(double links, const std::string& what) {
  if (links != 0 && !(links >= 1 && links <= 4096))
    throw InputError(what +
                     ": must be 0 (each message on its own) or in [1, 4096] (messages' worth of "
                     "bandwidth), got " +
                     fmt_given(links));
}
}  // namespace

void validate(const WorkloadParams& w) {
  // Each field's range: wide enough for any real job, narrow enough that no realized duration,
  // token count or byte count can overflow or turn into NaN.
  auto in = [](const char* f, double v, double lo, double hi) {
    check_in(std::string("workload ") + f, v, lo, hi);
  };
  constexpr double kUs = 1e9;  // any time: at most 1000 s
  in("forward_us", w.forward_us, 0, kUs);
  in("backward_ratio_min", w.backward_ratio_min, 0, 100);
  in("backward_ratio_max", w.backward_ratio_max, w.backward_ratio_min, 100);
  in("weight_share", w.weight_share, 0, 1);
  in("head_factor", w.head_factor, 0, 100);
  in("compute_sigma", w.compute_sigma, 0, 10);
  in("tokens_mean", w.tokens_mean, 1e-9, 1e9);
  in("tokens_sigma", w.tokens_sigma, 0, 10);
  in("tokens_min", w.tokens_min, 0, 1e9);
  in("tokens_max", w.tokens_max, w.tokens_min, 1e9);
  // A mean outside the clamp's bounds clamped every microbatch to one of them, silently: a
  // language file's tokens_mean 100000 ran 16384 tokens each (the preset's tokens_max).
  if (w.tokens_mean < w.tokens_min || w.tokens_mean > w.tokens_max)
    throw InputError("workload tokens_mean: " + fmt_given(w.tokens_mean) +
                     " lies outside [tokens_min, tokens_max] = [" + fmt("%g", w.tokens_min) + ", " +
                     fmt("%g", w.tokens_max) +
                     "], to which every microbatch's tokens are clamped; give tokens_min or "
                     "tokens_max with it");
  in("quadratic_share", w.quadratic_share, 0, 1);
  in("images_scale", w.images_scale, 0, 1e6);
  in("images_alpha", w.images_alpha, 1e-9, 1e6);
  in("images_max", w.images_max, 0, 1e6);
  in("image_us", w.image_us, 0, kUs);
  in("image_tokens", w.image_tokens, 0, 1e6);
  in("vision_chunks", w.vision_chunks, 0, 1e6);
  in("jitter_p", w.jitter.p, 0, 1);
  in("jitter_floor_us", w.jitter.floor_us, 0, kUs);
  in("jitter_alpha", w.jitter.alpha, 0, 1e3);
  in("straggler_stage", w.straggler_stage, -2, 1e6);
  in("straggler_factor", w.straggler_factor, 0, 1e3);
  in("straggler_window", w.straggler_window, 1, 1e6);
  in("straggler_prob", w.straggler_prob, 0, 1);
  in("comm_latency_us", w.comm_latency_us, 0, kUs);
  in("comm_bandwidth_gbps", w.comm_bandwidth_gbps, 0, 1e9);
  in("comm_sigma", w.comm_sigma, 0, 10);
  in("comm_slow_prob", w.comm_slow_prob, 0, 1);
  in("comm_slow_us", w.comm_slow_us, 0, kUs);
  in("comm_links", w.comm_links, 0, 4096);
  check_links(w.comm_links, "workload comm_links");
  in("comm_two_slowdown", w.comm_two_slowdown, 1, 64);
  in("comm_wake_us", w.comm_wake_us, 0, 1e6);
  in("comm_wake_per_copy_us", w.comm_wake_per_copy_us, 0, 1e6);
  in("bytes_per_token", w.bytes_per_token, 0, 1e9);
  in("tp_sigma", w.tp_sigma, 0, 10);
  in("tp_collective_us", w.tp_collective_us, 0, kUs);
  in("coord_latency_us", w.coord_latency_us, 0, kUs);
}

std::int64_t duration_ns(double us, const char* what, const char* remedy) {
  // In as many digits as tell it from the limit: %g read 1000000001 us as "1e+09 us; the most
  // one may take is 1e+09 us", and %.10g 1000000000.0004 us as "1000000000 us".
  if (!(us >= 0 && us <= kMaxTaskUs))
    throw InputError(std::string(what) + ": a task or message of " + fmt_given(us) +
                     " us; the most one may take is " + fmt("%g", kMaxTaskUs) + " us (1000 s)" +
                     (remedy ? std::string(": ") + remedy : std::string()));
  return std::llround(us * 1000);
}

void check_work(const RealizedWork& w, const WorkModel& m) {
  const std::string pre = "realized work: ";
  checked_tp(w.tp);
  if (w.num_tasks != m.num_tasks())
    throw InputError(pre + "`num_tasks` is " + std::to_string(w.num_tasks) +
                     ", the work model has " + std::to_string(m.num_tasks()));
  const auto per_rank = static_cast<std::size_t>(w.tp) * static_cast<std::size_t>(w.num_tasks);
  const auto sized = [&](const std::vector<std::int64_t>& v, const char* name, std::size_t n) {
    if (v.size() != n)
      throw InputError(pre + "`" + name + "` holds " + std::to_string(v.size()) + " entries, not " +
                       std::to_string(n) + " (tp " + std::to_string(w.tp) + " x " +
                       std::to_string(w.num_tasks) + " tasks, or one a task)");
    for (std::size_t i = 0; i < n; ++i)
      if (v[i] < 0)
        throw InputError(pre + "`" + name + "`[" + std::to_string(i) + "] is " +
                         std::to_string(v[i]) + ": must be at least 0");
  };
  sized(w.compute_ns, "compute_ns", per_rank);
  sized(w.message_ns, "message_ns", per_rank);
  sized(w.message_bytes, "message_bytes", static_cast<std::size_t>(w.num_tasks));
  const std::pair<const char*, std::int64_t> times[] = {{"collective_ns", w.collective_ns},
                                                        {"coord_ns", w.coord_ns},
                                                        {"link_latency_ns", w.link_latency_ns},
                                                        {"wake_ns", w.wake_ns},
                                                        {"wake_per_copy_ns", w.wake_per_copy_ns}};
  for (const auto& [name, ns] : times)
    if (ns < 0)
      throw InputError(pre + "`" + name + "` is " + std::to_string(ns) + ": must be at least 0");
  check_links(w.links, "realized work: links");
  check_in("realized work: two_slowdown", w.two_slowdown, 1, 64);
  check_total(w);
}

void check_total(const RealizedWork& w, const std::string& what, const std::string& remedy) {
  // A message sharing the links takes up to two_slowdown times its time alone (SharedLinks: each
  // of n moving ones at min(1, links / n, 1 / two_slowdown) of its rate, so the links move at
  // least one message's worth per two_slowdown). Counted alone, 145,000 microbatches of 1000 s
  // messages at 64x passed 2^63 ns, and the simulation's clock wrapped and never ended.
  const double slowdown = std::max(1.0, w.two_slowdown);
  double total =
      static_cast<double>(w.num_tasks) * static_cast<double>(w.collective_ns + w.coord_ns);
  for (int idx = 0; idx < w.num_tasks; ++idx) {
    double most = 0;  // the slowest rank's task and message
    for (int rank = 0; rank < w.tp; ++rank)
      most = std::max(most, static_cast<double>(w.compute(rank, idx)) +
                                slowdown * static_cast<double>(w.message(rank, idx)));
    total += most;
  }
  if (total > 4.6e18)
    throw InputError(what + ": its " + std::to_string(w.num_tasks) + " tasks add up to " +
                     fmt("%g", total / 1e9 / 86400 / 365) + " years" +
                     (slowdown > 1 ? " (messages at comm_two_slowdown " + fmt_given(slowdown) +
                                         " times their time alone, as sharing the links may "
                                         "make them)"
                                   : std::string()) +
                     "; a step may hold at most 146: " + remedy);
}

void set_message_model(const WorkModel& m, RealizedWork& w, const MessageModel& mm) {
  check_links(mm.links, "message model: links");
  check_in("message model: two_slowdown", mm.two_slowdown, 1, 64);
  check_in("message model: bandwidth_gbps", mm.bandwidth_gbps, 0, 1e9);
  check_in("message model: wake_us", mm.wake_us, 0, 1e6);
  check_in("message model: wake_per_copy_us", mm.wake_per_copy_us, 0, 1e6);
  w.links = mm.links;
  w.serial_receive = mm.serial_receive;
  w.two_slowdown = mm.two_slowdown;
  w.offer_payload = mm.offer_payload;
  w.link_latency_ns = duration_ns(mm.latency_us, "message model latency");
  w.wake_ns = duration_ns(mm.wake_us, "message model wake_us");
  w.wake_per_copy_ns = duration_ns(mm.wake_per_copy_us, "message model wake_per_copy_us");
  for (int idx = 0; idx < w.num_tasks; ++idx) {
    const bool sends = sends_across_stages(m, m.task(idx));
    double us = mm.latency_us;
    if (mm.bandwidth_gbps > 0)
      us += static_cast<double>(w.message_bytes[idx]) / (mm.bandwidth_gbps * 1e3);
    for (int rank = 0; rank < w.tp; ++rank)
      w.message_ns[static_cast<size_t>(rank) * w.num_tasks + idx] =
          sends ? duration_ns(us, "message model") : 0;
  }
  check_total(w);
}

}  // namespace rrfp
