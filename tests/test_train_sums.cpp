// The stage's gradient sums (train/stage_program.hpp, ReorderBuffer): microbatch order
// whatever order they arrive in, and sums that own their storage whatever autograd hands over.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include "train/stage_program.hpp"

namespace rrfp::train {
namespace {

TEST(ReorderBuffer, AddsInMicrobatchOrderWhateverTheArrivalOrder) {
  torch::manual_seed(3);
  std::vector<torch::Tensor> g;
  for (int mb = 0; mb < 4; ++mb)
    g.push_back(torch::randn({5}) * 1e6 + torch::randn({5}));  // additions that round
  ReorderBuffer buf(4);
  for (int mb : {2, 0, 3, 1})
    buf.put(mb, {g[mb].clone()});
  ASSERT_TRUE(buf.complete());
  torch::Tensor want = g[0].clone();
  for (int mb = 1; mb < 4; ++mb)
    want.add_(g[mb]);
  EXPECT_TRUE(torch::equal(buf.sum()[0], want));
}

// Two parameters handed one tensor (both terms of a + b), and one handed an expanded tensor
// (a parameter used through sum()): kept as the running sums, the first's additions went into
// the second's sum, and the expanded one failed the next in-place addition.
TEST(ReorderBuffer, SumsOwnTheirStorageWhenAutogradSharesIt) {
  const torch::Tensor shared = torch::ones({3});
  const torch::Tensor expanded = torch::ones({1}).expand({3});
  ReorderBuffer buf(2);
  buf.put(0, {shared, shared, expanded});
  buf.put(1, {torch::full({3}, 2.0), torch::full({3}, 10.0), torch::full({3}, 5.0)});
  ASSERT_TRUE(buf.complete());
  EXPECT_TRUE(torch::equal(buf.sum()[0], torch::full({3}, 3.0)));
  EXPECT_TRUE(torch::equal(buf.sum()[1], torch::full({3}, 11.0)));
  EXPECT_TRUE(torch::equal(buf.sum()[2], torch::full({3}, 6.0)));
}

}  // namespace
}  // namespace rrfp::train
