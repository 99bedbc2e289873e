#include "dist/calibrate.hpp"

#include <algorithm>
#include <barrier>
#include <exception>
#include <nlohmann/json.hpp>
#include <thread>

#include "comm/ping_pong.hpp"
#include "core/error.hpp"
#include "core/format.hpp"
#include "runtime/runtime.hpp"

namespace rrfp {

namespace {

// A round trip's time as planned, before anything is measured: 50 us of wake-ups each way (a
// handler handing a message to a thread, on a machine with fewer cores than threads) and
// 4 GB/s.
double guess_s(std::size_t bytes) {
  return 2 * (50e-6 + static_cast<double>(bytes) / 4e9);
}

// Round trips per round: what the round's share of the budget holds, at least 4. A round of 2
// (what a 1 GB/s guess once gave 32 MiB) was swayed by one late buffer return, and read a far
// lower 32 MiB bandwidth than rounds of 8 and a step's own messages (measured: docs/twin.md,
// "Calibrating to a transport").
int iterations(std::size_t bytes, double seconds_each) {
  return std::clamp(static_cast<int>(seconds_each / guess_s(bytes)), 4, 2000);
}

// Above this, three buffers would take more memory than the cache holds anyway.
constexpr std::size_t kColdSourcesUpTo = std::size_t{64} << 20;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

void fit_message_model(Calibration& c) {
  if (c.points.empty()) throw InputError("calibration: no measured sizes to fit");
  c.overlap_slowdown = 1;
  c.links = 0;
  c.two_slowdown = 1;
  const bool overlap = std::all_of(c.points.begin(), c.points.end(),
                                   [](const CalibrationPoint& p) { return p.overlap_us > 0; });
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
  // The simulator shares its links as a fluid (sim/shared_links.hpp): two transfers at once
  // each move at links / 2 of the rate of one alone, so the slowdown measured with both pairs
  // transferring gives the capacity. A number, not a verdict: the slowdown of two 32 MiB
  // copies at once moved across the 1.5x threshold once drawn between one link and two from
  // one calibration to the next, and flipped the prediction with it (measured:
  // docs/design-decisions.md, "Processes (Open MPI)"). A transport that moves pointers
  // (inproc: no bandwidth) has no capacity to share; its slowdown is thread wake-ups.
  c.four_slowdown = 0;
  if (c.bandwidth_gbps > 0 && largest->stream_us > 0 && largest->stream_four_us > 0) {
    // Four streams at once, every process copying, none waiting on a hand-over: what the
    // messages of a step in flight together do. A step's message with one other in flight
    // slowed far less than the two pairs' ping-pong: each of its legs waits for a thread to
    // wake behind the other pair's copy, which a step's messages, sent while the stages
    // compute, mostly do not. Four streams at once got about the two cores' worth of capacity
    // (measured: docs/twin.md, "Calibrating to a transport").
    c.four_slowdown = largest->stream_four_us / largest->stream_us;
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
    // its rate is the one to use.
    if (c.overlap_slowdown < 1) fit(&CalibrationPoint::overlap_us);
  }
}

namespace {

// The median of 15 rounds, not the best: the twin predicts typical steps (rrfp run reports
// the median one). Rounds of one calibration spread widely, and even a median of five moved
// between calibrations a minute apart (measured: docs/twin.md, "Calibrating to a transport").
constexpr int kReps = 15;

// Who pairs with whom: endpoints 0-1 always measure, 2-3 join the overlapped rounds.
struct Pairing {
  int me = 0, peer = 0;
  bool pair0 = false, pair1 = false, overlap = false;
};

// One message size: kReps repetitions of each round the options ask for, their medians.
CalibrationPoint measure_size(PingPong& ping, const Pairing& pr, std::size_t bytes, int iters,
                              bool streams, const std::function<void()>& barrier) {
  CalibrationPoint p;
  p.bytes = bytes;
  std::vector<double> alone, overlapped, streamed, two, four, wake, four_wake;
  auto round = [&](bool both, bool stream = false, bool both_ways = false) {
    const bool active = pr.pair0 || (both && pr.pair1);
    if (active) {
      PingPongOptions pp;
      pp.peer = pr.peer;
      pp.initiator = pr.me % 2 == 0;
      pp.bytes = bytes;
      pp.iters = stream ? 2 * iters : iters;  // as many messages as the round trips' legs
      pp.stream = stream;
      pp.both_ways = both_ways;
      // A ping-pong's reply sends three buffers in turn rather than the one that just
      // arrived, which the copy left in the cache: a step's outputs are not that fresh. For a
      // size that fits in the cache, replies of what arrived read well above or well below a
      // step's messages from one calibration to the next, three buffers close to them; above
      // the cache's size it makes no difference (measured: docs/twin.md, "Calibrating to a
      // transport"). Streams keep one buffer: the links were validated with them (docs/twin.md).
      if (!stream) pp.sources = bytes <= kColdSourcesUpTo ? 3 : 0;
      return ping.round(pp, barrier) / (stream ? 1 : 2) * 1e6;
    }
    barrier();  // idle endpoints keep the two barriers of the round
    barrier();
    return 0.0;
  };
  round(false);  // warm-up: buffers, connections
  for (int rep = 0; rep < kReps; ++rep) {
    alone.push_back(round(false));
    if (pr.overlap) overlapped.push_back(round(true));
    if (!streams) continue;
    streamed.push_back(round(false, true));
    wake.push_back(ping.last_wake_us());
    if (!pr.overlap) continue;
    two.push_back(round(true, true));
    four.push_back(round(true, true, true));
    four_wake.push_back(ping.last_wake_us());
  }
  if (streams) {
    p.stream_us = median(streamed);
    p.stream_two_us = pr.overlap ? median(two) : 0;
    p.stream_four_us = pr.overlap ? median(four) : 0;
    // Each repetition's mean, so a step's rare long wake-ups (a thread waiting for a core
    // behind another process's copy) count; the median over repetitions, so one stalled
    // repetition does not decide it.
    p.stream_wake_us = median(wake);
    p.stream_four_wake_us = pr.overlap ? median(four_wake) : 0;
  }
  p.alone_us = median(alone);
  p.overlap_us = pr.overlap ? median(overlapped) : 0;
  return p;
}

}  // namespace

Calibration calibrate(Transport& t, int endpoints, const std::function<void()>& barrier,
                      const CalibrateOptions& o) {
  if (endpoints < 2)
    throw InputError("calibrate: needs 2 endpoints or more, got " + std::to_string(endpoints));
  if (o.sizes.empty()) throw InputError("`sizes`: give at least one message size");
  Pairing pr;
  pr.me = t.rank();
  pr.pair0 = pr.me < 2;
  pr.pair1 = pr.me >= 2 && pr.me < 4;
  pr.peer = pr.me ^ 1;
  pr.overlap = endpoints >= 4;
  // Per repetition: alone, overlapped, and the streams (alone, two pairs, four); plus a warm-up.
  const int per_rep = (pr.overlap ? 2 : 1) + (o.streams ? (pr.overlap ? 3 : 1) : 0);
  const int rounds = per_rep * kReps + 1;
  // Each size's share of the budget: a fifth split evenly, the rest by its round trips'
  // planned time, so the large sizes, whose bandwidth the fit rests on, get the most rounds.
  double planned = 0;
  for (std::size_t bytes : o.sizes)
    planned += guess_s(bytes);
  auto share = [&](std::size_t bytes) {
    const double n = static_cast<double>(o.sizes.size());
    return o.seconds * (0.2 / n + 0.8 * guess_s(bytes) / planned);
  };
  PingPong ping(t);
  Calibration c;
  c.endpoints = endpoints;
  c.streams = o.streams;
  c.serial_receive = o.serial_receive;
  c.offer_payload = o.offer_payload;
  for (std::size_t bytes : o.sizes)
    c.points.push_back(measure_size(ping, pr, bytes, iterations(bytes, share(bytes) / rounds),
                                    o.streams, barrier));
  if (pr.me != 0) return c;
  fit_message_model(c);
  return c;
}

double calibration_floor_s(const CalibrateOptions& o, int endpoints) {
  const bool overlap = endpoints >= 4;
  const int rounds = ((overlap ? 2 : 1) + (o.streams ? (overlap ? 3 : 1) : 0)) * kReps + 1;
  double s = 0;
  for (std::size_t bytes : o.sizes)
    s += rounds * iterations(bytes, 0) * guess_s(bytes);
  return s;
}

Calibration calibrate_in_process(int endpoints, const CalibrateOptions& o) {
  Hosting h = in_process_hosting(endpoints);
  std::barrier sync(endpoints);
  std::vector<Calibration> results(endpoints);
  std::vector<std::exception_ptr> errors(endpoints);
  std::vector<std::thread> threads;
  for (int e = 0; e < endpoints; ++e)
    threads.emplace_back([&, e] {
      try {
        results[e] = calibrate(
            *h.transports[e], endpoints, [&] { sync.arrive_and_wait(); }, o);
      } catch (...) {
        errors[e] = std::current_exception();
        sync.arrive_and_drop();
      }
    });
  for (auto& t : threads)
    t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  return results[0];
}

std::string calibration_json(const Calibration& c) {
  nlohmann::json j;
  j["comm_latency_us"] = c.latency_us;
  j["comm_bandwidth_gbps"] = c.bandwidth_gbps;
  j["comm_links"] = c.links;
  j["comm_two_slowdown"] = c.two_slowdown;
  j["comm_serial_receive"] = c.serial_receive;
  j["comm_offer_payload"] = c.offer_payload;
  // What was measured has no modelled noise or slow mode: a preset's network model must not
  // stay on top of it when the file is laid over that preset.
  j["comm_sigma"] = 0;
  j["comm_slow_prob"] = 0;
  nlohmann::json m;
  m["transport"] = c.transport;
  m["endpoints"] = c.endpoints;
  m["overlap_slowdown"] = c.overlap_slowdown;
  m["fit_with_two_pairs"] = c.fitted_with_two_pairs();
  if (c.four_slowdown > 0) m["four_slowdown"] = c.four_slowdown;
  m["points"] = nlohmann::json::array();
  for (const CalibrationPoint& p : c.points) {
    nlohmann::json pj{{"bytes", p.bytes}, {"alone_us", p.alone_us}, {"overlap_us", p.overlap_us}};
    if (c.streams) {
      pj["stream_us"] = p.stream_us;
      pj["stream_two_us"] = p.stream_two_us;
      pj["stream_four_us"] = p.stream_four_us;
      pj["stream_wake_us"] = p.stream_wake_us;
      pj["stream_four_wake_us"] = p.stream_four_wake_us;
    }
    m["points"].push_back(pj);
  }
  j["calibration"] = m;
  return j.dump(2) + "\n";
}

std::string format_calibration(const Calibration& c) {
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
      std::string("\nfit") + (c.fitted_with_two_pairs() ? " (two pairs at once)" : "") +
      ": latency " + fmt("%.1f", c.latency_us) + " us" +
      (c.bandwidth_gbps > 0 ? " + bytes / " + fmt("%.2f", c.bandwidth_gbps) + " GB/s"
                            : std::string(", whatever the size")) +
      (c.overlap_slowdown != 1
           ? "; two transfers at once take " + fmt("%.2fx", c.overlap_slowdown) + " as long"
           : std::string()) +
      (c.four_slowdown > 0 ? "; four streams at once, " + fmt("%.2fx", c.four_slowdown) + " as long"
                           : std::string()) +
      (c.two_slowdown > 1 ? ", two " + fmt("%.2fx", c.two_slowdown) : std::string()) +
      (c.links > 0
           ? ": links " + fmt("%.2f", c.links) + " (messages' worth of bandwidth shared by all)"
           : std::string()) +
      (c.serial_receive ? "; each process copies its arrivals one at a time" : "") +
      (c.offer_payload ? "; a blocking run's payload travels with its offer" : "") + "\n";
  return out;
}

}  // namespace rrfp
