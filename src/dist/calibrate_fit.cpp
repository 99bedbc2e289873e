// The calibration's fit (dist/calibrate.hpp): measured one-way times to the simulator's message
// model, and the model written as a workload file and as a table.
#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/format.hpp"
#include "dist/calibrate.hpp"

namespace rrfp {

namespace {

// A bandwidth needs the largest size at least this many times the smallest: the latency is the
// smallest size's time, its own bytes' transfer included, which the model then counts again
// (at most an eighth of the largest size's transfer).
constexpr double kMinSizeRatio = 8;
// The least rise over the sizes' span, as a share of the latency, taken for a bandwidth: each
// size's rounds run after the previous size's, so a drift of the machine (another process
// taking a core) moves one size's median and not another's. `--sizes 8,8` read 0.5-1.8 GB/s
// out of medians 0.01-1 us apart (latency 4 us), and one 8 MiB median read 14.8 us between
// sizes of 4.1-4.3 (inproc, which moves pointers).
constexpr double kDriftShare = 0.25;
// Above this, size costs nothing: a transport that moves pointers (inproc).
constexpr double kFreeGbps = 1000;

struct SlopeFit {
  SizeCost cost = SizeCost::Free;
  double latency_us = 0, gbps = 0;
  std::string note;
};

std::string bytes_text(std::size_t b) {
  if (b >= (1u << 20) && b % (1u << 20) == 0) return std::to_string(b >> 20) + " MiB";
  if (b >= (1u << 10) && b % (1u << 10) == 0) return std::to_string(b >> 10) + " KiB";
  return std::to_string(b) + " B";
}

// latency + bytes / bandwidth over the column `col` (spreads `spread`): the latency is the
// smallest size's time; the slope is the least-squares one of the rise over the bytes beyond
// the smallest's, which the large sizes dominate, as they should. It counts only where it
// stands out of the noise: the two ends' spreads (together about four standard errors of the
// difference of two medians of 15), three times the scatter about the line (three sizes or
// more), and the drift floor.
SlopeFit fit_slope(const std::vector<CalibrationPoint>& pts, double CalibrationPoint::*col,
                   double CalibrationPoint::*spread) {
  auto by_bytes = [](const CalibrationPoint& a, const CalibrationPoint& b) {
    return a.bytes < b.bytes;
  };
  const CalibrationPoint& lo = *std::min_element(pts.begin(), pts.end(), by_bytes);
  const CalibrationPoint& hi = *std::max_element(pts.begin(), pts.end(), by_bytes);
  SlopeFit f;
  f.latency_us = lo.*col;
  const double span = static_cast<double>(hi.bytes - lo.bytes);
  const std::string range = bytes_text(lo.bytes) + " to " + bytes_text(hi.bytes);
  if (static_cast<double>(hi.bytes) < kMinSizeRatio * static_cast<double>(lo.bytes)) {
    f.cost = SizeCost::Unresolved;
    f.note = range + ": the largest size must be at least " + fmt("%.0f", kMinSizeRatio) +
             " times the smallest";
    return f;
  }
  double num = 0, den = 0;
  for (const CalibrationPoint& p : pts) {
    const double x = static_cast<double>(p.bytes - lo.bytes);
    num += x * (p.*col - f.latency_us);
    den += x * x;
  }
  const double us_per_byte = num / den;  // den > 0: the span is
  double scatter = 0;
  for (const CalibrationPoint& p : pts) {
    const double r = p.*col - f.latency_us - us_per_byte * static_cast<double>(p.bytes - lo.bytes);
    scatter += r * r;
  }
  const int n = static_cast<int>(pts.size());
  const double noise =
      std::max({std::hypot(lo.*spread, hi.*spread), n >= 3 ? 3 * std::sqrt(scatter / (n - 2)) : 0.0,
                kDriftShare * f.latency_us});
  if (us_per_byte > 0 && us_per_byte * span > noise) {
    f.gbps = 1e-3 / us_per_byte;
    f.cost = f.gbps < kFreeGbps ? SizeCost::Fitted : SizeCost::Free;
    if (f.cost == SizeCost::Free) f.gbps = 0;
    return f;
  }
  // No rise above the noise: the bandwidth is above what the span would have shown, and at
  // kFreeGbps or more that is size costing nothing.
  const double shows_up_to_gbps = noise > 0 ? 1e-3 * span / noise : kFreeGbps;
  if (shows_up_to_gbps >= kFreeGbps) return f;
  f.cost = SizeCost::Unresolved;
  f.note = range + " would show a bandwidth only below " + fmt("%.2g", shows_up_to_gbps) +
           " GB/s over the times' noise of " + fmt("%.2g", noise) + " us";
  return f;
}

// The fit line's words on two transfers at once: what was measured, and whether the model
// takes it (links share a bandwidth; with none, "take 1.62x as long" claimed a cost the file
// leaves out). Nothing where it rounds to 1.00x.
std::string overlap_words(const Calibration& c) {
  const std::string x = fmt("%.2fx", c.overlap_slowdown);
  if (c.overlap_slowdown == 1 || x == "1.00x") return {};
  // With streams the links and the two slowdown are the streams' (the model's two at once is
  // the larger of two_slowdown and 2 / links): "take 2.14x" read as modelled where 1.56x was.
  if (c.links_from_streams())
    return "; two ping-pong pairs at once took " + x +
           " as long (the model takes the streams' sharing, next)";
  if (c.links > 0) return "; two transfers at once take " + x + " as long";
  return "; two transfers at once took " + x + " as long, not modelled (" +
         (c.size_cost == SizeCost::Free ? "size costs nothing here, so no bandwidth is shared"
                                        : "no bandwidth to share") +
         ")";
}

// A ratio below 1 of `what` at once over one alone, and what the model takes of it.
std::string faster_together(const std::string& what, double ratio) {
  return what + " at once took " + fmt("%.2fx", ratio) +
         " as long as one alone: faster together is no cost of sharing, nor a speed-up to model "
         "(thread wake-ups); taken as 1x";
}

void take(Calibration& c, const SlopeFit& f) {
  c.latency_us = f.latency_us;
  c.bandwidth_gbps = f.gbps;
  c.size_cost = f.cost;
  c.size_note = f.note;
}

}  // namespace

void fit_message_model(Calibration& c) {
  if (c.points.empty()) throw InputError("calibration: no measured sizes to fit");
  c.overlap_ratio = 0;
  c.overlap_slowdown = 1;
  c.links = 0;
  c.two_slowdown = 1;
  c.fitted_with_two_pairs = false;
  const bool overlap = std::all_of(c.points.begin(), c.points.end(),
                                   [](const CalibrationPoint& p) { return p.overlap_us > 0; });
  const auto largest = std::max_element(c.points.begin(), c.points.end(),
                                        [](auto& a, auto& b) { return a.bytes < b.bytes; });
  take(c, fit_slope(c.points, &CalibrationPoint::alone_us, &CalibrationPoint::alone_spread_us));
  if (overlap && largest->alone_us > 0) {
    c.overlap_ratio = largest->overlap_us / largest->alone_us;
    c.overlap_slowdown = std::max(1.0, c.overlap_ratio);
  }
  // The simulator shares its links as a fluid (sim/shared_links.hpp): two transfers at once
  // each move at links / 2 of the rate of one alone, so the slowdown measured with both pairs
  // transferring gives the capacity. A number, not a verdict: the slowdown of two 32 MiB
  // copies at once moved across the 1.5x threshold once drawn between one link and two from
  // one calibration to the next, and flipped the prediction with it (measured:
  // docs/design-decisions.md, "Processes (Open MPI)"). A transport that moves pointers
  // (inproc: no bandwidth) has no capacity to share; its slowdown is thread wake-ups.
  c.four_ratio = 0;
  c.four_slowdown = 0;
  if (c.bandwidth_gbps > 0 && largest->stream_us > 0 && largest->stream_four_us > 0) {
    // Four streams at once, every process copying, none waiting on a hand-over: what the
    // messages of a step in flight together do. A step's message with one other in flight
    // slowed far less than the two pairs' ping-pong: each of its legs waits for a thread to
    // wake behind the other pair's copy, which a step's messages, sent while the stages
    // compute, mostly do not. Four streams at once got about the two cores' worth of capacity
    // (measured: docs/twin.md, "Calibrating to a transport").
    c.four_ratio = largest->stream_four_us / largest->stream_us;
    c.four_slowdown = std::max(1.0, c.four_ratio);
    c.links = std::clamp(4 / c.four_slowdown, 1.0, 4.0);
    // Two at once, each in its own process with cores to spare, still slow each other (caches,
    // memory bandwidth): links alone would charge them nothing, yet a step's message with one
    // other in flight took clearly longer than alone, and two streams read a slowdown too
    // (measured: docs/design-decisions.md, "Processes (Open MPI)"). Never more than four at
    // once cost.
    if (largest->stream_two_us > 0)
      c.two_slowdown = std::clamp(largest->stream_two_us / largest->stream_us, 1.0,
                                  std::max(1.0, c.four_slowdown));
    return;
  }
  if (c.bandwidth_gbps > 0 && overlap) {
    c.links = std::clamp(2 / c.overlap_slowdown, 1.0, 2.0);
    // Faster with the other pair transferring than alone: waking waiters preempt the copying
    // threads when processes outnumber cores (seen at 32 MiB through shared-memory fragments,
    // before rrfp chose the single copy, where the median message of a P=4 step moved at the
    // overlapped rate, not the lone one; measured: docs/data/twin-history.md, "The fixes, in
    // order", item 5). In a pipeline step every process is busy, as in the overlapped round:
    // its rate is the one to use, where it shows one.
    if (c.overlap_ratio < 1) {
      const SlopeFit two =
          fit_slope(c.points, &CalibrationPoint::overlap_us, &CalibrationPoint::overlap_spread_us);
      if (two.cost == SizeCost::Fitted) {
        take(c, two);
        c.fitted_with_two_pairs = true;
      }
    }
  }
}

std::string calibration_json(const Calibration& c) {
  nlohmann::json j;
  j["comm_latency_us"] = c.latency_us;
  // Sizes that could not tell a bandwidth from noise say nothing of one, nor of what sharing
  // it costs: a bandwidth of 0 would model size as free, over the file's preset too.
  if (c.size_cost != SizeCost::Unresolved) {
    j["comm_bandwidth_gbps"] = c.bandwidth_gbps;
    j["comm_links"] = c.links;
    j["comm_two_slowdown"] = c.two_slowdown;
  }
  j["comm_serial_receive"] = c.serial_receive;
  j["comm_offer_payload"] = c.offer_payload;
  // What was measured has no modelled noise or slow mode: a preset's network model must not
  // stay on top of it when the file is laid over that preset.
  j["comm_sigma"] = 0;
  j["comm_slow_prob"] = 0;
  nlohmann::json m;
  m["transport"] = c.transport;
  m["endpoints"] = c.endpoints;
  m["size_cost"] = c.size_cost == SizeCost::Fitted ? "fitted"
                   : c.size_cost == SizeCost::Free ? "free"
                                                   : "unresolved: " + c.size_note;
  m["overlap_slowdown"] = c.overlap_slowdown;  // at least 1: the points have what was measured
  m["fit_with_two_pairs"] = c.fitted_with_two_pairs;
  if (c.four_slowdown > 0) m["four_slowdown"] = c.four_slowdown;  // likewise at least 1
  m["points"] = nlohmann::json::array();
  // What needs a second pair (4 endpoints) is null without one, as the table's "-": a 0 read
  // as a measured 0 us.
  const bool overlap = c.endpoints >= 4;
  const auto measured = [overlap](double us) {
    return overlap ? nlohmann::json(us) : nlohmann::json(nullptr);
  };
  for (const CalibrationPoint& p : c.points) {
    nlohmann::json pj{{"bytes", p.bytes},
                      {"alone_us", p.alone_us},
                      {"overlap_us", measured(p.overlap_us)},
                      {"alone_spread_us", p.alone_spread_us},
                      {"overlap_spread_us", measured(p.overlap_spread_us)},
                      {"reps", p.reps}};
    if (c.streams) {
      pj["stream_us"] = p.stream_us;
      pj["stream_two_us"] = measured(p.stream_two_us);
      pj["stream_four_us"] = measured(p.stream_four_us);
      pj["stream_wake_us"] = p.stream_wake_us;
      pj["stream_four_wake_us"] = measured(p.stream_four_wake_us);
    }
    m["points"].push_back(pj);
  }
  j["calibration"] = m;
  return j.dump(2) + "\n";
}

std::string format_calibration(const Calibration& c, const std::string& budget_flag) {
  const bool streams = c.streams;
  const bool four = streams && c.endpoints >= 4;
  std::string out = "rrfp calibrate: " + c.transport + ", " + std::to_string(c.endpoints) +
                    " endpoints\n\n      bytes   one-way us     GB/s   overlapped us  slowdown" +
                    (streams ? "  stream us" : "") + (four ? "  2 streams  4 streams" : "") +
                    (streams ? "  wake us" : "") + (four ? "   4 streams' wake" : "") + "\n";
  for (const CalibrationPoint& p : c.points) {
    const double gbps = static_cast<double>(p.bytes) / p.alone_us / 1e3;
    out += fmt("%11.0f", static_cast<double>(p.bytes)) + fmt("  %11.1f", p.alone_us) +
           fmt("  %7.2f", gbps) +
           (p.overlap_us > 0
                ? fmt("  %14.1f", p.overlap_us) + fmt("  %7.2fx", p.overlap_us / p.alone_us)
                : std::string("               -        -")) +
           (streams ? fmt("  %9.1f", p.stream_us) : std::string()) +
           (four ? fmt("  %9.1f", p.stream_two_us) + fmt("  %9.1f", p.stream_four_us)
                 : std::string()) +
           (streams ? fmt("  %7.1f", p.stream_wake_us) : std::string()) +
           (four ? fmt("  %16.1f", p.stream_four_wake_us) : std::string()) + "\n";
  }
  out +=
      std::string("\nfit") + (c.fitted_with_two_pairs ? " (two pairs at once)" : "") +
      ": latency " + fmt("%.1f", c.latency_us) + " us" +
      (c.bandwidth_gbps > 0 ? " + bytes / " + fmt("%.2f", c.bandwidth_gbps) + " GB/s"
       : c.size_cost == SizeCost::Unresolved ? std::string(" (no bandwidth: see below)")
                                             : std::string(", whatever the size")) +
      overlap_words(c) +
      (c.four_slowdown > 1 ? "; four streams at once, " + fmt("%.2fx", c.four_slowdown) + " as long"
                           : std::string()) +
      (c.two_slowdown > 1 ? ", two " + fmt("%.2fx", c.two_slowdown) : std::string()) +
      (c.links > 0
           ? ": links " + fmt("%.2f", c.links) + " (messages' worth of bandwidth shared by all)"
           : std::string()) +
      (c.serial_receive ? "; each process copies its arrivals one at a time" : "") +
      (c.offer_payload ? "; a blocking run's payload travels with its offer" : "") + "\n";
  if (c.size_cost == SizeCost::Unresolved)
    out += "the sizes span too little to fit a bandwidth (" + c.size_note +
           "): latency only, the file gives no bandwidth or links\n";
  // A ratio that rounds to 1.00x is no news ("took 1.00x as long: faster together").
  if (c.overlap_ratio > 0 && c.overlap_ratio < 0.995)
    out += faster_together("two transfers", c.overlap_ratio) +
           (c.fitted_with_two_pairs ? ", the bandwidth fitted to the times with both pairs"
                                    : std::string()) +
           "\n";
  if (c.four_ratio > 0 && c.four_ratio < 0.995)
    out += faster_together("four streams", c.four_ratio) + "\n";
  // The budget kept on a machine slower than planned: said, as the medians rest on fewer.
  std::string fewer;
  for (const CalibrationPoint& p : c.points)
    if (p.reps > 0 && p.reps < kCalibrationReps)
      fewer += (fewer.empty() ? "" : ", ") + std::to_string(p.bytes) + " bytes " +
               std::to_string(p.reps);
  if (fewer.size() > 200) fewer = fewer.substr(0, fewer.rfind(", ", 200)) + ", ...";
  if (!fewer.empty())
    out += "the time budget ran out before " + std::to_string(kCalibrationReps) +
           " repetitions of every size, the medians rest on fewer (" + fewer + ")" +
           (budget_flag.empty() ? "" : ": a larger " + budget_flag + " gives steadier ones") + "\n";
  return out;
}

}  // namespace rrfp
