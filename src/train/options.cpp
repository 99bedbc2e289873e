#include "train/options.hpp"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>

#include "core/arbiter.hpp"
#include "core/error.hpp"
#include "core/format.hpp"
#include "core/memory.hpp"
#include "dist/job.hpp"
#include "train/device.hpp"
#include "train/image_text.hpp"
#include "train/model.hpp"

namespace rrfp::train {

namespace {

void at_least(const char* name, double v, double lo) {
  if (!std::isfinite(v) || v < lo)
    throw InputError(std::string("`") + name + "`: must be a finite number of at least " +
                     fmt("%g", lo) + ", got " + fmt_given(v));
}

void validate(const WindowOptions& w, const GptConfig& m) {
  // `max_len` first: 0 was refused naming `min_len`, which was within its own range.
  if (w.max_len < 1)
    throw InputError("`max_len`: must be between 1 and the model's `max_seq` (" +
                     std::to_string(m.max_seq) + "), got " + std::to_string(w.max_len));
  if (w.min_len < 1 || w.min_len > w.max_len)
    throw InputError("`min_len`: must be between 1 and `max_len` (" + std::to_string(w.max_len) +
                     "), got " + std::to_string(w.min_len));
  if (w.max_len > m.max_seq)
    throw InputError("`max_len`: " + std::to_string(w.max_len) + " exceeds the model's `max_seq` " +
                     std::to_string(m.max_seq));
}

double block_parameters(const GptConfig& c) {
  const double d = c.d_model;
  return 12 * d * d + 13 * d;
}

double edge_parameters(const GptConfig& c) {  // the embeddings and the head
  return (2.0 * c.vocab + c.max_seq) * c.d_model;
}

constexpr double kBytesAParameter = 4 * 4;  // it, its gradient, AdamW's two moments: float32

}  // namespace

double approx_parameters(const GptConfig& c) {
  return c.layers * block_parameters(c) + edge_parameters(c);
}

double model_bytes(const GptConfig& c) {
  return approx_parameters(c) * kBytesAParameter;
}

void validate(const TrainOptions& o) {
  validate(o.model);
  // A model that cannot fit in the memory this process may take (core/memory.hpp: the least of
  // MemAvailable, the cgroup's limit and RRFP_MEMORY_LIMIT) is refused here, in one line,
  // instead of failing inside LibTorch (the machine's physical pages, counted before, let
  // through what a cgroup or RRFP_MEMORY_LIMIT does not allow).
  // A job's process holds its stage's part: check_activations sizes it with the activations.
  if (!o.job) {
    // The position table (`max_seq` x `d_model`) can be most of a model: said where it is
    // (a `max_seq` of 2^20 was refused naming `d_model` and `layers` alone).
    const bool positions = static_cast<double>(o.model.max_seq) * o.model.d_model >
                           o.model.layers * block_parameters(o.model);
    check_memory(model_bytes(o.model),
                 "`d_model` " + std::to_string(o.model.d_model) + " with `layers` " +
                     std::to_string(o.model.layers) +
                     (positions ? " and `max_seq` " + std::to_string(o.model.max_seq) : "") +
                     " (about " + fmt("%.3g", approx_parameters(o.model)) + " parameters)",
                 " for weights, gradients and optimizer state",
                 positions ? "`max_seq`, `d_model` or `layers`" : "`d_model` or `layers`");
  }
  validate(o.runtime);
  if (o.task != "text" && o.task != "image-text")
    throw InputError("`task`: expected text or image-text, got '" + o.task + "'");
  if (o.max_images < 0 || o.max_images > 100'000)
    throw InputError("`max_images`: must be between 0 and 100000, got " +
                     std::to_string(o.max_images));
  if (o.task == "image-text" && ImageText::longest_sample(o.max_images) > o.model.max_seq)
    throw InputError("`max_images` " + std::to_string(o.max_images) + ": a sample can have " +
                     std::to_string(ImageText::longest_sample(o.max_images)) +
                     " tokens, more than `max_seq` " + std::to_string(o.model.max_seq) +
                     " holds; " +
                     (o.model.max_seq < kMaxSeq ? "raise `max_seq` or lower `max_images`"
                                                : "lower `max_images`"));
  // The text task's windows only: the image-text task's bound is `max_images` (its samples
  // ignore them), and `max_seq` 64 was refused there over the unused default `max_len` 128.
  if (o.task == "text") validate(o.window, o.model);
  // At most what a checkpoint's step may hold (checkpoint.cpp), so that every step saved resumes.
  if (o.steps < 1 || o.steps > kMaxSteps)
    throw InputError("`steps`: must be between 1 and " + std::to_string(kMaxSteps) + ", got " +
                     std::to_string(o.steps));
  if (o.opt.warmup < 0)
    throw InputError("`warmup`: must not be negative, got " + std::to_string(o.opt.warmup));
  // The optimizer keeps both as float; past these a step overflows.
  // Below 1e-30 the rate is lost to the float: 1e-300 became 0 and the run trained nothing
  // without a word (1e-30 stays a normal float after warmup's and the floor's factors).
  if (!(o.opt.lr >= 1e-30 && o.opt.lr <= 1000))
    throw InputError("`lr`: must be in [1e-30, 1000], got " + fmt_given(o.opt.lr));
  if (!(o.opt.weight_decay >= 0 && o.opt.weight_decay <= 1000))
    throw InputError("`weight_decay`: must be in [0, 1000], got " + fmt_given(o.opt.weight_decay));
  // A step multiplies every weight by 1 - lr x weight_decay (decoupled decay, as AdamW's): from
  // 1 on, that zeroes or flips every parameter, and the run diverged a few steps later.
  if (o.opt.lr * o.opt.weight_decay >= 1)
    throw InputError(
        "`lr` x `weight_decay`: must be below 1 (each step multiplies every weight "
        "by 1 minus their product), got " +
        fmt_given(o.opt.lr) + " x " + fmt_given(o.opt.weight_decay));
  at_least("clip", o.opt.clip, 0);
  const bool gpu = parse_device(o.device, o.dtype, o.completion).gpu();
  if (o.runtime.window > 1 && !gpu)
    throw InputError(
        "`window`: more than 1 keeps a GPU's stream fed (`device` cuda); a CPU "
        "task is done when it returns");
  if (!o.deterministic && !gpu)
    throw InputError(
        "`deterministic`: off trades a GPU's bitwise results for speed (`device` "
        "cuda); the CPU's algorithms are deterministic");
  if (o.sm_partitions && !gpu)
    throw InputError("`sm_partitions`: SM partitions are a GPU's (`device` cuda)");
  if (o.sm_partitions && !partition_source())
    throw InputError("`sm_partitions`: this build has none (scripts/build-gpu.sh builds them)");
  if (gpu) {
    // A GPU's stages share its memory in one process; between processes (and within a TP
    // group, whose collectives sum host memory) payloads would have to be staged first.
    if (o.job) throw InputError("`device`: cuda trains in one process (`transport` inproc)");
    if (o.runtime.tp > 1) throw InputError("`device`: cuda trains with `tp` 1 for now");
  }
  if (o.dp < 1) throw InputError("`dp`: must be at least 1, got " + std::to_string(o.dp));
  if (o.dp > 1 && !o.job)
    throw InputError("`dp`: data-parallel replicas run as processes (`transport` mpi)");
}

namespace {

// The longest sequence a microbatch has: the rows of its activations.
std::int64_t longest_sequence(const TrainOptions& o) {
  return o.task == "image-text" ? ImageText::longest_sample(o.max_images) : o.window.max_len;
}

// What the stages of this process hold at once, in bytes. Each chunk-microbatch between its
// forward and its backward keeps, a block, its attention's softmax (heads x n^2 floats, a TP
// rank its heads' share) and mask (n^2 bytes) and its linear layers' inputs and outputs (about
// 4 + 12 / T rows of d_model floats a token); a stage has at most d_bound() of them (the
// arbiter's bound on D: the order's peak under the fixed policy, the limit under the ready one),
// and with a split backward up to max_pending_w more whose W tasks keep the linear layers' part.
// The block that runs adds its scores before the softmax, twice heads x n^2 floats.
double activation_bytes(const TrainOptions& o, const WorkModel& m, int in_flight, int pending_w) {
  const double n = static_cast<double>(longest_sequence(o)), d = o.model.d_model;
  const double t = o.runtime.tp, heads = o.model.heads / t;
  const double blocks = static_cast<double>(o.model.layers) / m.chunks();  // a chunk's
  const double linear = 4 * n * (4 * d + 12 * d / t);
  const double held = blocks * (4 * heads * n * n + n * n + linear);
  const double per_rank = in_flight * held + pending_w * blocks * linear + 8 * heads * n * n;
  const double ranks = o.job ? 1 : static_cast<double>(m.pp()) * o.runtime.tp;
  return ranks * per_rank;
}

// What this process holds of the model: alone, all of it; in a job, its stage's blocks (its TP
// rank's share of them) and the embeddings and the head, charged to every process though only
// the first and last stages hold them (the estimate errs high, by little at byte vocabularies).
double model_bytes_here(const TrainOptions& o, const WorkModel& m) {
  if (!o.job) return model_bytes(o.model);
  const double blocks = std::ceil(static_cast<double>(o.model.layers) / m.pp());
  return (blocks * block_parameters(o.model) / o.runtime.tp + edge_parameters(o.model)) *
         kBytesAParameter;
}

// A small tensor's own objects and allocation, beside its elements (measured: 20K to 80K
// microbatches of 16 bytes took 0.5 KB a tensor more than their elements).
constexpr double kTensorBytes = 512;
// The runtime's records of a chunk-microbatch's tasks, kept for the step's trace and timeline
// and drawn into them at the end (measured: 1.6 KB between P=2 and P=4 at 40K microbatches).
constexpr double kChunkMicrobatchBytes = 2048;

// What a step keeps for each of its microbatches beside their activations: the tokens and
// targets of the training batch and of the held-out batch the last validation builds beside
// it (a job's process builds its replica's batch from the job's, DP x M microbatches), and
// the records of its chunk-microbatches' tasks (rank 0 of a job merges replica 0's). M in
// the millions took 5.8 KB a microbatch at P=2 and grew past 20 GB before the first task ran.
double microbatch_bytes(const TrainOptions& o, const WorkModel& m) {
  const double mbs = m.microbatches(), longest = static_cast<double>(longest_sequence(o));
  const double batch = 2 * (kTensorBytes + 8 * longest);  // tokens and targets, int64
  const double images =
      o.task == "image-text"
          ? kTensorBytes + 4.0 * o.max_images * ImageText::kPatches * ImageText::kPatchDim
          : 0;
  const double chunk_mbs = (o.job && o.job->rank() != 0 ? 1.0 : m.pp()) * m.vpp() * mbs;
  return 2 * o.dp * mbs * (batch + images) + chunk_mbs * kChunkMicrobatchBytes;
}

// This process's control group: its cgroup namespace (containers with their own one all read
// "0::/" in /proc/self/cgroup) and its groups there.
std::string control_group() {
  std::array<char, 256> ns{};
  const ssize_t n = ::readlink("/proc/self/ns/cgroup", ns.data(), ns.size() - 1);
  std::ifstream in("/proc/self/cgroup");
  std::string groups((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  groups.resize(std::min<std::size_t>(groups.size(), 4096));
  return std::string(ns.data(), n > 0 ? static_cast<std::size_t>(n) : 0) + "\n" + groups;
}

// The processes of a job that run on one machine share its memory. Each process's need is
// summed over the processes that read its clock (one boot, dist/job.hpp's this_clock_id) in
// its control group (containers on one host each have their own limit, which summing them
// all against the least of them refused) and set against the least any of them may take.
// Every process decides on the same gathered numbers, so all refuse alike: a refusal on some
// would leave the others waiting in the job's first collective until its timeout. Checked
// alone, each of P processes on one machine let through a run that needed P times what it
// counted.
void check_job_memory(Job& job, double bytes, const std::string& what, const std::string& extra,
                      const std::string& lower) {
  struct Need {
    double bytes;
    std::int64_t have;
  };
  const Need mine{bytes, available_memory()};
  std::vector<std::byte> sent(sizeof mine);
  std::memcpy(sent.data(), &mine, sizeof mine);
  const std::vector<std::byte> id = this_clock_id();
  sent.insert(sent.end(), id.begin(), id.end());
  for (char c : control_group())
    sent.push_back(static_cast<std::byte>(c));
  struct Machine {
    double bytes = 0;
    std::int64_t have = 0;
    int processes = 0;
  };
  // Keyed by the machine's bytes as a string: a map keyed by a byte vector drew a false
  // -Wstringop-overread from g++ 12 on its comparison.
  std::map<std::string, Machine> machines;
  for (const auto& got : job.all_gather_bytes(sent)) {
    if (got.size() < sizeof(Need)) throw Error("the job's memory check got a short record");
    Need n{};
    std::memcpy(&n, got.data(), sizeof n);
    Machine& at = machines[std::string(reinterpret_cast<const char*>(got.data()) + sizeof n,
                                       got.size() - sizeof n)];
    at.bytes += n.bytes;
    ++at.processes;
    if (n.have > 0) at.have = at.have > 0 ? std::min(at.have, n.have) : n.have;
  }
  const Machine* worst = nullptr;  // the machine furthest past what it has
  for (const auto& [key, at] : machines)
    if (at.have > 0 && at.bytes > static_cast<double>(at.have) &&
        (!worst ||
         at.bytes - static_cast<double>(at.have) > worst->bytes - static_cast<double>(worst->have)))
      worst = &at;
  if (!worst) return;
  const std::string n = std::to_string(worst->processes);
  check_memory(worst->bytes, worst->have, what,
               extra + ", summed over the " + n + " process" + (n == "1" ? "" : "es") +
                   " of the job on one machine",
               lower + (n == "1" ? "" : ", or run fewer processes a machine"), "that machine");
}

}  // namespace

void check_activations(const TrainOptions& o, const WorkModel& m, const Hint& hint) {
  // On a GPU the activations take the device's memory, which this does not see.
  if (parse_device(o.device, o.dtype, o.completion).gpu()) return;
  const ArbiterOptions a = resolve_options(o.runtime.arbiter, hint, m);
  const int most = m.vpp() * m.microbatches();  // a stage's chunk-microbatches, all of them
  const int in_flight = std::min(d_bound(a, hint, m), most);
  // The fixed policy follows the list's order: its own deferred weight gradients, which
  // `max_pending_w` does not cap (a zero-bubble list passed the check and then took 1.5 GB of
  // a 1 GB limit, counted at the cap's P).
  const bool fixed = a.policy == Policy::Fixed && hint.is_list();
  const int pending_w = !m.split() ? 0
                        : fixed    ? std::min(fixed_order_pending_w_peak(hint.list(), m), most)
                                   : std::min(a.max_pending_w, most);
  const double held = activation_bytes(o, m, in_flight, pending_w) + model_bytes_here(o, m);
  const double batch = microbatch_bytes(o, m);
  std::string what, extra, lower;
  if (batch > held) {  // most of it grows with M, whatever the model and its activations
    what = "`microbatches` " + std::to_string(m.microbatches());
    extra =
        " for the tokens and targets of a step's microbatches and the records of their tasks, "
        "with the model and its activations";
    lower = "`microbatches`";
  } else {
    what = (o.task == "image-text" ? "`max_images` " + std::to_string(o.max_images) + " (" +
                                         std::to_string(longest_sequence(o)) + " tokens)"
                                   : "`max_len` " + std::to_string(o.window.max_len)) +
           " with `heads` " + std::to_string(o.model.heads) + " and `layers` " +
           std::to_string(o.model.layers);
    extra = " for the activations of up to " + std::to_string(in_flight) + " microbatch" +
            (in_flight == 1 ? "" : "es") + " in flight a stage" +
            (pending_w > 0 ? " and " + std::to_string(pending_w) + " deferred weight gradient" +
                                 (pending_w == 1 ? "" : "s")
                           : std::string()) +
            " (attention keeps `heads` x length^2 floats a block) and the model";
    // `limit` bounds the ready policy alone (the fixed one refuses it).
    lower = (o.task == "image-text" ? "`max_images`" : std::string("`max_len`")) +
            ", `heads`, `layers` or the microbatches in flight (" +
            (fixed ? "under `policy` ready, a `limit` below the fixed order's " +
                         std::to_string(in_flight)
                   : std::string("`limit`")) +
            ")";
    if (o.job) lower = "`d_model`, " + lower;
  }
  if (o.job) return check_job_memory(*o.job, held + batch, what, extra, lower);
  check_memory(held + batch, what, extra, lower);
}

// results-train.md's own `--steps 20` run (default warmup 60) peaked at a third of `lr`
// without a word.
std::string schedule_warning(const TrainOptions& o) {
  const std::string floor = fmt("%g", o.opt.lr * o.opt.min_lr_ratio);
  // One step and no warmup decays nothing either, and was asked for nothing else.
  if (o.opt.warmup < o.steps - 1 || o.opt.warmup == 0) return {};
  // The decay's first step sits at its top (Trainer::lr_at): one warmup step short of `steps`
  // peaks at the last step and decays at none.
  if (o.opt.warmup == o.steps - 1)
    return "`warmup` " + std::to_string(o.opt.warmup) + " leaves no step of `steps` " +
           std::to_string(o.steps) + " past the peak: the learning rate rises to `lr` " +
           fmt("%g", o.opt.lr) + " at the last step and never decays towards its floor " + floor;
  return "`warmup` " + std::to_string(o.opt.warmup) + " is not below `steps` " +
         std::to_string(o.steps) + ": the learning rate only rises, to " +
         fmt("%g", o.opt.lr * o.steps / o.opt.warmup) + " (`lr` " + fmt("%g", o.opt.lr) +
         "), and never decays towards its floor " + floor;
}

}  // namespace rrfp::train
