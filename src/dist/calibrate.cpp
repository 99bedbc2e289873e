#include "dist/calibrate.hpp"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "comm/ping_pong.hpp"
#include "core/error.hpp"
#include "core/format.hpp"

namespace rrfp {

namespace {

// Round trips per measurement: enough bytes to see the bandwidth, within the budget's share.
// At least 4: a round of 2 (what a 1 GB/s guess gave 32 MiB in a 3-second calibration) was
// swayed by one late buffer return, and read 4.5 GB/s at 32 MiB where 8 round trips read 8.3
// and the messages of a step moved at 10 (reference VM, single copy).
int iterations(std::size_t bytes, double seconds_each) {
  const double guess_s = 2e-6 + static_cast<double>(bytes) / 4e9;  // 4 GB/s
  return std::clamp(static_cast<int>(seconds_each / (2 * guess_s)), 4, 2000);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

Calibration calibrate(Transport& t, int endpoints, const std::function<void()>& barrier,
                      const CalibrateOptions& o) {
  if (endpoints < 2)
    throw InputError("calibrate: needs 2 endpoints or more, got " + std::to_string(endpoints));
  if (o.sizes.empty()) throw InputError("`sizes`: give at least one message size");
  const int me = t.rank();
  const bool pair0 = me < 2, pair1 = me >= 2 && me < 4;
  const int peer = me ^ 1;
  // The median of five rounds, not the best: the twin predicts typical steps (rrfp run reports
  // the median one), and at 32 MiB the best of three swung between 1.1 and 2.5 GB/s from one
  // startup calibration to the next on the reference VM while the steps varied by 10%.
  constexpr int kReps = 5;
  const bool overlap = endpoints >= 4;
  // Each size gets an equal share: alone and overlapped, kReps each, plus a warm-up.
  const double each =
      o.seconds / static_cast<double>(o.sizes.size()) / ((overlap ? 2 : 1) * kReps + 1);
  PingPong ping(t);
  Calibration c;
  c.endpoints = endpoints;
  for (std::size_t bytes : o.sizes) {
    const int iters = iterations(bytes, each);
    CalibrationPoint p;
    p.bytes = bytes;
    std::vector<double> alone, overlapped;
    auto round = [&](bool both) {
      const bool active = pair0 || (both && pair1);
      if (active) {
        PingPongOptions pp;
        pp.peer = peer;
        pp.initiator = me % 2 == 0;
        pp.bytes = bytes;
        pp.iters = iters;
        return ping.round(pp, barrier) / 2 * 1e6;
      }
      barrier();  // idle endpoints keep the two barriers of the round
      barrier();
      return 0.0;
    };
    round(false);  // warm-up: buffers, connections
    for (int rep = 0; rep < kReps; ++rep) {
      alone.push_back(round(false));
      if (overlap) overlapped.push_back(round(true));
    }
    p.alone_us = median(alone);
    p.overlap_us = overlap ? median(overlapped) : 0;
    c.points.push_back(p);
  }
  if (me != 0) return c;
  const auto smallest = std::min_element(c.points.begin(), c.points.end(),
                                         [](auto& a, auto& b) { return a.bytes < b.bytes; });
  const auto largest = std::max_element(c.points.begin(), c.points.end(),
                                        [](auto& a, auto& b) { return a.bytes < b.bytes; });
  auto fit = [&](double CalibrationPoint::*col) {
    c.latency_us = (*smallest).*col;
    // Bandwidth: the least-squares slope of (time - latency) over bytes, which the large sizes
    // dominate, as they should. A transport that moves pointers (inproc) shows no slope: above
    // 1 TB/s the fit says size costs nothing (bandwidth 0 in a workload file).
    double num = 0, den = 0;
    for (const CalibrationPoint& p : c.points) {
      const double b = static_cast<double>(p.bytes);
      num += b * (p.*col - c.latency_us);
      den += b * b;
    }
    const double us_per_byte = den > 0 ? num / den : 0;
    const double gbps = us_per_byte > 0 ? 1e-3 / us_per_byte : 0;
    c.bandwidth_gbps = gbps > 0 && gbps < 1000 ? gbps : 0;
  };
  fit(&CalibrationPoint::alone_us);
  if (overlap && largest->alone_us > 0)
    c.overlap_slowdown = largest->overlap_us / largest->alone_us;
  // Two transfers at once near twice as long as one: they share one capacity (the host's cores
  // copying through shared memory), and the simulator should send one message at a time. Near
  // 1x they travel independently. 1.5x splits the two. A transport that moves pointers
  // (inproc: no bandwidth) has no capacity to share; its slowdown is thread wake-ups.
  const bool shared = c.bandwidth_gbps > 0 && c.overlap_slowdown >= 1.5;
  // Otherwise two transfers move at once at the rate each had while the other pair transferred
  // too: in a pipeline step every process is busy, as in that round, while in the round alone
  // two processes wait in a barrier. On the reference VM the two differ (32 MiB: 26 ms alone,
  // 17 ms with the other pair, and 16-19 ms for the median message of a P=4 step): waking
  // waiters preempt the copying threads when processes outnumber cores. A third transfer at
  // once was not measured, so it waits for one of the two links: on 2 cores, modelling every
  // message on its own predicted the async runs of a 32 MiB step 12-34% short.
  if (c.bandwidth_gbps > 0 && overlap) {
    c.links = shared ? 1 : 2;
    if (!shared) fit(&CalibrationPoint::overlap_us);
  }
  return c;
}

std::string calibration_json(const Calibration& c) {
  nlohmann::json j;
  j["comm_latency_us"] = c.latency_us;
  j["comm_bandwidth_gbps"] = c.bandwidth_gbps;
  j["comm_links"] = c.links;
  // What was measured has no modelled noise or slow mode: a preset's network model must not
  // stay on top of it when the file is laid over that preset.
  j["comm_sigma"] = 0;
  j["comm_slow_prob"] = 0;
  nlohmann::json m;
  m["transport"] = c.transport;
  m["endpoints"] = c.endpoints;
  m["overlap_slowdown"] = c.overlap_slowdown;
  m["fit_with_two_pairs"] = c.links == 2;
  m["points"] = nlohmann::json::array();
  for (const CalibrationPoint& p : c.points)
    m["points"].push_back(
        {{"bytes", p.bytes}, {"alone_us", p.alone_us}, {"overlap_us", p.overlap_us}});
  j["calibration"] = m;
  return j.dump(2) + "\n";
}

std::string format_calibration(const Calibration& c) {
  std::string out = "rrfp calibrate: " + c.transport + ", " + std::to_string(c.endpoints) +
                    " endpoints\n\n      bytes   one-way us     GB/s   overlapped us  slowdown\n";
  for (const CalibrationPoint& p : c.points) {
    const double gbps = static_cast<double>(p.bytes) / p.alone_us / 1e3;
    out += fmt("%11.0f", static_cast<double>(p.bytes)) + fmt("  %11.1f", p.alone_us) +
           fmt("  %7.2f", gbps) +
           (p.overlap_us > 0
                ? fmt("  %14.1f", p.overlap_us) + fmt("  %7.2fx", p.overlap_us / p.alone_us)
                : std::string("               -        -")) +
           "\n";
  }
  out += std::string("\nfit") + (c.links == 2 ? " (two pairs at once)" : "") + ": latency " +
         fmt("%.1f", c.latency_us) + " us" +
         (c.bandwidth_gbps > 0 ? " + bytes / " + fmt("%.2f", c.bandwidth_gbps) + " GB/s"
                               : std::string(", whatever the size")) +
         (c.overlap_slowdown != 1
              ? "; two transfers at once take " + fmt("%.2fx", c.overlap_slowdown) + " as long" +
                    (c.links == 1   ? std::string(": one shared link")
                     : c.links == 2 ? std::string(": two links")
                                    : std::string())
              : std::string()) +
         "\n";
  return out;
}

}  // namespace rrfp
