// The calibration's fit (dist/calibrate.hpp): measured one-way times to the simulator's message
// model, checked on made-up measurements whose answer is known.
#include "dist/calibrate.hpp"
#include "expect_error.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <string>

#include "core/error.hpp"
#include "sim/workload.hpp"

namespace rrfp {
namespace {

constexpr std::size_t kBig = std::size_t{32} << 20;

// 50 us for 8 bytes; the 32 MiB less those 8 at 5 GB/s on top of it alone; overlapped:
// `slowdown` times that.
Calibration measured(double slowdown) {
  Calibration c;
  const double alone = 50 + static_cast<double>(kBig - 8) / 5e3;
  c.points = {{8, 50, 50}, {kBig, alone, alone * slowdown}};
  return c;
}

TEST(CalibrationFit, LinksAreTwoOverTheSlowdownOfTwoTransfersAtOnce) {
  struct Case {
    double slowdown, links;
  };
  for (const Case k :
       {Case{1.5, 2 / 1.5}, Case{1.25, 1.6}, Case{1.0, 2.0}, Case{2.0, 1.0}, Case{3.0, 1.0}}) {
    Calibration c = measured(k.slowdown);
    fit_message_model(c);
    EXPECT_DOUBLE_EQ(c.latency_us, 50);
    EXPECT_NEAR(c.bandwidth_gbps, 5, 1e-9) << "the times alone";
    EXPECT_DOUBLE_EQ(c.overlap_slowdown, k.slowdown);
    EXPECT_DOUBLE_EQ(c.links, k.links) << "slowdown " << k.slowdown;
    EXPECT_FALSE(c.fitted_with_two_pairs);
  }
}

TEST(CalibrationFit, FasterWithBothPairsFitsTheOverlappedTimesOnTwoLinks) {
  Calibration c = measured(0.8);
  fit_message_model(c);
  EXPECT_DOUBLE_EQ(c.links, 2);
  EXPECT_TRUE(c.fitted_with_two_pairs);
  const double overlapped = 0.8 * (50 + static_cast<double>(kBig - 8) / 5e3);
  EXPECT_NEAR(c.bandwidth_gbps, static_cast<double>(kBig - 8) / (overlapped - 50) / 1e3, 1e-9)
      << "the overlapped column's slope";
  // Fitting twice gives the same model.
  const Calibration once = c;
  fit_message_model(c);
  EXPECT_DOUBLE_EQ(c.bandwidth_gbps, once.bandwidth_gbps);
  EXPECT_DOUBLE_EQ(c.links, once.links);
}

TEST(CalibrationFit, NoSecondPairOrNoSizeCostMeansNoSharedLinks) {
  Calibration pairs = measured(1.5);
  for (CalibrationPoint& p : pairs.points)
    p.overlap_us = 0;
  fit_message_model(pairs);
  EXPECT_EQ(pairs.links, 0);
  EXPECT_EQ(pairs.overlap_slowdown, 1);
  EXPECT_NEAR(pairs.bandwidth_gbps, 5, 1e-9);

  Calibration pointers;  // every size as fast (inproc moves pointers)
  pointers.points = {{8, 20, 30}, {kBig, 20, 30}};
  fit_message_model(pointers);
  EXPECT_EQ(pointers.bandwidth_gbps, 0);
  EXPECT_EQ(pointers.links, 0);
  // Its 1.5x with both pairs is said as measured and left out of the model (the line said "two
  // transfers at once take 1.50x as long", a cost the file does not carry); a 1.5x with links
  // is the model's.
  EXPECT_NE(format_calibration(pointers).find("two transfers at once took 1.50x as long, not "
                                              "modelled (size costs nothing here"),
            std::string::npos)
      << format_calibration(pointers);
  Calibration shared = measured(1.5);
  fit_message_model(shared);
  EXPECT_NE(format_calibration(shared).find("two transfers at once take 1.50x as long"),
            std::string::npos);

  Calibration none;
  EXPECT_ERROR(fit_message_model(none), InputError, "calibration: no measured sizes to fit");
}

// With four streams measured, the links come from them: 4 / their slowdown within [1, 4],
// whatever the ping-pong's two pairs said; the bandwidth is still the ping-pong's alone.
TEST(CalibrationFit, FourStreamsGiveTheLinksWhenMeasured) {
  struct Case {
    double four_slowdown, links;
  };
  for (const Case k : {Case{2.0, 2.0}, Case{2.15, 4 / 2.15}, Case{5.0, 1.0}, Case{0.8, 4.0}}) {
    Calibration c = measured(1.6);
    c.points.back().stream_us = 5000;
    c.points.back().stream_four_us = 5000 * k.four_slowdown;
    fit_message_model(c);
    EXPECT_NEAR(c.bandwidth_gbps, 5, 1e-9);
    EXPECT_DOUBLE_EQ(c.overlap_slowdown, 1.6);
    EXPECT_DOUBLE_EQ(c.four_ratio, k.four_slowdown);
    EXPECT_DOUBLE_EQ(c.four_slowdown, std::max(1.0, k.four_slowdown));
    EXPECT_DOUBLE_EQ(c.links, k.links) << "four streams " << k.four_slowdown;
    EXPECT_TRUE(c.links_from_streams());
    EXPECT_NE(format_calibration(c).find("four streams at once"), std::string::npos);
    // The two pairs' 1.6x is what they took, not the model's (it read "take 1.60x", where the
    // streams' links model two at once as 2 / links).
    EXPECT_NE(format_calibration(c).find("two ping-pong pairs at once took 1.60x as long (the "
                                         "model takes the streams' sharing, next)"),
              std::string::npos)
        << format_calibration(c);
  }
  Calibration two = measured(1.6);  // no streams: the two pairs' rule
  fit_message_model(two);
  EXPECT_DOUBLE_EQ(two.links, 2 / 1.6);
  EXPECT_FALSE(two.links_from_streams());
}

// The two streams' slowdown over one alone, within [1, four streams' slowdown]; 1 when two
// streams were not measured. A calibration file carries it to the simulator.
TEST(CalibrationFit, TwoStreamsGiveTheTwoSlowdownUpToTheFours) {
  struct Case {
    double two, four, two_slowdown;
  };
  for (const Case k : {Case{1.4, 2.0, 1.4}, Case{0.9, 2.0, 1.0}, Case{2.5, 2.0, 2.0},
                       Case{1.2, 0.8, 1.0}, Case{0, 2.0, 1.0}}) {
    Calibration c = measured(1.6);
    c.points.back().stream_us = 5000;
    c.points.back().stream_two_us = 5000 * k.two;
    c.points.back().stream_four_us = 5000 * k.four;
    fit_message_model(c);
    EXPECT_DOUBLE_EQ(c.two_slowdown, k.two_slowdown) << "two " << k.two << " four " << k.four;
    EXPECT_DOUBLE_EQ(
        apply_workload_json(WorkloadParams{}, calibration_json(c), "calibration").comm_two_slowdown,
        c.two_slowdown);
    EXPECT_EQ(format_calibration(c).find(", two ") != std::string::npos, k.two_slowdown > 1);
  }
  Calibration pairs = measured(1.6);  // no streams
  pairs.two_slowdown = 3;             // a fit starts afresh
  fit_message_model(pairs);
  EXPECT_EQ(pairs.two_slowdown, 1);
}

// Sizes that cannot show a bandwidth fit none, whatever their medians' differences: what
// `--sizes 8,8` and `--sizes 8,16` fitted as 0.02 and 0.05 GB/s. The file then gives the
// latency alone, so a preset it is laid over keeps its own bandwidth and links.
TEST(CalibrationFit, SizesTooCloseFitNoBandwidthAndWriteLatencyOnly) {
  struct Case {
    std::vector<CalibrationPoint> points;
    std::string why;
  };
  const std::vector<Case> cases = {
      {{{8, 17.3, 17.3, 0.2}, {16, 17.7, 17.7, 0.2}}, "8 B to 16 B: the largest size must be"},
      {{{8, 17.3, 17.3, 0.2}, {8, 18.3, 18.3, 0.2}}, "8 B to 8 B: the largest size must be"},
      // 1 us over 17.3 across 120 bytes: within the drift floor (a quarter of the latency).
      {{{8, 17.3, 17.3, 0.2}, {128, 18.3, 18.3, 0.2}}, "would show a bandwidth only below"},
      // 64 KiB rising 20 us above a latency of 20 us, but its repetitions spread by 40.
      {{{8, 20, 20, 0.5}, {64 << 10, 40, 40, 40}}, "over the times' noise of 40 us"},
  };
  for (const Case& k : cases) {
    Calibration c;
    c.points = k.points;
    fit_message_model(c);
    SCOPED_TRACE(k.why);
    EXPECT_EQ(c.size_cost, SizeCost::Unresolved);
    EXPECT_EQ(c.bandwidth_gbps, 0);
    EXPECT_EQ(c.links, 0);
    EXPECT_DOUBLE_EQ(c.latency_us, k.points[0].alone_us);
    EXPECT_NE(c.size_note.find(k.why), std::string::npos) << c.size_note;
    EXPECT_NE(format_calibration(c).find("the sizes span too little to fit a bandwidth"),
              std::string::npos);
    const std::string json = calibration_json(c);
    EXPECT_EQ(json.find("comm_bandwidth_gbps"), std::string::npos) << json;
    EXPECT_EQ(json.find("comm_links"), std::string::npos);
    const WorkloadParams w = apply_workload_json(workload_preset("language"), json, "cal");
    EXPECT_EQ(w.comm_bandwidth_gbps, workload_preset("language").comm_bandwidth_gbps);
    EXPECT_DOUBLE_EQ(w.comm_latency_us, c.latency_us);
  }
}

// The slope stands out of the noise: spread repetitions, a scatter about the line, the smallest
// size well above zero. The bandwidth is the rise over the bytes beyond the smallest's.
TEST(CalibrationFit, ABandwidthIsFittedWhereTheSizesShowOne) {
  Calibration c;  // 1 MiB and 8 MiB at 4 GB/s past the smallest (the fit once read 4.6)
  const double mib = 1 << 20;
  c.points = {{1 << 20, 300, 0, 10}, {8 << 20, 300 + 7 * mib / 4e3, 0, 100}};
  fit_message_model(c);
  EXPECT_EQ(c.size_cost, SizeCost::Fitted);
  EXPECT_NEAR(c.bandwidth_gbps, 4, 1e-9);
  EXPECT_NE(calibration_json(c).find("comm_bandwidth_gbps"), std::string::npos);

  // Five sizes whose 8 MiB median is 10 us off a flat line (a drift while it was measured, as
  // inproc once read): the scatter swamps the slope, and 32 MiB over it is size costing nothing.
  Calibration drift;
  drift.points = {{8, 4.1, 0, 0.3},
                  {64 << 10, 4.1, 0, 0.1},
                  {1 << 20, 4.1, 0, 0.2},
                  {8 << 20, 14.8, 0, 0.2},
                  {32 << 20, 4.2, 0, 0.7}};
  fit_message_model(drift);
  EXPECT_EQ(drift.size_cost, SizeCost::Free);
  EXPECT_EQ(drift.bandwidth_gbps, 0);
  EXPECT_NE(format_calibration(drift).find("whatever the size"), std::string::npos);
  EXPECT_NE(calibration_json(drift).find("\"comm_bandwidth_gbps\": 0"), std::string::npos);
}

// Two transfers at once faster than one alone is written as no slowdown, with a line saying so:
// with no bandwidth (thread wake-ups, what inproc read as 0.38x), and with one, whose rate the
// overlapped times then give.
TEST(CalibrationFit, AnOverlapBelowOneIsTakenAsOne) {
  Calibration pointers;
  pointers.points = {{8, 20, 7.6}, {kBig, 20, 7.6}};
  fit_message_model(pointers);
  EXPECT_EQ(pointers.overlap_slowdown, 1);
  EXPECT_DOUBLE_EQ(pointers.overlap_ratio, 0.38);
  const std::string text = format_calibration(pointers);
  EXPECT_NE(text.find("two transfers at once took 0.38x as long as one alone: faster together is "
                      "no cost of sharing"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("take 0.38x"), std::string::npos);
  EXPECT_NE(calibration_json(pointers).find("\"overlap_slowdown\": 1"), std::string::npos);

  Calibration bw = measured(0.8);
  fit_message_model(bw);
  EXPECT_EQ(bw.overlap_slowdown, 1);
  EXPECT_NE(format_calibration(bw).find("the bandwidth fitted to the times with both pairs"),
            std::string::npos);
}

// Four streams at once faster than one stream alone likewise: taken as 1 (it was printed as
// "four streams at once, 0.80x as long" and written so), with a line saying so; the links are
// the four, and two streams' slowdown is 1, as before.
TEST(CalibrationFit, FourStreamsBelowOneAreTakenAsOne) {
  Calibration c = measured(1.6);
  c.streams = true;
  c.endpoints = 4;
  c.points.back().stream_us = 5000;
  c.points.back().stream_two_us = 5000 * 0.9;
  c.points.back().stream_four_us = 5000 * 0.8;
  fit_message_model(c);
  EXPECT_DOUBLE_EQ(c.four_ratio, 0.8);
  EXPECT_EQ(c.four_slowdown, 1);
  EXPECT_EQ(c.links, 4);
  EXPECT_EQ(c.two_slowdown, 1);
  const std::string text = format_calibration(c);
  EXPECT_NE(text.find("four streams at once took 0.80x as long as one alone: faster together is "
                      "no cost of sharing"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("four streams at once, "), std::string::npos) << text;
  const std::string json = calibration_json(c);
  EXPECT_NE(json.find("\"four_slowdown\": 1.0"), std::string::npos) << json;
  EXPECT_NE(json.find("\"stream_four_us\": 4000.0"), std::string::npos) << "what was measured";
  EXPECT_EQ(apply_workload_json(WorkloadParams{}, json, "calibration").comm_links, 4);
}

// A size given twice is refused by the option's name, before anything is measured.
TEST(Calibrate, RefusesASizeGivenTwice) {
  EXPECT_ERROR(check_sizes({8, 1 << 20, 8}), InputError,
               "`sizes`: 8 bytes given twice (each size at most once)");
  EXPECT_ERROR(check_sizes({}), InputError, "`sizes`: give at least one message size");
  CalibrateOptions o;
  o.sizes = {64, 64};
  o.seconds = 0.2;
  EXPECT_ERROR(calibrate_in_process(2, o), InputError,
               "`sizes`: 64 bytes given twice (each size at most once)");
}

// The budget is endpoint 0's clock, said to every endpoint: a size whose share is spent ends
// its repetitions on all of them together (one going on alone would wait for its peer), at
// the least; a budget that holds them all gives every size its full count. A machine slower
// than planned overran --seconds up to 2x.
TEST(Calibrate, ASpentBudgetEndsEverySizesRepetitionsTogether) {
  CalibrateOptions o;
  o.sizes = {8, std::size_t{1} << 20};
  o.seconds = 1e-6;  // spent before the first repetition
  for (int n : {2, 4}) {
    const Calibration c = calibrate_in_process(n, o);
    ASSERT_EQ(c.points.size(), 2u);
    for (const CalibrationPoint& p : c.points)
      EXPECT_EQ(p.reps, kCalibrationLeastReps) << n << " endpoints, " << p.bytes << " bytes";
    EXPECT_NE(format_calibration(c, "--seconds")
                  .find("the medians rest on fewer (8 bytes 3, 1048576 bytes 3): a larger "
                        "--seconds gives steadier ones"),
              std::string::npos)
        << format_calibration(c);
    // A caller whose budget is its own names no flag (`run --compare` has no --seconds).
    EXPECT_EQ(format_calibration(c).find("--seconds"), std::string::npos);
  }
  o.sizes = {8};
  o.seconds = 60;
  const Calibration c = calibrate_in_process(2, o);
  EXPECT_EQ(c.points.at(0).reps, kCalibrationReps);
  EXPECT_EQ(format_calibration(c).find("rest on fewer"), std::string::npos);
}

TEST(Calibrate, StreamsAreTimedOnlyWhenAskedAndFourAtOnceOnlyWithTwoPairs) {
  CalibrateOptions o;
  o.sizes = {8, std::size_t{1} << 20};
  o.seconds = 0.2;
  for (int n : {2, 4})
    for (bool streams : {false, true}) {
      o.streams = streams;
      o.serial_receive = streams;  // passed through, whatever the transport does
      o.offer_payload = !streams;
      const Calibration c = calibrate_in_process(n, o);
      ASSERT_EQ(c.points.size(), 2u);
      EXPECT_EQ(c.streams, streams);
      EXPECT_EQ(c.serial_receive, streams);
      EXPECT_EQ(c.offer_payload, !streams);
      for (const CalibrationPoint& p : c.points) {
        SCOPED_TRACE(std::to_string(n) + " endpoints, streams " + std::to_string(streams) + ", " +
                     std::to_string(p.bytes) + " bytes");
        EXPECT_GT(p.alone_us, 0);
        EXPECT_EQ(p.overlap_us > 0, n == 4);
        EXPECT_EQ(p.stream_us > 0, streams);
        EXPECT_EQ(p.stream_two_us > 0, streams && n == 4);
        EXPECT_EQ(p.stream_four_us > 0, streams && n == 4);
      }
      const std::string json = calibration_json(c);
      EXPECT_EQ(json.find("stream_four_us") != std::string::npos, streams);
      // Without a second pair what it would measure is null, not a measured 0.
      EXPECT_EQ(json.find("\"overlap_us\": null") != std::string::npos, n < 4);
      // The wake-ups are measured with the streams and shown, never fitted.
      EXPECT_EQ(json.find("stream_wake_us") != std::string::npos, streams);
      EXPECT_EQ(format_calibration(c).find("wake us") != std::string::npos, streams);
      const WorkloadParams w = apply_workload_json(WorkloadParams{}, json, "calibration");
      EXPECT_EQ(w.comm_wake_us, 0);
      EXPECT_EQ(w.comm_wake_per_copy_us, 0);
      EXPECT_EQ(w.comm_serial_receive, streams);
      EXPECT_EQ(w.comm_offer_payload, !streams);
      EXPECT_EQ(format_calibration(c).find("payload travels with its offer") != std::string::npos,
                !streams);
      EXPECT_EQ(format_calibration(c).find("4 streams") != std::string::npos, streams && n == 4);
    }
}

}  // namespace
}  // namespace rrfp
