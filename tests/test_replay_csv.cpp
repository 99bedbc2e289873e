// Measured durations read from a CSV (`rrfp simulate --replay`, sim/replay.hpp): good rows
// become the step's work, bad ones are refused naming the file, line and column, and a split
// backward's recording folds into whole backwards where the run does not split.
#include <gtest/gtest.h>

#include <string>

#include "core/error.hpp"
#include "expect_error.hpp"
#include "sim/replay.hpp"
#include "sim_helpers.hpp"

namespace rrfp::test {
namespace {

WorkModel small() {
  return WorkModel(config(2, 2));
}

TEST(Replay, ReadsMeasuredDurationsAndRejectsBadRows) {
  WorkModel m = small();
  std::string csv = "stage,chunk,microbatch,kind,duration_us,send_us\n";
  for (int c = 0; c < 2; ++c)
    for (int mb = 0; mb < 2; ++mb)
      for (const char* k : {"F", "B"})
        // A message where the output goes to the other stage (chunk 0's F, chunk 1's B).
        csv += std::to_string(c) + "," + std::to_string(c) + "," + std::to_string(mb) + "," + k +
               ",1500," + ((k[0] == 'F') == (c == 0) ? "20" : "0") + "\n";
  RealizedWork w = parse_replay_csv(csv, m, 1, "r.csv");
  EXPECT_EQ(w.message(0, m.index({Kind::F, 0, 1})), 20'000);
  EXPECT_EQ(w.compute(0, m.index({Kind::B, 1, 1})), 1'500'000);
  auto err = [&](const std::string& text) {
    try {
      parse_replay_csv(text, m, 1, "r.csv");
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  // A message from a task whose output no task takes: recorded with a stage the shape lacks.
  std::string lacked = csv;
  lacked.replace(lacked.find("1,1,0,F,1500,0"), 14, "1,1,0,F,1500,20");
  EXPECT_NE(err(lacked).find("r.csv:6: send_us says its output went to another stage, but no "
                             "task of P=2 V=1 takes it"),
            std::string::npos)
      << err(lacked);
  EXPECT_NE(err(csv + "0,0,0,F,-5,0\n").find("r.csv:10: column duration_us: negative value"),
            std::string::npos);
  EXPECT_NE(err(csv + "0,0,0,F,abc,0\n").find("'abc' is not a number"), std::string::npos);
  EXPECT_NE(err(csv + "1,0,0,F,5,0\n").find("runs on stage 0, not 1"), std::string::npos);
  // With the shape to give, which a CSV does not hold (the flags' defaults looked for tasks a
  // smaller run never had, without a word why).
  EXPECT_NE(err("stage,chunk,microbatch,kind,duration_us\n0,0,0,F,5\n")
                .find("(a CSV does not say its run's shape: give the `pp`, `vpp` and "
                      "`microbatches` it was recorded with)"),
            std::string::npos);
  // A TP rank past the run's: recorded with more ranks, and maybe another shape too.
  EXPECT_NE(err("stage,chunk,microbatch,kind,duration_us,tp_rank\n0,0,0,F,5,1\n")
                .find("r.csv:2: tp_rank 1 >= `tp` 1 (a CSV does not say its run's shape: give "
                      "the `tp`, `pp`, `vpp` and `microbatches` it was recorded with)"),
            std::string::npos);
  EXPECT_NE(err("stage,chunk\n").find("lacks column 'microbatch'"), std::string::npos);
  // Hexadecimal, infinities, an unknown or doubled column, a negative or fractional step.
  std::string hex = csv;
  hex.replace(hex.find("1500"), 4, "0x10");
  EXPECT_NE(err(hex).find("'0x10' is not a number"), std::string::npos) << err(hex);
  EXPECT_NE(err(csv + "0,0,0,F,inf,0\n").find("'inf' is not a number"), std::string::npos);
  EXPECT_NE(err("stage,chunk,microbatch,kind,duration_us,bogus\n").find("unknown column 'bogus'"),
            std::string::npos);
  EXPECT_NE(err("stage,chunk,stage,microbatch,kind,duration_us\n").find("'stage' given twice"),
            std::string::npos);
  for (const char* step : {"-1", "1.5", "3abc", "1e3"}) {
    const std::string stepped =
        "step," + csv.substr(0, csv.find('\n') + 1) + step + "," +
        csv.substr(csv.find('\n') + 1, csv.find('\n', csv.find('\n') + 1) - csv.find('\n'));
    EXPECT_NE(err(stepped).find("column step: '" + std::string(step) + "' is not a whole number"),
              std::string::npos)
        << step << ": " << err(stepped);
  }
}

// A replay row for a task already given would silently replace it (0.90 ms became 900.8 ms in a
// hand-edited file): refused, naming the task.
TEST(Replay, ARepeatedRowIsRefused) {
  WorkModel m = small();
  std::string csv = "stage,chunk,microbatch,kind,duration_us\n";
  for (int c = 0; c < 2; ++c)
    for (int mb = 0; mb < 2; ++mb)
      for (const char* k : {"F", "B"})
        csv += std::to_string(c) + "," + std::to_string(c) + "," + std::to_string(mb) + "," + k +
               ",900\n";
  EXPECT_NO_THROW(parse_replay_csv(csv, m, 1, "r.csv"));
  try {
    parse_replay_csv(csv + "1,1,0,B,900800\n", m, 1, "r.csv");
    ADD_FAILURE() << "a repeated row was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("r.csv:10: task B c1 m0 appears twice"), std::string::npos)
        << e.what();
  }
}

// A recording made with the split backward (rrfp train's default, BFW) replays without it: each
// W's duration joins its B, which then does both. Without W rows, a split run says how to replay
// instead of naming the first missing W.
TEST(Replay, SplitRecordingsFoldIntoBWhereTheRunDoesNotSplit) {
  WorkModel split(config(2, 2, 1, true)), whole(config(2, 2, 1, false));
  std::string csv = "stage,chunk,microbatch,kind,duration_us,send_us\n";
  for (int c = 0; c < 2; ++c)
    for (int mb = 0; mb < 2; ++mb) {
      const std::string at =
          std::to_string(c) + "," + std::to_string(c) + "," + std::to_string(mb) + ",";
      csv += at + "F,100," + (c == 0 ? "5" : "0") + "\n" + at + "B,60," + (c == 1 ? "7" : "0") +
             "\n" + at + "W,40,0\n";
    }
  const RealizedWork s = parse_replay_csv(csv, split, 1, "r.csv");
  EXPECT_EQ(s.compute(0, split.index({Kind::B, 1, 0})), 60'000);
  EXPECT_EQ(s.compute(0, split.index({Kind::W, 1, 0})), 40'000);
  const RealizedWork w = parse_replay_csv(csv, whole, 1, "r.csv");
  EXPECT_EQ(w.compute(0, whole.index({Kind::B, 1, 0})), 100'000);
  EXPECT_EQ(w.message(0, whole.index({Kind::B, 1, 0})), 7'000);  // B's own message, not W's
  EXPECT_EQ(w.compute(0, whole.index({Kind::F, 1, 0})), 100'000);
  try {
    parse_replay_csv(csv + "1,1,1,W,40,0\n", whole, 1, "r.csv");
    ADD_FAILURE() << "a repeated W was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("task W c1 m1 appears twice"), std::string::npos);
  }
  // A W missing where the others fold: its B was replayed short of the W's work, without a word.
  std::string cut = csv;
  cut.erase(cut.find("1,1,1,W,40,0\n"), 13);
  EXPECT_ERROR(parse_replay_csv(cut, whole, 1, "r.csv"), InputError,
               "r.csv: no duration for task W c1 m1, where other W tasks have one");
  std::string unsplit = "stage,chunk,microbatch,kind,duration_us\n";
  for (int c = 0; c < 2; ++c)
    for (int mb = 0; mb < 2; ++mb)
      for (const char* k : {"F", "B"})
        unsplit += std::to_string(c) + "," + std::to_string(c) + "," + std::to_string(mb) + "," +
                   k + ",100\n";
  try {
    parse_replay_csv(unsplit, split, 1, "r.csv");
    ADD_FAILURE() << "a split run took a replay without W";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("replay it with `split_backward` off"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace rrfp::test
