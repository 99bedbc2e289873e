#include <gtest/gtest.h>

#include "core/error.hpp"
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
}

}  // namespace
}  // namespace rrfp::test
