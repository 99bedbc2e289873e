#include "dist/calibrate.hpp"

#include <algorithm>
#include <atomic>
#include <barrier>
#include <cmath>
#include <exception>

#include "comm/ping_pong.hpp"
#include "core/clock.hpp"
#include "core/error.hpp"
#include "core/threads.hpp"
#include "dist/job.hpp"
#include "runtime/runtime.hpp"

namespace rrfp {

namespace {

// A round trip's time as planned, before anything is measured: 50 us of wake-ups each way (a
// handler handing a message to a thread, on a machine with fewer cores than threads) and
// 4 GB/s, or 20 GB/s in process, where a payload passes by reference and only its making and
// first touch cost (1 GiB round trips here: 9.3 GB/s each way).
double guess_s(std::size_t bytes, bool copied = true) {
  return 2 * (50e-6 + static_cast<double>(bytes) / (copied ? 4e9 : 20e9));
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

// The middle half's width: how far the repetitions of one size spread.
double interquartile(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() * 3 / 4] - v[v.size() / 4];
}

// The median of 15 rounds (kCalibrationReps), not the best: the twin predicts typical steps
// (rrfp run reports the median one). Rounds of one calibration spread widely, and even a median
// of five moved between calibrations a minute apart (measured: docs/twin.md, "Calibrating to a
// transport").
constexpr int kReps = kCalibrationReps;

// Who pairs with whom: endpoints 0-1 always measure, 2-3 join the overlapped rounds.
struct Pairing {
  int me = 0, peer = 0;
  bool pair0 = false, pair1 = false, overlap = false;
};

// One message size: kReps repetitions of each round the options ask for, their medians; fewer
// where endpoint 0 finds its share of the budget spent at `until_ns` (its clock), said to all
// as a repetition ends.
CalibrationPoint measure_size(PingPong& ping, const Pairing& pr, std::size_t bytes, int iters,
                              const CalibrateOptions& o, const CalibrationMeeting& meet,
                              std::int64_t until_ns) {
  const std::function<void()>& barrier = meet.barrier;
  const bool streams = o.streams;
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
      pp.deadline_s = o.deadline_s > 0 ? o.deadline_s : 1e9;  // 0: none (31 years)
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
    if (rep >= kCalibrationLeastReps && meet.says(pr.me == 0 && now_ns() > until_ns)) break;
    ++p.reps;
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
  p.alone_spread_us = interquartile(alone);
  p.overlap_us = pr.overlap ? median(overlapped) : 0;
  p.overlap_spread_us = pr.overlap ? interquartile(overlapped) : 0;
  return p;
}

}  // namespace

Calibration calibrate(Transport& t, int endpoints, const CalibrationMeeting& meet,
                      const CalibrateOptions& o) {
  const std::int64_t start_ns = now_ns();
  if (endpoints < 2)
    throw InputError("calibrate: needs 2 endpoints or more, got " + std::to_string(endpoints));
  check_sizes(o.sizes);
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
  double spent = 0;  // the shares of the sizes so far, in seconds
  for (std::size_t i = 0; i < o.sizes.size(); ++i) {
    const std::size_t bytes = o.sizes[i];
    if (pr.me == 0 && o.on_size) o.on_size(i, bytes);
    spent += share(bytes);
    c.points.push_back(measure_size(ping, pr, bytes, iterations(bytes, share(bytes) / rounds), o,
                                    meet, start_ns + static_cast<std::int64_t>(spent * 1e9)));
  }
  if (pr.me != 0) return c;
  fit_message_model(c);
  return c;
}

CalibrationMeeting job_meeting(Job& job) {
  return {[&job] { job.all_gather({}); },
          [&job](bool flag) {
            const double mine = flag ? 1 : 0;
            return job.all_gather(std::span(&mine, 1)).at(0).at(0) > 0;
          }};
}

void check_sizes(const std::vector<std::size_t>& sizes) {
  if (sizes.empty()) throw InputError("`sizes`: give at least one message size");
  // A size given twice is measured twice, and its two medians' difference was fitted as a
  // bandwidth (8 and 8 bytes read 0.02 GB/s).
  std::vector<std::size_t> sorted = sizes;
  std::sort(sorted.begin(), sorted.end());
  if (const auto d = std::adjacent_find(sorted.begin(), sorted.end()); d != sorted.end())
    throw InputError("`sizes`: " + std::to_string(*d) +
                     " bytes given twice (each size at most once)");
}

double calibration_floor_s(const CalibrateOptions& o, int endpoints, bool copied) {
  const bool overlap = endpoints >= 4;
  const int rounds = ((overlap ? 2 : 1) + (o.streams ? (overlap ? 3 : 1) : 0)) * kReps + 1;
  double s = 0;
  for (std::size_t bytes : o.sizes)
    s += rounds * iterations(bytes, 0) * guess_s(bytes, copied);
  return s;
}

// Each endpoint a thread, started together once all could be made (core/threads.hpp). An
// endpoint that fails drops out of the barrier and the others stop at their next one: they went
// on, each round waiting out its deadline for the missing peer. The first failure is the one
// reported.
Calibration calibrate_in_process(int endpoints, const CalibrateOptions& o) {
  Hosting h = in_process_hosting(endpoints);
  std::barrier sync(endpoints);
  std::vector<Calibration> results(endpoints);
  std::vector<std::exception_ptr> errors(endpoints);
  std::atomic<int> first_failed{-1};
  std::atomic<bool> said{false};  // endpoint 0's argument to the barrier being passed
  auto line_up = [&] {
    sync.arrive_and_wait();
    if (first_failed.load() >= 0) throw Error("calibrate: another endpoint failed");
  };
  // Endpoint 0's word, written by it alone and read by every endpoint between two barriers: it
  // cannot write the next before all have read this one.
  auto meeting_of = [&](int e) {
    return CalibrationMeeting{line_up, [&, e](bool flag) {
                                if (e == 0) said.store(flag);
                                line_up();
                                const bool out = said.load();
                                line_up();
                                return out;
                              }};
  };
  run_together(
      endpoints,
      [&](int e) {
        try {
          results[e] = calibrate(*h.transports[e], endpoints, meeting_of(e), o);
        } catch (...) {
          errors[e] = std::current_exception();
          int none = -1;
          first_failed.compare_exchange_strong(none, e);
          sync.arrive_and_drop();
        }
      },
      [&](int e) {
        return "the calibration's thread of endpoint " + std::to_string(e + 1) + " of " +
               std::to_string(endpoints);
      });
  if (const int f = first_failed.load(); f >= 0) std::rethrow_exception(errors[f]);
  return results[0];
}

}  // namespace rrfp
