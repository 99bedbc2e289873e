#pragma once
// What a transport really delivers here (rrfp calibrate, docs/twin.md): one-way time by
// message size between endpoints 0 and 1, alone and while endpoints 2 and 3 transfer the same
// sizes at once (processes sharing cores and memory bandwidth), and optionally one-way streams
// of up to four transfers at once, fitted to the simulator's message model: latency + bytes /
// bandwidth, and how much longer a transfer takes with others in flight (the links).
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "comm/transport.hpp"

namespace rrfp {

struct CalibrateOptions {
  std::vector<std::size_t> sizes{8, std::size_t{64} << 10, std::size_t{1} << 20,
                                 std::size_t{8} << 20, std::size_t{32} << 20};
  double seconds = 8;  // the whole measurement's budget, shared by sizes and repetitions
  // Also one-way streams (PingPongOptions::stream): one pair, two pairs, and both pairs both
  // ways (four transfers at once). With four endpoints or more the four give the links
  // (Calibration::links); `rrfp run --compare` measures them at startup (docs/twin.md).
  bool streams = false;
  // The transport's receiving side copies a process's arrivals one at a time (mpi: Open MPI
  // copies a large message inside the one progress thread's call): passed on to the fit as
  // Calibration::serial_receive, not measured.
  bool serial_receive = false;
  // rrfp's runtime sends a blocking run's payload with its offer over this transport (it moves
  // bytes; RuntimeOptions::rendezvous_pull off): passed on as Calibration::offer_payload.
  bool offer_payload = false;
  // How long a round waits for a peer's next message before it fails: over a job, its --timeout
  // (a stopped process held a calibration 60 s whatever that said); 0: no deadline, as
  // --timeout 0 has none.
  double deadline_s = 60;
  // Told by endpoint 0 as each size's measurement begins: its index among `sizes` and its
  // bytes (a calibration of minutes said nothing until it ended).
  std::function<void(std::size_t index, std::size_t bytes)> on_size;
};

struct CalibrationPoint {
  std::size_t bytes = 0;
  double alone_us = 0;    // one way, the median of the repetitions
  double overlap_us = 0;  // the same while another pair transfers (0: no second pair)
  // The repetitions' interquartile range behind each median (0: not known): the noise a
  // bandwidth must stand out of (fit_message_model).
  double alone_spread_us = 0;
  double overlap_spread_us = 0;
  // With CalibrateOptions::streams (else 0): what a message adds to a one-way stream, alone,
  // while the other pair streams too, and with both pairs streaming both ways (0: no second
  // pair).
  double stream_us = 0;
  double stream_two_us = 0;
  double stream_four_us = 0;
  // The receiving thread's wake-up (PingPong::last_wake_us) in the stream alone and in the four
  // streams, the median over the repetitions of each one's mean (0: not measured): how long an
  // idle compute thread takes to take an arrived input over, with one copy under way and with
  // every process copying. Shown, not fitted (WorkloadParams::comm_wake_us stays the user's):
  // the one-stream wake-up swings widely from one calibration to the next, and predictions
  // fitted to it did not come closer (measured: docs/twin.md, "Calibrating to a transport").
  double stream_wake_us = 0;
  double stream_four_wake_us = 0;
  // The repetitions behind the medians: kCalibrationReps, fewer where --seconds ran out first
  // (a slower or busier machine than planned), at least kCalibrationLeastReps.
  int reps = 0;
};

inline constexpr int kCalibrationReps = 15;
inline constexpr int kCalibrationLeastReps = 3;

// What the fit read off the sizes' times.
enum class SizeCost {
  Fitted,      // a bandwidth: the times rise with the bytes clearly above their noise
  Free,        // no rise the sizes could show below 1 TB/s: size costs nothing (inproc)
  Unresolved,  // the sizes span too little to tell a bandwidth from noise: latency only
};

struct Calibration {
  std::string transport;
  int endpoints = 0;
  bool streams = false;  // the points' stream columns were measured
  std::vector<CalibrationPoint> points;
  double latency_us = 0;      // the smallest size's one-way time
  double bandwidth_gbps = 0;  // fitted over the sizes; 0: size_cost says why
  SizeCost size_cost = SizeCost::Free;
  std::string size_note;  // Unresolved: why, in words
  // Overlapped / alone at the largest size (0: not measured), and what the model takes of it:
  // the same, at least 1. Two at once faster than one alone is no cost of sharing, and no
  // speed-up either: the lone pair's threads waking behind the idle pair (see links).
  double overlap_ratio = 0;
  double overlap_slowdown = 1;
  // With four streams measured: a stream's message with both pairs streaming both ways over
  // one alone, at the largest size (0: not measured), and what the model takes of it: the
  // same, at least 1, as overlap_slowdown is (four at once faster than one alone is the lone
  // stream's threads waking, not a speed-up).
  double four_ratio = 0;
  double four_slowdown = 0;
  // WorkloadParams::comm_links, the machine's capacity in messages' worth of bandwidth. From
  // four streams when measured: 4 / four_slowdown within [1, 4] (four copies at once each
  // taking 2.15x as long as one give 1.86). Else from the two pairs' ping-pong:
  // 2 / overlap_slowdown within [1, 2] (1.54x as long give 1.3; twice as long or more, 1: they
  // share one transfer's rate); when two at once were faster than one alone, 2, fitted to the
  // overlapped column (every endpoint busy, as in a pipeline step) rather than the alone one.
  // 0 when no second pair was measured or size costs nothing.
  double links = 0;
  // WorkloadParams::comm_two_slowdown: with four streams measured, a stream's message while the
  // other pair streams too over one alone, at the largest size, within [1, four_slowdown] (1:
  // not measured). Two copies at once in different processes cost more than the links' share
  // says while cores are to spare: caches and memory bandwidth are shared whatever the count.
  double two_slowdown = 1;
  bool serial_receive = false;  // WorkloadParams::comm_serial_receive (CalibrateOptions)
  bool offer_payload = false;   // WorkloadParams::comm_offer_payload (CalibrateOptions)
  bool links_from_streams() const { return links > 0 && four_slowdown > 0; }

  // Whether the bandwidth was fitted to the overlapped column.
  bool fitted_with_two_pairs = false;
};

// How a calibration's endpoints meet: `barrier` lines them all up; `says` does too, and returns
// endpoint 0's argument to each (the others pass false), as a repetition ends.
struct CalibrationMeeting {
  std::function<void()> barrier;
  std::function<bool(bool)> says;
};

// Runs on every endpoint of a world of `endpoints` (2 or more; overlap needs 4): `t` is this
// caller's endpoint. Endpoint 0's clock says when a size's share of `seconds` is spent, and
// every endpoint ends that size's repetitions together (`meet.says`; kCalibrationLeastReps at
// least), where a slower machine than planned overran the budget up to 2x. Only endpoint 0's
// result is filled.
Calibration calibrate(Transport& t, int endpoints, const CalibrationMeeting& meet,
                      const CalibrateOptions& o);

class Job;
// The meeting of a job's processes, each an endpoint: its barrier, and a gather of rank 0's word.
CalibrationMeeting job_meeting(Job& job);

// calibrate() with `endpoints` in-process endpoints, one thread each (inproc); endpoint 0's
// result. The first endpoint's error is rethrown after every thread has ended.
Calibration calibrate_in_process(int endpoints, const CalibrateOptions& o);
// The least a calibration of `o.sizes` over `endpoints` takes as planned (every repetition of
// every round at its fewest round trips, at the planned 4 GB/s where the transport copies the
// bytes, 20 GB/s where it does not): a `seconds` below it cannot be kept. In process the
// payloads pass by reference: at 4 GB/s the default sizes' floor was 3 s, for a calibration
// that took 0.4 s.
double calibration_floor_s(const CalibrateOptions& o, int endpoints, bool copied = true);
// Throws InputError naming `sizes` for no size or one given twice; calibrate() calls it.
void check_sizes(const std::vector<std::size_t>& sizes);

// Fills latency, bandwidth (or why none), overlap_slowdown, links and two_slowdown from
// `c.points` (overlapped times of 0: no second pair). A bandwidth is fitted only where the
// sizes show one: the largest at least 8 times the smallest, and the fitted transfer time of
// the bytes between them above the times' noise (their spreads, the scatter about the fitted
// line, and a quarter of the latency). calibrate() calls it on endpoint 0; exposed for tests.
void fit_message_model(Calibration& c);

// The fit as a workload file's overrides (comm_latency_us, comm_bandwidth_gbps,
// comm_links, comm_two_slowdown, comm_serial_receive; no message noise or slow mode; of a
// SizeCost::Unresolved fit the latency alone, no bandwidth or links), with the
// measured table alongside as "calibration" (workload files ignore no field: see
// sim/workload_io.cpp, which skips that one key).
std::string calibration_json(const Calibration& c);
// A table for people.
// `budget_flag`: the flag that sets the budget, named where the budget ran out ("" for a
// caller whose budget is its own, as `run --compare`'s).
std::string format_calibration(const Calibration& c, const std::string& budget_flag = "");

}  // namespace rrfp
