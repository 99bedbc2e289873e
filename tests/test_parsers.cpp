// Bad input never crashes: every parser either succeeds or throws a typed rrfp::InputError
// with a message naming what is wrong. Includes a mutation fuzzer over thousands of inputs.
#include <gtest/gtest.h>

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <fstream>

#include "core/error.hpp"
#include "core/hint_io.hpp"
#include "core/input_file.hpp"
#include "core/json_input.hpp"
#include "expect_error.hpp"
#include "mutate.hpp"
#include "sim/replay.hpp"
#include "sim/rng.hpp"
#include "sim_helpers.hpp"

namespace rrfp::test {
namespace {

WorkModel small() {
  return WorkModel(config(2, 2));
}

std::string expect_hint_error(const std::string& text) {
  WorkModel m = small();
  try {
    parse_hint(text, m, "h.txt");
  } catch (const HintError& e) {
    return e.what();
  }
  ADD_FAILURE() << "accepted: " << text;
  return "";
}

TEST(HintFile, RoundTripsTextAndJson) {
  for (const char* name : {"1f1b", "gpipe", "zb-h1"}) {
    WorkModel m(config(4, 8, 1, hint_wants_split(name)));
    ListHint h = make_hint(name, m).list();
    EXPECT_EQ(parse_hint(write_hint_text(h, m), m, "t").stages, h.stages) << name;
    EXPECT_EQ(parse_hint(write_hint_json(h, m), m, "j").stages, h.stages) << name;
  }
}

// The JSON hint is written as text, not through a JSON tree: byte for byte the document the
// tree's dump(1) gives, which earlier plans and their checks hold (empty rows and a V-shape too).
TEST(HintFile, JsonIsWrittenAsTheTreeWroteIt) {
  PipelineConfig vshape = config(2, 3, 2, true);
  vshape.placement = Placement::VShape;
  for (const PipelineConfig& c : {config(4, 8, 1, false), config(3, 5, 1, true), vshape}) {
    const WorkModel m(c);
    ListHint h = make_hint(c.vpp > 1 ? "zb-v" : "gpipe", m).list();
    const std::string text = write_hint_json(h, m);
    EXPECT_EQ(text, nlohmann::json::parse(text).dump(1) + "\n");
    h.stages.back().clear();
    const std::string cut = write_hint_json(h, m);
    EXPECT_EQ(cut, nlohmann::json::parse(cut).dump(1) + "\n");
    EXPECT_NE(cut.find("[]"), std::string::npos);
  }
  EXPECT_EQ(write_hint_json(ListHint{}, WorkModel(config(2, 2, 1, false))),
            "{\n \"format\": \"rrfp-hint\",\n \"microbatches\": 2,\n \"placement\": \"loop\",\n"
            " \"pp\": 2,\n \"split_backward\": false,\n \"stages\": [],\n \"version\": 1,\n"
            " \"vpp\": 1\n}\n");
}

TEST(HintFile, RejectsWithNamedErrors) {
  // stage 0 = chunk 0, stage 1 = chunk 1; M = 2.
  const std::string ok1 = "stage 1: F1:0 B1:0 F1:1 B1:1\n";
  EXPECT_NE(
      expect_hint_error("stage 0: F0:0 F0:1 B0:0\n" + ok1).find("stage 0: task B c0 m1 is missing"),
      std::string::npos);
  EXPECT_NE(expect_hint_error("stage 0: F0:0 F0:0 F0:1 B0:0 B0:1\n" + ok1).find("listed twice"),
            std::string::npos);
  // At the stage's line (its task's error named the stage alone).
  EXPECT_NE(expect_hint_error("\nstage 0: F0:0 F0:1 B0:0 B0:1\nstage 1: F1:0 B1:0 F1:1\n")
                .find("h.txt:3: stage 1: task B c1 m1 is missing"),
            std::string::npos);
  EXPECT_NE(
      expect_hint_error("stage 0: F0:0 F1:1 F0:1 B0:0 B0:1\n" + ok1).find("belongs to stage 1"),
      std::string::npos);
  EXPECT_NE(expect_hint_error("stage 0: B0:0 F0:0 F0:1 B0:1\n" + ok1).find("comes before F c0 m0"),
            std::string::npos);
  EXPECT_NE(expect_hint_error("stage 0: F0:0 F0:1 B0:0 B0:1\n").find("stage 1 has no line"),
            std::string::npos);
  // A line without its colon found its first task's: "stage '1 F1' out of range 0..1".
  EXPECT_NE(expect_hint_error("stage 0: F0:0 F0:1 B0:0 B0:1\nstage 1 F1:0 B1:0 F1:1 B1:1\n")
                .find("h.txt:2: missing ':' after 'stage 1'"),
            std::string::npos);
  // An empty file, or a header alone, was told "stage 0 has no line".
  EXPECT_NE(expect_hint_error("\n# nothing\n").find("h.txt: holds no hint: no header, no stage"),
            std::string::npos);
  EXPECT_NE(expect_hint_error("rrfp-hint 1 pp=2\n").find("h.txt: has its header but no stage line"),
            std::string::npos);
  // A split backward's W right before its B: named as such (only the cycle check's "can never
  // finish" would remain without it).
  const WorkModel split(config(2, 1, 1, true));
  EXPECT_ERROR(parse_hint("stage 0: F0:0 W0:0 B0:0\nstage 1: F1:0 B1:0 W1:0\n", split, "h.txt"),
               HintError, "stage 0: task W c0 m0 comes before B c0 m0, which it depends on");
  EXPECT_NE(expect_hint_error("stage 0: F0:0 X B0:0\n" + ok1).find("h.txt:1: bad task token 'X'"),
            std::string::npos);
  EXPECT_NE(expect_hint_error("rrfp-hint 1 pp=3\n").find("pp=3 but the run has pp=2"),
            std::string::npos);
  // With ordered forwards, a chunk's forwards out of microbatch order: named on their stage (it
  // was called a cyclic wait).
  PipelineConfig ordered = config(2, 2);
  ordered.ordered_forwards = true;
  EXPECT_ERROR(parse_hint("stage 0: F0:1 F0:0 B0:0 B0:1\n" + ok1, WorkModel(ordered), "h.txt"),
               HintError,
               "stage 0: task F c0 m1 comes before F c0 m0, which it waits for under "
               "`ordered_forwards`");
  // A cross-stage cycle: stage 0 wants m0's gradient before m1's forward, stage 1 the reverse.
  EXPECT_NE(expect_hint_error("stage 0: F0:0 B0:0 F0:1 B0:1\nstage 1: F1:1 B1:1 F1:0 B1:0\n")
                .find("can never finish"),
            std::string::npos);
  EXPECT_NE(expect_hint_error("{\"format\": \"rrfp-hint\", \"version\": 1, \"stages\": [[\"F0:0\"]")
                .find("invalid JSON"),
            std::string::npos);
  EXPECT_NE(expect_hint_error("{\"format\": \"rrfp-hint\", \"version\": 1, \"stages\": [[1], []]}")
                .find("not a string"),
            std::string::npos);
  // Where the count comes from: the run's `pp` (perhaps its default) or the file's "pp".
  EXPECT_NE(expect_hint_error("{\"format\": \"rrfp-hint\", \"version\": 1, \"stages\": [[]]}")
                .find("must be an array of 2 stage orders (the run has `pp` 2 stages; the file "
                      "gives no \"pp\", it lists 1)"),
            std::string::npos);
  EXPECT_NE(
      expect_hint_error("{\"format\": \"rrfp-hint\", \"version\": 1, \"pp\": 2, \"stages\": {}}")
          .find("must be an array of 2 stage orders (its \"pp\")"),
      std::string::npos);
}

// The header: one line, its fields all read before any is compared, "rrfp-hint" as a word; a
// stage line's "stage" followed by a tab as by a space.
TEST(HintFile, HeaderOnceAndItsFieldsWhole) {
  const std::string ok = "stage 0: F0:0 F0:1 B0:0 B0:1\nstage 1: F1:0 B1:0 F1:1 B1:1\n";
  EXPECT_NE(expect_hint_error("rrfp-hint 1 split=1 split=0\n" + ok)
                .find("h.txt:1: header field split is given twice"),
            std::string::npos);
  EXPECT_NE(expect_hint_error("rrfp-hint 1 pp=2\nrrfp-hint 1 microbatches=2\n" + ok)
                .find("h.txt:2: a second header line (the first is line 1)"),
            std::string::npos);
  EXPECT_NE(expect_hint_error("rrfp-hints 1 pp=2\n" + ok).find("expected 'stage N: TASK ...'"),
            std::string::npos);
  EXPECT_NE(expect_hint_error("rrfp-hint 1 pp=2\nstage 0: F0:0 F0:1 B0:0 B0:1\n")
                .find("stage 1 has no line (its header's pp=2: stages 0..1)"),
            std::string::npos);
  EXPECT_NE(expect_hint_error("rrfp-hint 1 pp=2\nstage 7: F0:0\n")
                .find("h.txt:2: stage '7' out of range 0..1 (its header's pp=2)"),
            std::string::npos);
  EXPECT_NE(expect_hint_error("rrfp-hint\n" + ok)
                .find("h.txt:1: the header line lacks its format version (1)"),
            std::string::npos);
  const WorkModel m(config(2, 2, 1, false));
  EXPECT_EQ(parse_hint("rrfp-hint\t1 pp=2\nstage\t0: F0:0 F0:1 B0:0 B0:1\nstage 1: F1:0 B1:0 "
                       "F1:1 B1:1\n",
                       m, "h.txt")
                .stages[0]
                .size(),
            4U);
}

TEST(Workload, RejectsBadFieldsByName) {
  auto err = [](const std::string& text) {
    try {
      apply_workload_json(WorkloadParams{}, text, "w.json");
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(err("{\"forward_us\": -3}").find("forward_us"), std::string::npos);
  EXPECT_NE(err("{\"forward_us\": \"fast\"}").find("must be a number"), std::string::npos);
  EXPECT_NE(err("{\"speed\": 1}").find("\"speed\" is not a workload parameter"), std::string::npos);
  EXPECT_NE(err("{\"forward_us\": 3").find("invalid JSON"), std::string::npos);
  EXPECT_NE(err("{\"preset\": \"nope\"}").find("unknown preset 'nope'"), std::string::npos);
  EXPECT_EQ(err("{\"preset\": \"language\", \"forward_us\": 7}"), "accepted");
  EXPECT_NE(
      err("{\"comm_serial_receive\": 1}").find("\"comm_serial_receive\": must be true or false"),
      std::string::npos);
  EXPECT_EQ(err("{\"comm_serial_receive\": true}"), "accepted");
  EXPECT_TRUE(apply_workload_json(WorkloadParams{}, "{\"comm_serial_receive\": true}", "w.json")
                  .comm_serial_receive);
  EXPECT_ERROR(workload_preset("jitter:J9"), InputError,
               "unknown jitter level 'J9' (expected J0, J1, J2 or J3)");
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

// A JSON hint is bounded as a document, not by line: the one written for a run, saved again on
// one line (as json.dump writes it), reads back. A key given twice and a version other than the
// integer 1 are refused, naming them.
TEST(HintFile, JsonIsBoundedAsADocumentWithUniqueKeysAndVersionOne) {
  WorkModel m(config(8, 2000));
  const ListHint h = make_hint("1f1b", m).list();
  auto one_line = nlohmann::json::parse(write_hint_json(h, m)).dump();
  ASSERT_GT(one_line.size(), static_cast<size_t>(m.tasks_per_stage()) * 24 + (1u << 16));
  const std::string path = ::testing::TempDir() + "rrfp-one-line.json";
  std::ofstream(path) << one_line;
  EXPECT_EQ(make_hint(path, m).list().stages, h.stages);
  // The text format keeps its line bound.
  const std::string text = ::testing::TempDir() + "rrfp-long-line.txt";
  std::ofstream(text) << "stage 0: " << std::string(m.tasks_per_stage() * 24 + (1u << 16), 'F');
  try {
    make_hint(text, m);
    ADD_FAILURE() << "a text hint with an endless line was read";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("line 1 has"), std::string::npos) << e.what();
  }
  WorkModel small(config(2, 2));
  const std::string ok = write_hint_json(make_hint("1f1b", small).list(), small);
  auto refusal = [&](const std::string& doc) -> std::string {
    try {
      parse_hint(doc, small, "h.json");
      return "accepted";
    } catch (const InputError& e) {
      return e.what();
    }
  };
  EXPECT_EQ(refusal(ok), "accepted");
  std::string twice = ok;
  twice.insert(twice.find('{') + 1, "\"pp\": 5, ");
  EXPECT_NE(refusal(twice).find("key \"pp\" appears twice"), std::string::npos) << refusal(twice);
  for (const char* v : {"1.5", "1.0", "\"1\"", "2"}) {
    auto j = nlohmann::json::parse(ok);
    j["version"] = nlohmann::json::parse(v);
    EXPECT_NE(refusal(j.dump()).find("unsupported hint version"), std::string::npos) << v;
  }
  // A misspelt shape key skipped its check: refused, as the text format refuses an unknown field.
  auto typo = nlohmann::json::parse(ok);
  typo["microbatch"] = 16;
  EXPECT_NE(refusal(typo.dump()).find("h.json: unknown key \"microbatch\" (the keys are format"),
            std::string::npos)
      << refusal(typo.dump());
}

// Mutates valid inputs (mutate.hpp) and feeds them to every parser: each must either accept or
// throw InputError, never crash or throw anything else.
TEST(Fuzz, ParsersSurviveThousandsOfMutatedInputs) {
  WorkModel m(config(3, 4, 1, true));
  const std::vector<std::string> seeds_text = {
      write_hint_text(make_hint("zb-h1", m).list(), m),
      write_hint_json(make_hint("1f1b", m).list(), m),
      "{\"preset\": \"multimodal\", \"forward_us\": 100, \"jitter_p\": 0.2}",
      "stage,chunk,microbatch,kind,duration_us,tp_rank,send_us\n0,0,0,F,10,0,1\n1,1,2,B,7.5,0,0\n"};
  FuzzTally tally;
  const int n = fuzz_iterations(4000);
  for (int i = 0; i < n; ++i) {
    const std::string s = mutate(seeds_text[i % seeds_text.size()], 77, i);
    const std::string what = "input " + s.substr(0, 200);
    tally.attempt(what, [&] { parse_hint(s, m, "fuzz"); });
    tally.attempt(what, [&] { apply_workload_json(WorkloadParams{}, s, "fuzz"); });
    tally.attempt(what, [&] { parse_replay_csv(s, m, 2, "fuzz"); });
    tally.attempt(what, [&] { parse_token(s.substr(0, 12)); });
  }
  EXPECT_GT(tally.refused, 2 * n);
  EXPECT_GT(tally.accepted, 0);
}

// Every kind of file that is not a small regular file is refused before a byte is read.
TEST(InputFiles, RefusedByTypeAndSizeBeforeReading) {
  const std::string dir = ::testing::TempDir() + "rrfp-input-files";
  ::mkdir(dir.c_str(), 0700);
  auto refusal = [](const std::string& path, const InputKind& kind) {
    try {
      read_input_file(path, kind);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  const InputKind small{"replay", 64, 8};
  EXPECT_NE(refusal(dir, small).find("is a directory"), std::string::npos);
  EXPECT_NE(refusal(dir + "/none", small).find("does not exist"), std::string::npos);
  EXPECT_NE(refusal("/dev/zero", small).find("is not a regular file"), std::string::npos);
  const std::string fifo = dir + "/fifo";
  ::unlink(fifo.c_str());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);  // opening it must not wait for a writer
  EXPECT_NE(refusal(fifo, small).find("is not a regular file"), std::string::npos);
  // A socket cannot be opened at all (ENXIO): refused by its type all the same. Bound in a
  // short folder of /tmp: a socket's path holds at most 107 bytes, and TempDir() may be longer.
  char short_dir[] = "/tmp/rrfp-sockXXXXXX";
  ASSERT_NE(::mkdtemp(short_dir), nullptr);
  const std::string socket_path = std::string(short_dir) + "/s";
  const int sock = ::socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(sock, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  socket_path.copy(address.sun_path, socket_path.size());
  EXPECT_EQ(::bind(sock, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  EXPECT_NE(refusal(socket_path, small).find("is not a regular file"), std::string::npos)
      << refusal(socket_path, small);
  ::close(sock);
  ::unlink(socket_path.c_str());
  ::rmdir(short_dir);
  const std::string file = dir + "/f.txt";
  std::ofstream(file) << "1234567\n12345678\n";
  EXPECT_EQ(refusal(file, small), "accepted");
  EXPECT_NE(refusal(file, InputKind{"replay", 64, 7}).find("line 2 has 8 bytes; lines may"),
            std::string::npos);
  EXPECT_NE(refusal(file, InputKind{"replay", 16, 8}).find("has 17 bytes; at most 16 bytes"),
            std::string::npos);
}

TEST(InputFiles, DeepJsonIsRefusedAndValuesAreShownBriefly) {
  const std::string deep(100000, '[');
  try {
    parse_json(deep, "w.json");
    FAIL() << "accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("w.json: JSON nested deeper than 64 levels"),
              std::string::npos);
  }
  // Brackets inside strings do not count; 64 levels are fine.
  EXPECT_NO_THROW(parse_json("{\"a\": \"" + deep + "\"}", "w.json"));
  EXPECT_NO_THROW(parse_json(std::string(64, '[') + std::string(64, ']'), "w.json"));
  const auto v = parse_json(R"({"x": [1, 2, 3], "s": ")" + std::string(100, 'y') + "\"}", "w");
  EXPECT_EQ(brief(v), "an object of 2 fields");
  EXPECT_EQ(brief(v["x"]), "an array of 3");
  EXPECT_EQ(brief(v["s"]), "\"" + std::string(40, 'y') + "...\"");
  EXPECT_EQ(brief(v["x"][1]), "2");
}

}  // namespace
}  // namespace rrfp::test
