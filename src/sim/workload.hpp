#pragma once
// The workload model of semantics.md §5: what each task costs on each rank and what each message
// takes, as a pure function of (seed, task, rank). Presets fill WorkloadParams; a JSON file
// overrides any field; a replay CSV replaces the model with measured durations.
#include <cstdint>
#include <string>
#include <vector>

#include "core/work_model.hpp"

namespace rrfp {

struct JitterLevel {
  double p = 0;         // probability a task is disturbed
  double floor_us = 0;  // the disturbance scales with max(floor, the task's own duration)
  double alpha = 0;     // size of the disturbance
};
JitterLevel jitter_level(int j);  // J0..J3 of the paper

struct WorkloadParams {
  std::string preset = "uniform";
  std::string origin;  // the workload file read, which realize()'s refusals name ("": none)
  // Compute. Costs are per pipeline stage (its whole model slice); a chunk costs 1/V of it.
  double forward_us = 1000;         // forward cost at the mean token count
  double backward_ratio_min = 1.0;  // backward / forward, drawn uniformly per task
  double backward_ratio_max = 1.0;
  double weight_share = 0.5;  // share of the backward that is W when split
  double head_factor = 1.0;   // the last chunk's extra cost (LM head and loss)
  double compute_sigma = 0;   // log-normal noise on every compute task
  // Tokens per microbatch: log-normal around the mean, clamped; cost linear + quadratic.
  double tokens_mean = 4096;
  double tokens_sigma = 0;  // 0 = every microbatch has tokens_mean tokens
  double tokens_min = 256;
  double tokens_max = 32768;
  double quadratic_share = 0.25;  // share of the cost at the mean that is quadratic
  // Images per microbatch: discretized Pareto (heavy tail); the vision encoder's cost lands
  // on the first `vision_chunks` chunks, and each image adds tokens to the text sequence.
  double images_scale = 0;  // 0 = no images
  double images_alpha = 1.5;
  int images_max = 64;
  double image_us = 0;
  double image_tokens = 0;
  int vision_chunks = 1;
  // The paper's jitter injection.
  JitterLevel jitter;
  // A straggling stage: in random stretches of `straggler_window` microbatches (each slow with
  // probability straggler_prob) its tasks take straggler_factor times longer.
  int straggler_stage = -1;  // -1 = none; -2 = chosen from the seed
  double straggler_factor = 1.0;
  int straggler_window = 4;
  double straggler_prob = 0.3;
  // Communication: latency + bytes / bandwidth, times log-normal noise.
  double comm_latency_us = 0;
  double comm_bandwidth_gbps = 0;  // GB/s; 0 = size costs nothing
  double comm_sigma = 0;
  // A slow mode (bimodal messages): with probability comm_slow_prob a message takes
  // comm_slow_us (times log-normal noise of sigma 0.2) on top, as in the paper's Fig. 2.
  double comm_slow_prob = 0;
  double comm_slow_us = 0;
  // How many messages' worth of bandwidth the whole machine has (above: latency + bytes /
  // bandwidth is one message alone). n messages in flight share it as a fluid: past its latency
  // each moves its bytes at min(1, comm_links / n) of its rate alone. 1: one message's rate
  // shared by all, as when processes on one host copy them through shared memory with the same
  // few cores; 1.3: two at once each take 1.54x as long; 0: each message travels on its own, as
  // on a network with bandwidth to spare. rrfp calibrate --transport mpi measures it
  // (docs/twin.md). 0 or 1 to 4096.
  double comm_links = 0;
  // Each process takes its arriving messages' bytes in one at a time, as one thread copying
  // them does (rrfp's MPI transport: Open MPI copies a large message inside the progress
  // thread's call): a message whose receiver is copying another waits for it, and a
  // rendezvous acknowledgement to a process inside a copy releases its sender once the copy
  // ends. false: every message moves at once (within comm_links). rrfp calibrate --transport mpi
  // sets it (docs/twin.md).
  bool comm_serial_receive = false;
  // Each message's time while two or more share the links is at least this many times its time
  // alone, whatever capacity is left (copies in different processes share caches and memory
  // bandwidth): with n moving, max(comm_two_slowdown, n / comm_links). 1: the links alone
  // count. rrfp calibrate --transport mpi --streams measures it from two streams at once
  // (docs/twin.md). 1 to 64.
  double comm_two_slowdown = 1;
  // Blocking mode: an offer carries its payload, as rrfp's runtime sends it over a transport
  // that moves bytes (RuntimeOptions::rendezvous_pull off): the bytes move from the producer's
  // end, the receiver sees the offer once they have landed, and accepting it delivers the input
  // at once and sends back an acknowledgement (comm_latency_us; under comm_serial_receive it
  // waits for a copy the sender's process is inside) that releases the sender. false: the bytes
  // move from the acceptance (semantics.md's rendezvous; the threaded runtime's emulated latency
  // runs from it too). rrfp calibrate --transport mpi sets it (docs/twin.md).
  bool comm_offer_payload = false;
  // A rank idle when an input arrives from another stage starts the task it then dispatches this
  // long after the arrival: its compute thread's wake-up, comm_wake_us plus comm_wake_per_copy_us
  // for each message being copied at that instant (moving on the links; on shared cores the
  // woken thread waits for one behind the copies; no links, no copies). The runtime's idle
  // threads sleep on a condition variable, and over MPI such waits grow with the bytes being
  // copied (docs/results-twin.md, "Waking idle ranks"). rrfp calibrate --streams shows what its
  // streams' threads took, without fitting it. 0 (the default) to 1e6 each.
  double comm_wake_us = 0;
  double comm_wake_per_copy_us = 0;
  double bytes_per_token = 8192;  // activation bytes per token (hidden 4096, bf16)
  // Tensor parallelism: per-rank noise, the all-reduce inside each F and B, the
  // coordination hop.
  double tp_sigma = 0.03;
  double tp_collective_us = 0;
  double coord_latency_us = 10;
};

// Preset names: uniform, language, multimodal, jitter[:J0..J3], straggler, paper-comm, paper.
const std::vector<std::string>& workload_names();
// Throws InputError naming `what`, where the name came from: the option by default, a flag or a
// file's field where the caller knows better (`rrfp train --inject-jitter` was told
// "--workload: unknown jitter level").
WorkloadParams workload_preset(const std::string& name, const std::string& what = "`workload`");
// Applies a JSON object of overrides ({"preset": ..., "forward_us": ..., ...}).
WorkloadParams apply_workload_json(WorkloadParams base, const std::string& text,
                                   const std::string& origin);
// `preset_given`: the caller named `preset` itself, and a file naming another is refused.
WorkloadParams read_workload_file(const std::string& path, const std::string& preset,
                                  bool preset_given = false);
// The fields a workload file sets, in its order; its preset as "preset NAME". What a caller
// that uses some fields alone checks the others against (a replay takes its jitter only).
std::vector<std::string> workload_file_fields(const std::string& path);
// How reports name a workload: the preset, or a file with the preset it overrides where it
// names none of its own ("language + cal.json"; "cal.json" alone hid the preset under it). With a
// `replay`, whose durations replace the preset's, the file alone unless `preset_given`.
std::string workload_label(const std::string& preset, bool preset_given, const std::string& file,
                           bool replay);
void validate(const WorkloadParams& w);  // throws InputError naming the field and its range

// The most bytes one message may carry: 1 TiB, far above any microbatch's activations.
inline constexpr double kMaxMessageBytes = 1099511627776.0;
// The longest task or message a workload or replay may hold: 1000 s.
inline constexpr double kMaxTaskUs = 1e9;
// `us` in integer nanoseconds; throws InputError naming `what` unless 0 <= us <= kMaxTaskUs,
// with `remedy` (what to change, in words) when given.
std::int64_t duration_ns(double us, const char* what, const char* remedy = nullptr);

// Realized work of one run: every duration the simulator (or emulated runtime) will use.
struct RealizedWork {
  int tp = 1;
  int num_tasks = 0;
  std::vector<std::int64_t> compute_ns;     // [rank * num_tasks + index]
  std::vector<std::int64_t> message_ns;     // the message a task's output sends across stages
  std::vector<std::int64_t> message_bytes;  // per task: bytes its output carries per TP rank
  std::int64_t collective_ns = 0;           // after each F and B of a TP group
  std::int64_t coord_ns = 0;
  double links = 0;                   // WorkloadParams::comm_links (0: each message on its own)
  bool serial_receive = false;        // WorkloadParams::comm_serial_receive
  double two_slowdown = 1;            // WorkloadParams::comm_two_slowdown
  bool offer_payload = false;         // WorkloadParams::comm_offer_payload
  std::int64_t link_latency_ns = 0;   // the part of a message that does not share the links
  std::int64_t wake_ns = 0;           // WorkloadParams::comm_wake_us
  std::int64_t wake_per_copy_ns = 0;  // WorkloadParams::comm_wake_per_copy_us

  std::int64_t compute(int rank, int index) const { return compute_ns[rank * num_tasks + index]; }
  std::int64_t message(int rank, int index) const { return message_ns[rank * num_tasks + index]; }
  // The TP collective a task of kind `k` ends in. A W's ranks still meet (every task of a group
  // does), but exchange nothing: the weight gradients a W computes stay on their rank, so
  // training's W calls no collective (Megatron's tensor-parallel layers likewise).
  std::int64_t collective_after(Kind k) const { return k == Kind::W ? 0 : collective_ns; }
};

RealizedWork realize(const WorkloadParams& w, const WorkModel& m, int tp, std::uint64_t seed);
// What a measured transport delivers (rrfp calibrate): the workload fields of the same names.
struct MessageModel {
  double latency_us = 0;
  double bandwidth_gbps = 0;  // 0: size costs nothing
  double links = 0;           // 0: each message on its own
  double two_slowdown = 1;
  bool serial_receive = false;
  bool offer_payload = false;
  double wake_us = 0;
  double wake_per_copy_us = 0;
};
// Replaces every cross-stage message's duration with latency + bytes / bandwidth, without
// noise, and the links' sharing with the model's: for comparing a run over that transport with
// the simulator. Throws InputError naming a field out of its range.
void set_message_model(const WorkModel& m, RealizedWork& w, const MessageModel& mm);

// Whether the task's output goes to another stage (and so is a message with a duration).
bool sends_across_stages(const WorkModel& m, const TaskId& t);
// How large microbatch `mb` is, as its data loader knows before the step: the bytes of its first
// forward's activations (0 when the work carries no sizes). The adaptive rule's entry order.
std::int64_t microbatch_size(const WorkModel& m, const RealizedWork& w, int mb);
// Unit costs, to show a hint's order: F = B = 1 (whole backward), or F = B = W = 1 (split),
// other fields at their defaults.
RealizedWork unit_cost_work(const WorkModel& m);
// Throws InputError when every task and message of `w` added up could pass 2^62 ns (146 years):
// makespans, bounds and sums of a step then never overflow int64. realize, replays and
// apply_jitter check it.
// `what` names the source in the error, `remedy` says what to change.
void check_total(const RealizedWork& w, const std::string& what = "workload",
                 const std::string& remedy = "lower the times or the shape");

// Throws InputError unless `w` fits `m` (tp in range, every vector of tp * num_tasks entries
// or num_tasks for message_bytes, no negative time or size) and check_total passes: the
// simulator and the emulated programs index it by task and rank without checking, so a work
// edited by its caller read past its end or ran with times below zero.
void check_work(const RealizedWork& w, const WorkModel& m);

// The paper's jitter on one F or B duration: with probability p, + alpha * max(floor, d) *
// (0.5 + U), drawn from (seed, kind, chunk, microbatch, rank); a W is never disturbed.
double jittered_us(const JitterLevel& j, double d_us, std::uint64_t seed, const TaskId& t,
                   int rank);
// Injects jitter into given durations (a replay of measured ones).
void apply_jitter(RealizedWork& w, const WorkModel& m, const JitterLevel& j, std::uint64_t seed);

// Per-microbatch inputs of the model (exposed for tests and reports).
double microbatch_tokens(const WorkloadParams& w, std::uint64_t seed, int mb);
int microbatch_images(const WorkloadParams& w, std::uint64_t seed, int mb);

}  // namespace rrfp
