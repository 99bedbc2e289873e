// Training on a CUDA device (docs/gpu.md). Skipped, saying why, where LibTorch has no CUDA or
// the machine no GPU (CI, the Debian build); scripts/gpu-check.sh runs them on a GPU.
//  - every schedule gives bitwise the same parameters on the device, in f32 and in bf16
//    autocast, with torch's deterministic algorithms (semantics.md §6);
//  - the device computes what the CPU does (f32, to rounding);
//  - so do the three ways a stage learns of completion (poll, spin, host callback; RRFP_CUDA),
//    and a window of tasks in flight per stage;
//  - a task whose kernel never ends is named by the watchdog within its timeout, however the
//    stage waits for it (RRFP_CUDA).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstring>

#include "core/error.hpp"
#include "runtime/errors.hpp"
#include "runtime/runtime.hpp"
#include "train/device.hpp"
#include "train/trainer.hpp"
#include "train_cases.hpp"
#include "train_helpers.hpp"
#ifdef RRFP_HAVE_GPU
#include "gpu/notify.hpp"
#include "gpu/stall.hpp"
#endif
#ifdef RRFP_HAVE_PARTITIONS
#include "gpu/partition.hpp"
#endif

namespace rrfp::train {
namespace {

#define SKIP_WITHOUT_CUDA()                                                         \
  if (!torch::cuda::is_available())                                                 \
  GTEST_SKIP() << "no CUDA here (this LibTorch has none, or this machine no GPU): " \
                  "scripts/gpu-check.sh runs this on a GPU"

TrainOptions options(const Case& c, const std::string& dtype, std::uint64_t delay_seed,
                     const std::string& device = "cuda") {
  TrainOptions o = small_run(c.pp, 4, 4, 3);
  o.model.d_model = 64;
  o.model.max_seq = 128;
  o.window = {16, 128};
  o.pipe.vpp = c.vpp;
  o.pipe.split_backward = c.split;
  o.hint = c.hint;
  o.runtime.arbiter.policy = c.policy;
  o.device = device;
  o.dtype = dtype;
  o.opt.lr = 1e-2;
  if (delay_seed)
    o.wrap = [delay_seed](std::unique_ptr<StageProgram> p, int stage,
                          int) -> std::unique_ptr<StageProgram> {
      return std::make_unique<Delayed>(std::move(p), stage, delay_seed);
    };
  return o;
}

// The parameters (on the host) and the losses after 3 steps.
std::vector<torch::Tensor> train(const TrainOptions& o, std::vector<double>* losses) {
  Trainer t(o);
  for (int s = 0; s < 3; ++s)
    losses->push_back(t.step().loss);
  std::vector<torch::Tensor> out;
  for (const auto& p : t.parameters())
    out.push_back(p.detach().cpu().clone());
  return out;
}

void expect_same_bits_for_every_schedule(const std::string& dtype) {
  const std::vector<Case> cases = {
      {"single stage", 1, 1, "1f1b", Policy::Fixed, false},
      {"fixed 1f1b", 2, 1, "1f1b", Policy::Fixed, false},
      {"ready bf", 2, 1, "bf", Policy::Ready, false},
      {"ready bfw split", 2, 1, "bfw", Policy::Ready, true},
      {"fixed zb-h1 split", 2, 1, "zb-h1", Policy::Fixed, true},
      {"ready bf V=2", 2, 2, "bf", Policy::Ready, false},
      {"ready bfw P=4 split", 4, 1, "bfw", Policy::Ready, true},
  };
  std::vector<double> ref_losses;
  const auto ref = train(options(cases[0], dtype, 0), &ref_losses);
  for (size_t k = 1; k < cases.size(); ++k)
    for (std::uint64_t seed : {1, 2}) {
      std::vector<double> losses;
      const auto got = train(options(cases[k], dtype, seed), &losses);
      EXPECT_EQ(losses, ref_losses) << cases[k].name << " seed " << seed;
      ASSERT_EQ(got.size(), ref.size());
      for (size_t i = 0; i < got.size(); ++i)
        ASSERT_TRUE(bitwise_equal(got[i], ref[i]))
            << dtype << " " << cases[k].name << " seed " << seed << ": parameter " << i;
    }
}

// Runs on any machine: the options are checked before a device is touched.
TEST(CudaOptions, CompletionIsCheckedAndIsAGpusOption) {
  try {
    parse_device("cpu", "f32", "nope");
    FAIL() << "completion 'nope' accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("`completion`: expected poll, spin or callback"),
              std::string::npos)
        << e.what();
  }
  for (const char* how : {"spin", "callback"})
    try {
      parse_device("cpu", "f32", how);
      FAIL() << "completion " << how << " accepted on the CPU";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("waits for a GPU's stream"), std::string::npos)
          << e.what();
    }
  EXPECT_EQ(parse_device("cpu", "f32", "poll").completion, Completion::poll);
}

TEST(CudaTrain, EveryScheduleGivesTheSameBitsInF32) {
  SKIP_WITHOUT_CUDA();
  expect_same_bits_for_every_schedule("f32");
}

TEST(CudaTrain, EveryScheduleGivesTheSameBitsInBf16) {
  SKIP_WITHOUT_CUDA();
  expect_same_bits_for_every_schedule("bf16");
}

// A stage that launches its next task while earlier ones still run on its stream (the runtime's
// window) gives the same bits: no output handed on, and no input's memory reused, too early.
TEST(CudaTrain, AWindowOfTasksInFlightKeepsTheBits) {
  SKIP_WITHOUT_CUDA();
  const std::vector<Case> cases = {
      {"fixed 1f1b", 2, 1, "1f1b", Policy::Fixed, false},
      {"ready bf", 2, 1, "bf", Policy::Ready, false},
      {"ready bfw split", 2, 1, "bfw", Policy::Ready, true},
      {"ready bf interleaved", 2, 2, "bf", Policy::Ready, false},
  };
  std::vector<double> ref_losses;
  const auto ref = train(options(cases[0], "bf16", 0), &ref_losses);
  for (const Case& c : cases)
    for (int window : {2, 4}) {
      TrainOptions o = options(c, "bf16", window == 2 ? 1 : 0);
      o.runtime.window = window;
      std::vector<double> losses;
      const auto got = train(o, &losses);
      EXPECT_EQ(losses, ref_losses) << c.name << " window " << window;
      for (size_t i = 0; i < got.size(); ++i)
        ASSERT_TRUE(bitwise_equal(got[i], ref[i]))
            << c.name << " window " << window << ": parameter " << i;
    }
}

TEST(CudaTrain, TheDeviceComputesWhatTheCpuDoes) {
  SKIP_WITHOUT_CUDA();
  const Case c{"ready bfw split", 2, 1, "bfw", Policy::Ready, true};
  std::vector<double> gpu_losses, cpu_losses;
  const auto gpu = train(options(c, "f32", 0), &gpu_losses);
  const auto cpu = train(options(c, "f32", 0, "cpu"), &cpu_losses);
  for (size_t s = 0; s < cpu_losses.size(); ++s)
    EXPECT_NEAR(gpu_losses[s], cpu_losses[s], 1e-4 * std::abs(cpu_losses[s])) << "step " << s;
  double num = 0, den = 0;
  for (size_t i = 0; i < cpu.size(); ++i) {
    num += (gpu[i] - cpu[i]).pow(2).sum().item<double>();
    den += cpu[i].pow(2).sum().item<double>();
  }
  EXPECT_LT(std::sqrt(num / den), 1e-5);  // f32 on both (no TF32 in matrix products)
  // And bf16 trains too: its losses within a percent of f32's.
  std::vector<double> bf16_losses;
  train(options(c, "bf16", 0), &bf16_losses);
  for (size_t s = 0; s < cpu_losses.size(); ++s)
    EXPECT_NEAR(bf16_losses[s], cpu_losses[s], 0.01 * std::abs(cpu_losses[s])) << "step " << s;
}

#ifdef RRFP_HAVE_PARTITIONS
// On SM partitions every schedule still gives the same bits; whether they are also those of
// the unpartitioned run depends on cuBLAS's choice of kernels, so that is printed, not asserted.
TEST(CudaTrain, SmPartitionsKeepTheBitsAcrossSchedules) {
  SKIP_WITHOUT_CUDA();
  set_partition_source([](torch::Device d, int n) { return gpu::partition_streams(d.index(), n); });
  std::printf("SM partitions of %d SMs at P=2\n", gpu::partition_sms(0, 2));
  const std::vector<Case> cases = {
      {"fixed 1f1b", 2, 1, "1f1b", Policy::Fixed, false},
      {"ready bf", 2, 1, "bf", Policy::Ready, false},
      {"ready bf V=2", 2, 2, "bf", Policy::Ready, false},
  };
  std::vector<double> ref_losses, plain_losses;
  TrainOptions o = options(cases[0], "bf16", 0);
  const auto plain = train(o, &plain_losses);
  o.sm_partitions = true;
  const auto ref = train(o, &ref_losses);
  bool same_as_plain = true;
  for (size_t i = 0; i < ref.size(); ++i)
    same_as_plain = same_as_plain && bitwise_equal(ref[i], plain[i]);
  std::printf("partitioned and unpartitioned runs bitwise equal: %s\n",
              same_as_plain ? "yes" : "no");
  for (size_t k = 1; k < cases.size(); ++k) {
    TrainOptions c = options(cases[k], "bf16", 1);
    c.sm_partitions = true;
    std::vector<double> losses;
    const auto got = train(c, &losses);
    EXPECT_EQ(losses, ref_losses) << cases[k].name;
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_TRUE(bitwise_equal(got[i], ref[i])) << cases[k].name << ": parameter " << i;
  }
}
#endif

#ifdef RRFP_HAVE_GPU
// However the host learns that a task's kernels ended, the results are the same bits.
TEST(CudaTrain, EveryWayOfLearningOfCompletionGivesTheSameBits) {
  SKIP_WITHOUT_CUDA();
  set_stream_notifier(gpu::notify_when_done);
  const Case c = {"ready bfw split", 2, 1, "bfw", Policy::Ready, true};
  std::vector<double> ref_losses;
  const auto ref = train(options(c, "bf16", 1), &ref_losses);
  for (const char* how : {"spin", "callback"}) {
    TrainOptions o = options(c, "bf16", 2);
    o.completion = how;
    std::vector<double> losses;
    const auto got = train(o, &losses);
    EXPECT_EQ(losses, ref_losses) << how;
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_TRUE(bitwise_equal(got[i], ref[i])) << how << ": parameter " << i;
  }
}

// A stage whose every task runs a small product on its stream; stage 1's F of microbatch 0
// also enqueues a kernel that outlasts the watchdog many times over.
class StallingProgram final : public StageProgram {
 public:
  StallingProgram(int stage, DeviceSpec d) : stage_(stage), dev_(d) {}
  Payload forward(TaskContext& ctx, int, int mb, Payload) override {
    work(ctx, stage_ == 1 && mb == 0);
    return Payload::allocate(64);
  }
  Payload backward(TaskContext& ctx, int, int, Payload) override {
    work(ctx, false);
    return Payload::allocate(64);
  }

 private:
  void work(TaskContext& ctx, bool stall) {
    StageDevice::Scope on(dev_);
    auto a = torch::ones({256, 256}, torch::TensorOptions().device(dev_.device()));
    a = a.matmul(a);
    if (stall) gpu::stall_current_stream(8'000'000'000);  // 8 s
    if (ctx.window() > 1)
      ctx.defer(dev_.pending());
    else
      dev_.complete(&ctx);
  }
  int stage_;
  StageDevice dev_;
};

// Whichever way the host waits for it (poll, spin, a host callback, the runtime's window).
TEST(CudaRuntime, TheWatchdogNamesAStageWhoseKernelNeverEnds) {
  SKIP_WITHOUT_CUDA();
  set_stream_notifier(gpu::notify_when_done);
  for (auto [how, window] : {std::pair{"poll", 1}, std::pair{"spin", 1}, std::pair{"callback", 1},
                             std::pair{"poll", 2}}) {
    const DeviceSpec d = parse_device("cuda", "f32", how);
    PipelineConfig cfg;
    cfg.pp = 2;
    cfg.microbatches = 4;
    const WorkModel m(cfg);
    const Hint hint = make_hint("1f1b", m);
    RuntimeOptions o;
    o.timeout_ms = 1000;
    o.window = window;
    Runtime rt(
        m, hint, [d](int stage, int) { return std::make_unique<StallingProgram>(stage, d); }, o);
    const auto t0 = std::chrono::steady_clock::now();
    try {
      rt.run_step(0);
      FAIL() << how << ": the step ended although stage 1's kernel had not";
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("no progress"), std::string::npos) << how << ": " << what;
      EXPECT_NE(what.find("running F c1 m0"), std::string::npos) << how << ": " << what;
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_LT(s, 4.0) << how << ": the watchdog (1 s) waited for the kernel (8 s)";
  }
}
#endif

}  // namespace
}  // namespace rrfp::train
