#pragma once
// Where a stage's tensors live and how its work is ordered there (docs/gpu.md).
//
// On the CPU nothing changes: a task computes on its stage's thread and is done when it returns.
// On a CUDA device each (stage, TP rank) enqueues its kernels on a stream of its own, so the
// stages' work overlaps on the GPU as their threads overlap on a CPU; and a task counts as done,
// its outputs ready for the arbiter, only once the event recorded after its kernels has
// completed, not when they were enqueued: otherwise the ready set would be a guess and a stage
// could run ahead of work still queued on its stream. By default the stage's thread waits for
// that event before the task returns (complete()), one task in flight per stream; with the
// runtime's window the task returns at once, handing the runtime the event (pending()), and the
// stage launches its next task meanwhile. docs/gpu.md says what was measured. Everything here
// is torch's device-generic API (c10 streams, events and guards), so it compiles against a
// CPU-only LibTorch; only src/gpu needs the CUDA toolkit.
//
// How the thread learns of completion is an option (docs/gpu.md compares them on a GPU): poll
// the event (a short spin, then 20 µs sleeps), spin on it (yields only: the least latency, a
// core per stage), or sleep until a host function the stream runs after the task's kernels
// wakes it (a CUDA build only). A window's pending work is always polled.
#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace rrfp {
class TaskContext;
class PendingWork;
}  // namespace rrfp

namespace rrfp::train {

enum class Completion { poll, spin, callback };

// The parsed `device`, `dtype` and `completion` options.
struct DeviceSpec {
  torch::Device device = torch::kCPU;
  bool bf16 = false;  // autocast to bfloat16 (CUDA only)
  Completion completion = Completion::poll;
  bool gpu() const { return device.is_cuda(); }
};

// Checks `device` (cpu, cuda, cuda:N), `dtype` (f32, bf16) and `completion` (poll, spin,
// callback; the last two on a GPU, callback in a CUDA build); throws InputError naming the
// option, also when CUDA is asked for and this LibTorch or machine has none.
DeviceSpec parse_device(const std::string& device, const std::string& dtype,
                        const std::string& completion = "poll");

// On CUDA, with `on`: cuBLAS's workspace set for reproducible results and torch's deterministic
// algorithms on, before the first kernel: the bitwise guarantee of semantics.md §6 needs both.
void make_deterministic(const DeviceSpec& d, bool on = true);

// Where the stages' streams come from when they are to run on partitions of the SMs: set at
// start-up by a CUDA build (gpu/partition.hpp); returns `stages` streams of `device`.
using PartitionSource = std::function<std::vector<c10::Stream>(torch::Device device, int stages)>;
void set_partition_source(PartitionSource source);
const PartitionSource& partition_source();  // empty: this build has none

// Enqueues on a stream a host function that calls `done` once the work enqueued so far on it
// has completed: set at start-up by a CUDA build (gpu/notify.hpp), for `completion` callback.
using StreamNotifier = std::function<void(const c10::Stream& stream, std::function<void()> done)>;
void set_stream_notifier(StreamNotifier notifier);
const StreamNotifier& stream_notifier();  // empty: this build has none

// Returns once the work enqueued so far on the calling thread's current stream of `d` has
// completed (at once on the CPU): the trainer's update, before the stages read the parameters.
void complete_current_stream(const DeviceSpec& d);

// One stage's place on its device: its stream, and the scope a task's work runs in.
class StageDevice {
 public:
  // `stream`: the stage's (a partition's); none: one from torch's pool.
  explicit StageDevice(DeviceSpec d, std::optional<c10::Stream> stream = std::nullopt);
  const DeviceSpec& spec() const { return spec_; }
  torch::Device device() const { return spec_.device; }

  // Makes this stage's stream current and autocast as configured on the calling thread, for
  // the scope's life. On exit (also by exception) the previous state returns.
  class Scope {
   public:
    explicit Scope(const StageDevice& d);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    const StageDevice& d_;
    std::optional<c10::StreamGuard> stream_;
    bool prev_enabled_ = false, prev_cache_ = true;
  };

  // Returns once the work enqueued so far on this stage's stream has completed on the device
  // (at once on the CPU), learning of it as `completion` says; throws Aborted within about a
  // millisecond once `ctx` says the step failed (the watchdog), so a kernel that never ends
  // is reported, not waited for. Returns the nanoseconds it waited: the device's tail behind
  // the host's last launch, which a window of tasks enqueued ahead could hide (0 on the CPU).
  std::int64_t complete(const TaskContext* ctx = nullptr) const;
  // For the runtime's window (RuntimeOptions::window): the work enqueued so far on this
  // stage's stream, ready once it has completed (an event recorded now, polled).
  std::unique_ptr<PendingWork> pending() const;

 private:
  DeviceSpec spec_;
  std::optional<c10::Stream> stream_;
};

}  // namespace rrfp::train
