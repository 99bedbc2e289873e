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
  // Lines ended by CR alone read as one line: "bad header field 'stage'".
  EXPECT_NE(expect_hint_error("rrfp-hint 1 pp=2\rstage 0: F0:0 F0:1 B0:0 B0:1\r" +
                              std::string("stage 1: F1:0 B1:0 F1:1 B1:1\r"))
                .find("h.txt: its lines end in CR alone (classic Mac OS line endings)"),
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
