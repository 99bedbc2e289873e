#include "train/device.hpp"

#include <ATen/autocast_mode.h>
#include <c10/core/Event.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/version.h>

#include <chrono>
#include <cstdlib>
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

DeviceSpec parse_device(const std::string& device, const std::string& dtype) {
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
}  // namespace

void set_partition_source(PartitionSource s) {
  source() = std::move(s);
}

const PartitionSource& partition_source() {
  return source();
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

void wait_for(const c10::Stream& stream, const TaskContext* ctx) {
  c10::Event done(stream.device_type());
  done.record(stream);
  // Spin briefly (most kernels of a task end within microseconds of the last launch's return),
  // then sleep in short steps so that a long task does not hold a core.
  for (int i = 0; !done.query(); ++i) {
    if (ctx && ctx->aborted()) throw Aborted();
    if (i < 200)
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

}  // namespace

void StageDevice::complete(const TaskContext* ctx) const {
  if (stream_) wait_for(*stream_, ctx);
}

void complete_current_stream(const DeviceSpec& d) {
  if (d.gpu())
    wait_for(c10::impl::getDeviceGuardImpl(d.device.type())->getStream(d.device), nullptr);
}

}  // namespace rrfp::train
