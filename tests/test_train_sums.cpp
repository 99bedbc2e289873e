// The stage's gradient sums (train/stage_program.hpp, ReorderBuffer): microbatch order
// whatever order they arrive in, and sums that own their storage whatever autograd hands over.
// The replicas' sum (dist/replica_sum.hpp), which adds without LibTorch: each dtype's addition
// as torch's CPU kernels add, bit for bit. And every parameter's gradient reaches them. And
// the host memory that holds them between steps (train/run.hpp, keep_freed_host_memory).
#include <gtest/gtest.h>
#include <malloc.h>

#include <torch/torch.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "dist/local_job.hpp"
#include "dist/replica_sum.hpp"
#include "rank_threads.hpp"
#include "train/run.hpp"
#include "train/stage_program.hpp"
#include "train/trainer.hpp"
#include "train_cases.hpp"
#include "train_helpers.hpp"

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

// Every float16 and every bfloat16 value (zeros, subnormals, the largest, infinities, NaNs)
// added to a random partner: the same bits as torch's addition, a NaN for a NaN.
TEST(ReplicaSum, HalfPrecisionAddsAsTorchForEveryValue) {
  torch::manual_seed(5);
  const auto all = torch::arange(0, 65536, torch::kInt32).to(torch::kInt16);
  for (const auto dtype : {torch::kHalf, torch::kBFloat16}) {
    const auto a = all.view(dtype);
    const auto b = all.index({torch::randperm(65536).to(torch::kLong)}).view(dtype);
    const auto want = (a + b).view(torch::kInt16);
    const auto nan = torch::isnan(a + b);
    const auto* pa = static_cast<const std::uint16_t*>(a.view(torch::kInt16).data_ptr());
    const auto* pb = static_cast<const std::uint16_t*>(b.view(torch::kInt16).data_ptr());
    const auto* pw = static_cast<const std::uint16_t*>(want.data_ptr());
    const auto* pn = nan.data_ptr<bool>();
    int wrong = 0;
    for (int i = 0; i < 65536; ++i) {
      const std::uint16_t got =
          dtype == torch::kHalf ? rrfp::add_f16(pa[i], pb[i]) : rrfp::add_bf16(pa[i], pb[i]);
      const bool got_nan = dtype == torch::kHalf ? (got & 0x7c00) == 0x7c00 && (got & 0x3ff)
                                                 : (got & 0x7f80) == 0x7f80 && (got & 0x7f);
      if (pn[i] ? !got_nan : got != pw[i]) {
        if (++wrong <= 5)
          ADD_FAILURE() << dtype << ": " << pa[i] << " + " << pb[i] << " gave " << got << ", torch "
                        << pw[i];
      }
    }
    EXPECT_EQ(wrong, 0) << dtype;
  }
}

// Three replicas (threads as ranks), each with a part of every dtype: every replica ends with
// torch's sum in replica order, r0 + r1 + r2, in each part's dtype.
TEST(ReplicaSum, EveryDtypeInReplicaOrderOnEveryReplica) {
  constexpr int kDp = 3;
  const std::vector<torch::ScalarType> dtypes = {torch::kFloat, torch::kDouble, torch::kHalf,
                                                 torch::kBFloat16};
  const std::vector<rrfp::NumKind> kinds = {rrfp::NumKind::f32, rrfp::NumKind::f64,
                                            rrfp::NumKind::f16, rrfp::NumKind::bf16};
  std::vector<std::vector<torch::Tensor>> parts(kDp);
  torch::manual_seed(6);
  for (int r = 0; r < kDp; ++r)
    for (const auto d : dtypes)  // magnitudes far apart, so that the order of the adds shows
      parts[r].push_back((torch::randn({257}) * std::pow(30.0, r)).to(d));
  std::vector<torch::Tensor> want;
  for (std::size_t i = 0; i < dtypes.size(); ++i) {
    want.push_back(parts[0][i].clone());
    for (int r = 1; r < kDp; ++r)
      want[i] += parts[r][i];
  }
  auto jobs = rrfp::make_local_jobs(kDp);
  rrfp::test::on_every_rank(kDp, [&](int r) {
    jobs[r]->set_layout(rrfp::JobLayout{1, 1, kDp});
    std::vector<rrfp::NumSpan> spans;
    for (std::size_t i = 0; i < dtypes.size(); ++i)
      spans.push_back({kinds[i],
                       {static_cast<std::byte*>(parts[r][i].data_ptr()),
                        static_cast<std::size_t>(parts[r][i].nbytes())}});
    rrfp::dp_sum(*jobs[r], spans);
  });
  for (int r = 0; r < kDp; ++r)
    for (std::size_t i = 0; i < dtypes.size(); ++i)
      EXPECT_TRUE(torch::equal(parts[r][i], want[i])) << "replica " << r << ", " << dtypes[i];
}

// Replicas whose parts differ in kind are refused on every replica, naming what each holds.
TEST(ReplicaSum, ReplicasOfOtherKindsAreRefusedOnEvery) {
  auto jobs = rrfp::make_local_jobs(2);
  std::vector<std::string> errors(2);
  rrfp::test::on_every_rank(2, [&](int r) {
    jobs[r]->set_layout(rrfp::JobLayout{1, 1, 2});
    std::vector<std::byte> bytes(8);
    const rrfp::NumSpan part{r == 0 ? rrfp::NumKind::f32 : rrfp::NumKind::bf16, bytes};
    try {
      rrfp::dp_sum(*jobs[r], std::span<const rrfp::NumSpan>(&part, 1));
    } catch (const rrfp::InputError& e) {
      errors[r] = e.what();
    }
  });
  for (const auto& e : errors)
    EXPECT_NE(e.find("replica 0: 2 float32 values; replica 1: 4 bfloat16 values"),
              std::string::npos)
        << e;
}

// Without weight decay a parameter moves only by its gradient: every one must move in one step.
// The image-text task's patch embedding did not (its input asks for no gradient, so autograd
// skipped its node: a zero gradient, silently), in every schedule alike, which the comparison
// with the single-stage reference (test_train.cpp) cannot see.
TEST(TrainBitwise, EveryParameterGetsAGradient) {
  for (const std::string task : {"text", "image-text"})
    for (const bool split : {false, true}) {
      const Case c{
          split ? "ready bfw" : "ready bf", 2, 1, split ? "bfw" : "bf", Policy::Ready, split};
      TrainOptions o = options(c, 0);
      o.task = task;
      o.opt.weight_decay = 0;
      Trainer t(o);
      std::vector<torch::Tensor> before;
      for (const auto& p : t.parameters())
        before.push_back(p.detach().clone());
      t.step();
      const auto after = t.parameters();
      const auto names = t.parameter_names();
      for (size_t i = 0; i < before.size(); ++i)
        EXPECT_FALSE(bitwise_equal(before[i], after[i]))
            << task << (split ? " split" : "") << ": " << names[i] << " did not move";
    }
}

// A step's tensors, freed, stay in malloc's heap for the next step's: by default glibc mapped
// each one above its threshold afresh and unmapped it when freed, so every step faulted its
// pages in again. Run in a process of its own (a re-executed test binary), whose malloc nothing
// else has set or warmed.
TEST(HostMemory, AFreedStepsTensorsStayForTheNextStep) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  constexpr std::size_t kBytes = 24 << 20;  // below kKeptAllocationBytes
  static_assert(kBytes < kKeptAllocationBytes);
  const auto kept = [](bool keep) {
    ::unsetenv("GLIBC_TUNABLES");
    if (!keep) ::setenv("GLIBC_TUNABLES", "glibc.malloc.tcache_count=7", 1);  // the user's: kept
    keep_freed_host_memory();
    const auto before = mallinfo2();
    static void* volatile p;  // volatile: the compiler may drop a malloc whose block is unused
    p = std::malloc(kBytes);
    std::memset(p, 1, kBytes);
    const bool mapped = mallinfo2().hblkhd >= before.hblkhd + kBytes;
    std::free(p);
    const bool held = mallinfo2().fordblks >= kBytes;
    std::exit((mapped ? 1 : 0) + (held ? 2 : 0));
  };
  EXPECT_EXIT(kept(true), testing::ExitedWithCode(2), "") << "taken from the heap, kept there";
  EXPECT_EXIT(kept(false), testing::ExitedWithCode(1), "")
      << "with GLIBC_TUNABLES naming malloc, glibc's own behaviour: mapped afresh, then unmapped";
}

}  // namespace
}  // namespace rrfp::train
