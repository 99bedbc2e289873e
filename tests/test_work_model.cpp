#include <gtest/gtest.h>

#include <fstream>

#include "core/error.hpp"
#include "core/hint_io.hpp"
#include "core/printable.hpp"
#include "expect_error.hpp"
#include "sim_helpers.hpp"

namespace rrfp::test {
namespace {

TEST(WorkModel, PlacesChunksLoopAndVShape) {
  WorkModel loop(config(4, 2, 2));
  EXPECT_EQ(loop.stage_of(5), 1);
  EXPECT_EQ(loop.local_chunk(5), 1);
  WorkModel v(config(4, 2, 2, false, Placement::VShape));
  EXPECT_EQ(v.stage_of(3), 3);
  EXPECT_EQ(v.stage_of(4), 3);  // 2P-1-c
  EXPECT_EQ(v.stage_of(7), 0);
  EXPECT_EQ(v.chunks_of(0), (std::vector<int>{0, 7}));
}

TEST(WorkModel, DependenciesFollowDesign) {
  WorkModel m(config(2, 3, 2, true, Placement::VShape));  // chunks 0 1 | 2 3 on stages 0 1 1 0
  Deps d{};
  EXPECT_EQ(m.deps({Kind::F, 0, 1}, d), 0);
  ASSERT_EQ(m.deps({Kind::F, 2, 1}, d), 1);
  EXPECT_EQ(d[0].task, (TaskId{Kind::F, 1, 1}));
  EXPECT_FALSE(d[0].cross_stage);            // V-shape turn: chunks 1 and 2 share stage 1
  ASSERT_EQ(m.deps({Kind::B, 3, 0}, d), 1);  // last chunk: only its own F
  ASSERT_EQ(m.deps({Kind::B, 0, 0}, d), 2);
  EXPECT_EQ(d[1].task, (TaskId{Kind::B, 1, 0}));
  EXPECT_TRUE(d[1].cross_stage);
  ASSERT_EQ(m.deps({Kind::W, 2, 2}, d), 1);
  EXPECT_EQ(d[0].task, (TaskId{Kind::B, 2, 2}));
  for (int i = 0; i < m.num_tasks(); ++i)
    EXPECT_EQ(m.index(m.task(i)), i);
}

TEST(WorkModel, RejectsBadShapesByFlag) {
  auto msg = [](PipelineConfig c) {
    try {
      WorkModel m(c);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(msg(config(0, 4)).find("`pp`: must be at least 1"), std::string::npos);
  EXPECT_NE(msg(config(2, 0)).find("`microbatches`"), std::string::npos);
  EXPECT_NE(
      msg(config(2, 4, 3, false, Placement::VShape)).find("`placement` vshape: needs `vpp` 2"),
      std::string::npos);
  // 2^22 x 2^21 x 2^21 is 2^64: in 64-bit integers it wrapped to 0, passed the cap and divided
  // by zero building the model (SIGFPE). Each product past the cap is refused with its value.
  EXPECT_EQ(msg(config(1 << 22, 1 << 21, 1 << 21)),
            "`pp` x `vpp` x `microbatches`: must be at most 50 million chunk-microbatches, got "
            "4194304 x 2097152 x 2097152 = 1.844674407370955e+19");
  EXPECT_NE(msg(config(2147483647, 2147483647, 2147483647)).find("= 9.903520300447984e+27"),
            std::string::npos);
  EXPECT_NE(msg(config(4, 1, 50000000)).find("= 200000000"), std::string::npos);
}

TEST(Hints, NonInterleavedHintsRefuseVpp2) {
  WorkModel m(config(4, 8, 2));
  for (const char* h : {"gpipe", "1f1b"}) {
    try {
      make_hint(h, m);
      ADD_FAILURE() << h;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("needs `vpp` 1"), std::string::npos);
    }
  }
  EXPECT_ERROR(make_hint("warp-speed", m), InputError, "`hint`: unknown hint 'warp-speed'");
  EXPECT_ERROR(make_hint("zb-h1", WorkModel(config(4, 8))), InputError,
               "`hint` zb-h1: needs `split_backward` on");  // needs split
}

TEST(Hints, DefaultLimitIsTheFixedOrderPeak) {
  WorkModel m(config(4, 16));
  EXPECT_EQ(default_limit(make_hint("1f1b", m), m), 4);
  EXPECT_EQ(default_limit(make_hint("gpipe", m), m), 16);
  EXPECT_EQ(default_limit(make_hint("bf", m), m), 4);
  WorkModel small(config(4, 2));
  EXPECT_EQ(default_limit(make_hint("bf", small), small), 2);
  // V = 2: interleaved 1F1B's warm-up + 1 for the loop placement; the V-shaped placement's
  // fixed baseline is ZB-V, whose peak the rule hints take (interleaved 1F1B's, 23 at P=8, let
  // a V-shaped BFW hold 44% more than ZB-V did).
  WorkModel loop(config(8, 32, 2, true));
  EXPECT_EQ(default_limit(make_hint("bfw", loop), loop), 23);
  for (int p = 2; p <= 8; ++p)
    for (int mbs = 1; mbs <= 32; ++mbs) {
      WorkModel v(config(p, mbs, 2, true, Placement::VShape));
      const int zb_v = default_limit(make_hint("zb-v", v), v);
      EXPECT_EQ(zb_v, std::min(2 * p, 2 * mbs)) << "P=" << p << " M=" << mbs;
      for (const char* rule : {"bf", "bfw", "adaptive"})
        EXPECT_EQ(default_limit(make_hint(rule, v), v), zb_v) << rule << " P=" << p << " M=" << mbs;
    }
}

// The generated lists are the orders the field runs under those names, task for task: ZB-H1
// and ZB-V as torch.distributed.pipelining lays them out (ScheduleInterleavedZeroBubble at
// V = 1, ScheduleZBVZeroBubble), interleaved 1F1B at M = P as Megatron-LM and torch do since
// late 2024 (stages s >= P/2 alternate). Until 2026-12-02 ZB-H1 and ZB-V deferred nearly
// every W to the end of the step, and interleaved 1F1B warmed up with every forward at M = P.
TEST(Hints, GeneratedOrdersAreTheReferenceOnes) {
  auto same = [](const char* name, const PipelineConfig& c, const std::string& text) {
    WorkModel m(c);
    EXPECT_EQ(make_hint(name, m).list().stages, parse_hint(text, m, "reference").stages) << name;
  };
  same("zb-h1", config(4, 8, 1, true),
       "stage 0: F0:0 F0:1 F0:2 F0:3 B0:0 W0:0 F0:4 B0:1 W0:1 F0:5 B0:2 W0:2 F0:6 B0:3 W0:3 "
       "F0:7 B0:4 W0:4 B0:5 W0:5 B0:6 W0:6 B0:7 W0:7\n"
       "stage 1: F1:0 F1:1 F1:2 B1:0 F1:3 B1:1 W1:0 F1:4 B1:2 W1:1 F1:5 B1:3 W1:2 F1:6 B1:4 W1:3 "
       "F1:7 B1:5 W1:4 B1:6 W1:5 B1:7 W1:6 W1:7\n"
       "stage 2: F2:0 F2:1 B2:0 F2:2 B2:1 F2:3 B2:2 W2:0 F2:4 B2:3 W2:1 F2:5 B2:4 W2:2 F2:6 B2:5 "
       "W2:3 F2:7 B2:6 W2:4 B2:7 W2:5 W2:6 W2:7\n"
       "stage 3: F3:0 B3:0 F3:1 B3:1 F3:2 B3:2 F3:3 B3:3 W3:0 F3:4 B3:4 W3:1 F3:5 B3:5 W3:2 F3:6 "
       "B3:6 W3:3 F3:7 B3:7 W3:4 W3:5 W3:6 W3:7\n");
  same("zb-v", config(4, 8, 2, true, Placement::VShape),
       "stage 0: F0:0 F0:1 F0:2 F0:3 F0:4 F0:5 F0:6 F7:0 B7:0 W7:0 F7:1 B7:1 W7:1 F7:2 B7:2 W7:2 "
       "F7:3 B7:3 W7:3 F0:7 B0:0 W0:0 F7:4 B7:4 W7:4 B0:1 W0:1 F7:5 B7:5 W7:5 B0:2 W0:2 F7:6 B7:6 "
       "W7:6 B0:3 W0:3 F7:7 B7:7 W7:7 B0:4 W0:4 B0:5 W0:5 B0:6 W0:6 B0:7 W0:7\n"
       "stage 1: F1:0 F1:1 F1:2 F1:3 F1:4 F6:0 F1:5 F6:1 B6:0 W6:0 F6:2 B6:1 W6:1 F6:3 B6:2 W6:2 "
       "F1:6 B1:0 W1:0 F6:4 B6:3 W6:3 F1:7 B1:1 W1:1 F6:5 B6:4 W6:4 B1:2 W1:2 F6:6 B6:5 W6:5 B1:3 "
       "W1:3 F6:7 B6:6 W6:6 B1:4 B6:7 B1:5 W1:4 B1:6 W1:5 B1:7 W1:6 W6:7 W1:7\n"
       "stage 2: F2:0 F2:1 F2:2 F5:0 F2:3 F5:1 F2:4 F5:2 B5:0 W5:0 F5:3 B5:1 W5:1 F2:5 B2:0 W2:0 "
       "F5:4 B5:2 W5:2 F2:6 B2:1 W2:1 F5:5 B5:3 W5:3 F2:7 B2:2 W2:2 F5:6 B5:4 W5:4 B2:3 W2:3 F5:7 "
       "B5:5 W5:5 B2:4 B5:6 B2:5 B5:7 B2:6 W2:4 B2:7 W2:5 W5:6 W5:7 W2:6 W2:7\n"
       "stage 3: F3:0 F4:0 F3:1 F4:1 F3:2 F4:2 F3:3 F4:3 B4:0 W4:0 F3:4 B3:0 W3:0 F4:4 B4:1 W4:1 "
       "F3:5 B3:1 W3:1 F4:5 B4:2 W4:2 F3:6 B3:2 W3:2 F4:6 B4:3 W4:3 F3:7 B3:3 W3:3 F4:7 B4:4 W4:4 "
       "B3:4 B4:5 B3:5 B4:6 B3:6 B4:7 B3:7 W3:4 W4:5 W4:6 W4:7 W3:5 W3:6 W3:7\n");
  same("interleaved-1f1b", config(4, 4, 2),
       "stage 0: F0:0 F0:1 F0:2 F0:3 F4:0 F4:1 F4:2 F4:3 B4:0 B4:1 B4:2 B4:3 B0:0 B0:1 B0:2 B0:3\n"
       "stage 1: F1:0 F1:1 F1:2 F1:3 F5:0 F5:1 F5:2 F5:3 B5:0 B5:1 B5:2 B5:3 B1:0 B1:1 B1:2 B1:3\n"
       "stage 2: F2:0 F2:1 F2:2 F2:3 F6:0 F6:1 F6:2 B6:0 F6:3 B6:1 B6:2 B6:3 B2:0 B2:1 B2:2 B2:3\n"
       "stage 3: F3:0 F3:1 F3:2 F3:3 F7:0 B7:0 F7:1 B7:1 F7:2 B7:2 F7:3 B7:3 B3:0 B3:1 B3:2 "
       "B3:3\n");
}

// A leading byte order mark is skipped, as the JSON reader and --workload-file skip it: a JSON
// hint with one went to the text parser, and a text hint was refused echoing the mark unseen.
// Echoed bytes are visible: a NUL cut the message at it, control and non-UTF-8 bytes showed
// nothing. A missing stage's line names the run's stages.
TEST(HintFile, AByteOrderMarkIsSkippedAndEchoedBytesAreVisible) {
  WorkModel m(config(2, 2, 1, false));
  const ListHint h = make_hint("1f1b", m).list();
  const std::string bom = "\xEF\xBB\xBF";
  EXPECT_EQ(parse_hint(bom + write_hint_text(h, m), m, "t").stages, h.stages);
  EXPECT_EQ(parse_hint(bom + write_hint_json(h, m), m, "j").stages, h.stages);
  const std::string file = ::testing::TempDir() + "rrfp-bom.json";
  WorkModel s(config(2, 2, 1, true));
  std::ofstream(file) << bom << write_hint_json(make_hint("zb-h1", s).list(), s);
  EXPECT_TRUE(hint_file_declares_split(file));
  EXPECT_EQ(read_hint_file(file, s).stages.size(), 2u);
  const std::string ok1 = "stage 1: F1:0 B1:0 F1:1 B1:1\n";
  EXPECT_ERROR(parse_hint(std::string("stage 0: F0:0 F0:1 B0:0 B0:1") + '\0' + "\n" + ok1, m, "h"),
               HintError, "bad task token 'B0:1\\x00'");
  EXPECT_ERROR(parse_hint("stage 0: F0:0 F0:1 B0:0 B0:1\xff\xfe\n" + ok1, m, "h"), HintError,
               "bad task token 'B0:1\\xff\\xfe'");
  EXPECT_ERROR(parse_hint("\x01stage 0: F0:0\n", m, "h"), HintError, "got '\\x01stage 0: F0:0'");
  // A sign is no digit: "-0" was read as 0, where "+0" was refused.
  for (const char* token : {"F-0:0", "F0:-0", "F+0:0"})
    EXPECT_ERROR(parse_hint(std::string("stage 0: ") + token + " F0:1 B0:0 B0:1\n" + ok1, m, "h"),
                 HintError, std::string("bad task token '") + token + "'");
  // A number past the type's range says so (it read "bad task token").
  EXPECT_ERROR(parse_hint("stage 0: F0:0 F0:1 B0:0 B0:99999999999999\n" + ok1, m, "h"), HintError,
               "h:1: task token 'B0:99999999999999': 99999999999999 is past any run's chunks and "
               "microbatches (at most 2147483647)");
  EXPECT_ERROR(parse_hint("stage 0: F0:0 F0:1 B0:0 B0:1\n", m, "h"), HintError,
               "stage 1 has no line (the run has `pp` 2 stages, 0..1)");
  EXPECT_EQ(printable("caf\xC3\xA9 \xEF\xBB\xBF\t"), "caf\xC3\xA9 \\xef\\xbb\\xbf\\x09");
  // A character that starts within the bytes kept is kept whole, never cut into \xNN.
  EXPECT_EQ(printable("caf\xC3\xA9s", 4), "caf\xC3\xA9...");
  EXPECT_EQ(printable("caf\xC3\xA9s", 3), "caf...");
  EXPECT_EQ(printable("caf\xC3\xA9", 5), "caf\xC3\xA9");  // whole: no mark
  // A message as one line: a newline or an escape in a name escaped, not cut or sent raw.
  EXPECT_EQ(one_line("'a\nb' does not exist \x1b[2J\n\n"), "'a\\x0ab' does not exist \\x1b[2J");
  // Well formed but hiding: a C1 control (CSI), a right-to-left override, an isolate, a line
  // separator, each byte escaped; the characters around them (U+00A0, U+2030) kept.
  EXPECT_EQ(printable("a\xC2\x9B"
                      "2Jb\xC2\xA0",
                      99),
            "a\\xc2\\x9b2Jb\xC2\xA0");
  EXPECT_EQ(printable("x\xE2\x80\xAEgpj.exe\xE2\x81\xA6\xE2\x80\xA8\xE2\x80\xB0", 99),
            "x\\xe2\\x80\\xaegpj.exe\\xe2\\x81\\xa6\\xe2\\x80\\xa8\xE2\x80\xB0");
  // Invisible: a zero-width space, a soft hyphen, a tag character.
  EXPECT_EQ(printable("a\xE2\x80\x8B"
                      "b\xC2\xAD"
                      "c\xF3\xA0\x80\x81",
                      99),
            "a\\xe2\\x80\\x8bb\\xc2\\xadc\\xf3\\xa0\\x80\\x81");
}

}  // namespace
}  // namespace rrfp::test
