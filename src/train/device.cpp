#include "train/device.hpp"

#include <ATen/autocast_mode.h>
#include <c10/core/Event.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/version.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <thread>

#include "core/error.hpp"
#include "runtime/errors.hpp"
#include "runtime/program.hpp"

// torch 2.4 gave autocast's switches a device argument (the old CUDA-only ones are deprecated).
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
#define RRFP_AUTOCAST_BY_DEVICE 1
#endif

namespace rrfp::train {

namespace {

bool autocast_enabled() {
#ifdef RRFP_AUTOCAST_BY_DEVICE
  return at::autocast::is_autocast_enabled(at::kCUDA);
#else
  return at::autocast::is_enabled();
#endif
}

void set_autocast(bool on) {
#ifdef RRFP_AUTOCAST_BY_DEVICE
  at::autocast::set_autocast_enabled(at::kCUDA, on);
  if (on) at::autocast::set_autocast_dtype(at::kCUDA, at::kBFloat16);
#else
  at::autocast::set_enabled(on);
  if (on) at::autocast::set_autocast_gpu_dtype(at::kBFloat16);
#endif
}

}  // namespace

DeviceSpec parse_device(const std::string& device, const std::string& dtype,
                        const std::string& completion) {
  DeviceSpec d;
  if (device != "cpu" && device != "cuda" && device.rfind("cuda:", 0) != 0)
    throw InputError("`device`: expected cpu, cuda or cuda:N, got '" + device + "'");
  if (device != "cpu") {
    if (!torch::cuda::is_available())
      throw InputError("`device`: " + device +
                       " asked for, but this LibTorch has no CUDA or this machine no GPU "
                       "(scripts/build-gpu.sh builds against a CUDA PyTorch)");
    try {
      d.device = torch::Device(device);
    } catch (const std::exception&) {
      throw InputError("`device`: cannot parse '" + device + "' (expected cuda:N)");
    }
    const int n = static_cast<int>(torch::cuda::device_count());
    if (d.device.has_index() && d.device.index() >= n)
      throw InputError("`device`: " + device + " does not exist: this machine has " +
                       std::to_string(n) + " CUDA device(s)");
    if (!d.device.has_index()) d.device = torch::Device(torch::kCUDA, 0);
  }
  if (dtype != "f32" && dtype != "bf16")
    throw InputError("`dtype`: expected f32 or bf16, got '" + dtype + "'");
  d.bf16 = dtype == "bf16";
  if (d.bf16 && !d.gpu())
    throw InputError("`dtype`: bf16 (autocast) runs on `device` cuda only; the CPU trains in f32");
  if (completion == "spin")
    d.completion = Completion::spin;
  else if (completion == "callback")
    d.completion = Completion::callback;
  else if (completion != "poll")
    throw InputError("`completion`: expected poll, spin or callback, got '" + completion + "'");
  if (d.completion != Completion::poll && !d.gpu())
    throw InputError("`completion`: " + completion +
                     " waits for a GPU's stream (`device` cuda); the CPU's tasks end when they "
                     "return");
  if (d.completion == Completion::callback && !stream_notifier())
    throw InputError(
        "`completion`: this build has no host callbacks (scripts/build-gpu.sh builds them)");
  return d;
}

void make_deterministic(const DeviceSpec& d, bool on) {
  if (!d.gpu() || !on) return;
  // Read by cuBLAS when its first handle is made: set before any kernel, keeping a user's value.
  ::setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", 0);
  // warn_only: an operation without a deterministic kernel warns instead of failing the run;
  // the bitwise tests across schedules are what show whether a step is reproducible.
  at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/true);
}

namespace {
PartitionSource& source() {
  static PartitionSource s;
  return s;
}
StreamNotifier& notifier() {
  static StreamNotifier n;
  return n;
}
}  // namespace

void set_partition_source(PartitionSource s) {
  source() = std::move(s);
}

const PartitionSource& partition_source() {
  return source();
}

void set_stream_notifier(StreamNotifier n) {
  notifier() = std::move(n);
}

const StreamNotifier& stream_notifier() {
  return notifier();
}

StageDevice::StageDevice(DeviceSpec d, std::optional<c10::Stream> stream)
    : spec_(d), stream_(stream) {
  if (spec_.gpu() && !stream_)
    stream_ = c10::impl::getDeviceGuardImpl(spec_.device.type())
                  ->getStreamFromGlobalPool(spec_.device, /*isHighPriority=*/false);
}

StageDevice::Scope::Scope(const StageDevice& d) : d_(d) {
  if (!d_.stream_) return;
  stream_.emplace(*d_.stream_);
  prev_enabled_ = autocast_enabled();
  prev_cache_ = at::autocast::is_autocast_cache_enabled();
  // No cast cache: it would keep a weight's bf16 copy across the optimizer's update.
  at::autocast::set_autocast_cache_enabled(false);
  set_autocast(d_.spec_.bf16);
}

StageDevice::Scope::~Scope() {
  if (!d_.stream_) return;
  set_autocast(prev_enabled_);
  at::autocast::set_autocast_cache_enabled(prev_cache_);
}

namespace {

// Spins briefly (most kernels of a task end within microseconds of the last launch's return),
// then, unless told to spin, sleeps in short steps so that a long task does not hold a core.
void poll(const c10::Event& done, const TaskContext* ctx, bool sleep) {
  for (int i = 0; !done.query(); ++i) {
    if (ctx && ctx->aborted()) throw Aborted();
    if (i < 200 || !sleep)
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

void poll(const c10::Stream& stream, const TaskContext* ctx, bool sleep) {
  c10::Event done(stream.device_type());
  done.record(stream);
  poll(done, ctx, sleep);
}

class StreamWork final : public PendingWork {
 public:
  explicit StreamWork(const c10::Stream& stream) : done_(stream.device_type()) {
    done_.record(stream);
  }
  bool ready() override { return done_.query(); }
  void wait(const TaskContext& ctx) override { poll(done_, &ctx, true); }

 private:
  c10::Event done_;
};

// Sleeps until the host function enqueued behind the task's kernels runs. The flag is shared
// with that function, which may run after an aborted wait has returned (or never, behind a
// kernel that never ends).
void await_callback(const c10::Stream& stream, const TaskContext* ctx) {
  struct Flag {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
  };
  auto f = std::make_shared<Flag>();
  stream_notifier()(stream, [f] {
    {
      std::lock_guard lk(f->mu);
      f->done = true;
    }
    f->cv.notify_one();
  });
  std::unique_lock lk(f->mu);
  while (!f->cv.wait_for(lk, std::chrono::milliseconds(1), [&] { return f->done; }))
    if (ctx && ctx->aborted()) throw Aborted();
}

std::int64_t wait_for(const c10::Stream& stream, Completion how, const TaskContext* ctx) {
  const auto t0 = std::chrono::steady_clock::now();
  if (how == Completion::callback)
    await_callback(stream, ctx);
  else
    poll(stream, ctx, how == Completion::poll);
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
      .count();
}

}  // namespace

std::int64_t StageDevice::complete(const TaskContext* ctx) const {
  return stream_ ? wait_for(*stream_, spec_.completion, ctx) : 0;
}

std::unique_ptr<PendingWork> StageDevice::pending() const {
  if (!stream_) return nullptr;
  return std::make_unique<StreamWork>(*stream_);
}

void complete_current_stream(const DeviceSpec& d) {
  if (d.gpu())
    wait_for(c10::impl::getDeviceGuardImpl(d.device.type())->getStream(d.device), d.completion,
             nullptr);
}

}  // namespace rrfp::train
