// What a hint file says of itself, read before the hint is parsed: the split backward it was
// written for (which picks the run's model) and the shape `schedule check` takes, by one scanner
// that reads keys, values and the file's format as the parsers do.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/hint_io.hpp"
#include "core/printable.hpp"
#include "expect_error.hpp"
#include "sim_helpers.hpp"

namespace rrfp::test {
namespace {

// `split_backward` auto follows what a hint file says it was written for, so the file a plan
// wrote (split=1) replays under the fixed policy without --split-backward on.
TEST(HintFile, AutoSplitFollowsTheFilesHeader) {
  WorkModel m(config(2, 4, 1, true));
  const ListHint h = make_hint("zb-h1", m).list();
  const std::string dir = ::testing::TempDir();
  const std::string text = dir + "rrfp-split.txt", json = dir + "rrfp-split.json",
                    plain = dir + "rrfp-plain.txt";
  std::ofstream(text) << write_hint_text(h, m);
  std::ofstream(json) << write_hint_json(h, m);
  WorkModel u(config(2, 4));
  std::ofstream(plain) << write_hint_text(make_hint("1f1b", u).list(), u);
  EXPECT_TRUE(hint_wants_split(text));
  EXPECT_TRUE(hint_wants_split(json));
  EXPECT_FALSE(hint_wants_split(plain));
  EXPECT_FALSE(hint_wants_split(dir + "rrfp-no-such-file.txt"));  // reading it says why
  EXPECT_EQ(make_hint(text, m).list().stages, h.stages);
}

// Whether a hint file declares a split backward, read as the parser reads its header: an
// indented header, or one after a comment line, counts (missed, the run was said to have the
// wrong split).
TEST(HintFile, SplitIsReadFromTheHeaderAsTheParserReadsIt) {
  WorkModel m(config(2, 4, 1, true));
  const std::string text = write_hint_text(make_hint("zb-h1", m).list(), m);
  const std::string path = ::testing::TempDir() + "rrfp-split-hint.txt";
  for (const std::string& prefix : {std::string(), std::string("   "), std::string("# a zb\n  ")}) {
    std::ofstream(path) << prefix << text;
    EXPECT_TRUE(hint_file_declares_split(path)) << "'" << prefix << "'";
  }
  std::ofstream(path) << "# rrfp-hint split=1 (a comment)\n"
                      << write_hint_text(make_hint("1f1b", WorkModel(config(2, 4))).list(),
                                         WorkModel(config(2, 4)));
  EXPECT_FALSE(hint_file_declares_split(path));
}

// ...wherever in the file it is: past 64 KiB of comments, or a JSON "split_backward" after a
// long "stages", was not read, and the hint was refused for a split the user never chose. A
// "split_backward" inside the stages is no key; a FIFO declares nothing, and is not waited on
// (its open hung).
TEST(HintFile, SplitIsReadFromTheWholeFile) {
  WorkModel m(config(2, 4, 1, true));
  const std::string path = ::testing::TempDir() + "rrfp-split-late.txt";
  std::ofstream(path) << std::string(70000, '#') << "\n"
                      << write_hint_text(make_hint("zb-h1", m).list(), m);
  EXPECT_TRUE(hint_file_declares_split(path));
  nlohmann::json j = nlohmann::json::parse(write_hint_json(make_hint("zb-h1", m).list(), m));
  const bool split = j["split_backward"];
  j.erase("split_backward");
  std::string late = j.dump();
  late.insert(late.size() - 1,
              std::string(70000, ' ') + ",\"split_backward\": " + (split ? "true" : "false"));
  std::ofstream(path, std::ios::trunc) << late;
  EXPECT_TRUE(hint_file_declares_split(path));
  std::ofstream(path, std::ios::trunc)
      << R"({"stages": [["split_backward", {"split_backward": true}]], "split_backward": false})";
  EXPECT_FALSE(hint_file_declares_split(path));
  const std::string fifo = ::testing::TempDir() + "rrfp-split-fifo.txt";
  ::unlink(fifo.c_str());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_FALSE(hint_file_declares_split(fifo));
  ::unlink(fifo.c_str());
}

// What a file says of itself, read by the scanner that reads its split: JSON's top-level scalar
// members wherever they are (a "vpp" after the stages counts, a key inside them does not), the
// text header's fields; `schedule check` takes its shape from them.
TEST(HintFile, FieldsAreTheTopLevelScalarsOrTheHeaders) {
  const std::string path = ::testing::TempDir() + "rrfp-fields.json";
  std::ofstream(path) << R"( {"format": "rrfp-hint", "note": "a \"quoted\" }, word",)"
                      << R"( "stages": [["F0:0"], {"pp": 9}], "pp" :2, "split_backward": true,)"
                      << R"( "x": null, "v\u0070p": 2, "placement": "v\u0073hape" }  trailing)";
  HintFields f = hint_file_fields(path);
  EXPECT_TRUE(f.json);
  std::vector<std::string> got;
  for (const HintField& h : f.fields)
    got.push_back(h.key + "=" + h.value + (h.string ? " (string)" : ""));
  // Escapes decoded, as the parser decodes them: read as written, "v\u0070p" was no vpp.
  EXPECT_EQ(got, (std::vector<std::string>{
                     "format=rrfp-hint (string)", "note=a \"quoted\" }, word (string)", "pp=2",
                     "split_backward=true", "x=null", "vpp=2", "placement=vshape (string)"}));
  EXPECT_TRUE(hint_file_declares_split(path));
  std::ofstream(path, std::ios::trunc) << R"({"split_backward": "true"})";  // a string: no
  EXPECT_FALSE(hint_file_declares_split(path));
  std::ofstream(path, std::ios::trunc) << R"({"split_b\u0061ckward": true})";
  EXPECT_TRUE(hint_file_declares_split(path));
  std::string repeated;  // a text header repeats a field: its last value, however many fields
  for (int i = 0; i < 70; ++i)
    repeated += " pp=2";
  std::ofstream(path, std::ios::trunc) << "# a comment\n  rrfp-hint 1 pp=3" << repeated
                                       << " vpp=2 split=1 # c\nstage 0: F0:0 pp=7\n";
  f = hint_file_fields(path);
  EXPECT_FALSE(f.json);
  got.clear();
  for (const HintField& h : f.fields)
    got.push_back(h.key + "=" + h.value);
  EXPECT_EQ(got, (std::vector<std::string>{"pp=2", "vpp=2", "split=1"}));
  EXPECT_TRUE(hint_file_declares_split(path));
  EXPECT_TRUE(hint_file_fields(::testing::TempDir() + "rrfp-no-such-file").fields.empty());
}

// One way of telling a JSON hint from a text one, for the parsers, the line bounds and the field
// scan: a byte order mark and blanks skipped, '{' is JSON. Byte by byte it is undecided until
// the first other byte; a broken mark is text, as its first byte is.
TEST(HintFile, FormatIsToldOneWayByEveryReader) {
  const std::string bom = "\xEF\xBB\xBF";
  const std::vector<std::pair<std::string, HintFormat>> cases{{"{", HintFormat::Json},
                                                              {" \r\n\t{}", HintFormat::Json},
                                                              {bom + "\n {", HintFormat::Json},
                                                              {bom + bom + "{", HintFormat::Text},
                                                              {"\xEF\xBB{", HintFormat::Text},
                                                              {"\n[{}]", HintFormat::Text},
                                                              {"stage 0: F0:0", HintFormat::Text},
                                                              {"  # {\n", HintFormat::Text},
                                                              {bom + "  ", HintFormat::Text},
                                                              {"", HintFormat::Text}};
  for (const auto& [text, want] : cases) {
    EXPECT_EQ(hint_format(text), want) << printable(text);
    HintFormatProbe probe;
    for (const char c : text)
      probe.take(c);
    const bool only_blanks = text.find_first_not_of(bom + " \r\n\t") == std::string::npos &&
                             (text.size() < 3 || text.substr(0, 3) == bom);
    EXPECT_EQ(probe.format(), only_blanks ? HintFormat::Unknown : want) << printable(text);
  }
  // The scan reads a JSON hint behind a mark and blanks as JSON, as the parser does.
  WorkModel m(config(2, 4, 1, true));
  const std::string path = ::testing::TempDir() + "rrfp-format.json";
  std::ofstream(path) << bom << "\n  " << write_hint_json(make_hint("zb-h1", m).list(), m);
  EXPECT_TRUE(hint_file_fields(path).json);
  EXPECT_TRUE(hint_file_declares_split(path));
  EXPECT_NO_THROW(read_hint_file(path, m));
}

// The bound on a hint file comes from the run's tasks, and its refusal says so: a valid hint
// re-indented deeper than rrfp writes it was refused with its size and the cap alone.
TEST(HintFile, TheSizeBoundSaysWhereItComesFrom) {
  WorkModel m(config(2, 4, 1, true));
  const std::string path = ::testing::TempDir() + "rrfp-wide.json";
  std::ofstream(path) << write_hint_json(make_hint("zb-h1", m).list(), m)
                      << std::string(2u << 20, ' ');
  try {
    read_hint_file(path, m);
    FAIL() << "accepted";
  } catch (const InputError& e) {
    const std::string want =
        "(24 bytes for each of the run's " + std::to_string(m.num_tasks()) +
        " tasks, and 1 MiB: a hint of this run, indented as rrfp writes it, fits)";
    EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
  }
}

// A hint of a larger run, past this run's bound, whose header names another shape is refused
// for that (it was told its size alone, its header's microbatches=20000 unsaid); the header
// read for it in either format.
TEST(HintFile, ALargerRunsHintIsRefusedByItsHeader) {
  WorkModel big(config(2, 20000, 1, false)), m(config(2, 8, 1, false));
  for (const char* ext : {"txt", "json"}) {
    const std::string path = ::testing::TempDir() + "rrfp-larger." + ext;
    const ListHint list = make_hint("1f1b", big).list();
    std::ofstream(path) << (std::string(ext) == "json" ? write_hint_json(list, big)
                                                       : write_hint_text(list, big));
    EXPECT_ERROR(read_hint_file(path, m), HintError,
                 "hint was written for microbatches=20000 but the run has microbatches=8");
  }
}

}  // namespace
}  // namespace rrfp::test
