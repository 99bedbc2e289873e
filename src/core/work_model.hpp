#pragma once
// The pipeline work model of semantics.md §1: P stages, V chunks per stage, M microbatches,
// chunk placement, split or whole backward, and the dependencies between tasks.
#include <array>
#include <string>
#include <vector>

#include "core/fast_divisor.hpp"
#include "core/task.hpp"

namespace rrfp {

enum class Placement { Loop, VShape };

std::string to_string(Placement p);
Placement parse_placement(const std::string& s);  // throws InputError

struct PipelineConfig {
  int pp = 4;            // P: pipeline stages
  int vpp = 1;           // V: model chunks per stage
  int microbatches = 8;  // M
  Placement placement = Placement::Loop;
  bool split_backward = false;  // B = input gradient only, W = weight gradient
  // Each chunk's forwards run in microbatch order: F(c, mb) also waits for F(c, mb - 1). For
  // chunks whose forward updates state (batch norm's running statistics), which a plain loop
  // updates microbatch by microbatch; other orders would leave other bits.
  bool ordered_forwards = false;
};

// The most chunk-microbatches (P x V x M) a step may have: flat task indices are int, and this
// keeps them well inside that range.
constexpr long long kMaxChunkMicrobatches = 50'000'000;
// pp x vpp x microbatches in a double, exact up to 2^53 and never wrapping: in 64-bit integers
// 2^22 x 2^21 x 2^21 wrapped to 0, passed the check above and divided by zero (SIGFPE).
inline double chunk_microbatches(int pp, int vpp, int microbatches) {
  return static_cast<double>(pp) * vpp * microbatches;
}

// Throws InputError naming the offending field.
void validate(const PipelineConfig& cfg);

// The tasks of one step of shape `c` over `tp` ranks, in a double: a shape too large for a
// WorkModel is estimated (and refused) before one is built.
inline double tasks_of(const PipelineConfig& c, int tp) {
  return static_cast<double>(c.pp) * c.vpp * c.microbatches * (c.split_backward ? 3 : 2) * tp;
}

// A dependency of a task; `cross_stage` says whether it travels as a message. `order`: an
// ordering edge of PipelineConfig::ordered_forwards, on one stage, carrying nothing.
struct Dep {
  TaskId task;
  bool cross_stage = false;
  bool order = false;
};
// A task's dependencies or consumers: at most two of each that carry data, and one ordering
// edge (a forward's next forward).
using Deps = std::array<Dep, 3>;

// Dense, allocation-free view of the task graph. Tasks are indexed globally by
// index(t) = ((kind * C) + chunk) * M + mb, so per-task state lives in flat vectors.
class WorkModel {
 public:
  explicit WorkModel(const PipelineConfig& cfg);

  const PipelineConfig& config() const { return cfg_; }
  int pp() const { return cfg_.pp; }
  int vpp() const { return cfg_.vpp; }
  int microbatches() const { return cfg_.microbatches; }
  int chunks() const { return chunks_; }
  bool split() const { return cfg_.split_backward; }
  int num_kinds() const { return cfg_.split_backward ? 3 : 2; }
  int num_tasks() const { return num_kinds() * chunks_ * cfg_.microbatches; }
  int tasks_per_stage() const { return num_kinds() * cfg_.vpp * cfg_.microbatches; }

  int stage_of(int chunk) const { return stage_of_chunk_[chunk]; }
  int stage_of(const TaskId& t) const { return stage_of_chunk_[t.chunk]; }
  // Position of a chunk among its stage's chunks, in model order (0 .. V-1).
  int local_chunk(int chunk) const { return local_chunk_[chunk]; }
  int chunk_at(int stage, int local) const { return stage_chunks_[stage][local]; }
  // Dense index of a task among its stage's (kind, local chunk, mb) slots, 0 .. local_slots()-1:
  // per-rank state of a stage lives in flat vectors of this size.
  int local_index(const TaskId& t) const {
    return (static_cast<int>(t.kind) * cfg_.vpp + local_chunk_[t.chunk]) * cfg_.microbatches + t.mb;
  }
  // W's slots come last, so without a split backward they are left out.
  int local_slots() const { return num_kinds() * cfg_.vpp * cfg_.microbatches; }
  const std::vector<int>& chunks_of(int stage) const { return stage_chunks_[stage]; }

  int index(const TaskId& t) const {
    return (static_cast<int>(t.kind) * chunks_ + t.chunk) * cfg_.microbatches + t.mb;
  }
  TaskId task(int index) const {  // inline: the simulator converts on every event
    const int q = by_mbs_.divide(index);
    const int kind = by_chunks_.divide(q);
    return TaskId{static_cast<Kind>(kind), q - kind * chunks_, index - q * cfg_.microbatches};
  }
  bool valid(const TaskId& t) const {  // inline: checked on every decision
    return static_cast<unsigned>(t.chunk) < static_cast<unsigned>(chunks_) &&
           static_cast<unsigned>(t.mb) < static_cast<unsigned>(cfg_.microbatches) &&
           (t.kind != Kind::W || cfg_.split_backward);
  }

  // Inputs a task waits for (at most two). Chunk 0's F waits for nothing (the data is local)
  // but, with ordered forwards, the forward before it.
  int deps(const TaskId& t, Deps& out) const {
    int n = 0;
    const int here = stage_of(t.chunk);
    auto add = [&](Kind k, int c) { out[n++] = Dep{{k, c, t.mb}, stage_of(c) != here}; };
    switch (t.kind) {
      case Kind::F:
        if (t.chunk > 0) add(Kind::F, t.chunk - 1);
        if (cfg_.ordered_forwards && t.mb > 0)
          out[n++] = Dep{{Kind::F, t.chunk, t.mb - 1}, false, true};
        break;
      case Kind::B:
        add(Kind::F, t.chunk);
        if (t.chunk + 1 < chunks_) add(Kind::B, t.chunk + 1);
        break;
      case Kind::W:
        add(Kind::B, t.chunk);
        break;
    }
    return n;
  }
  // Tasks that consume this task's output (at most two), and with ordered forwards the
  // forward after it. Inline: once per task ended.
  int consumers(const TaskId& t, Deps& out) const {
    int n = 0;
    const int here = stage_of(t.chunk);
    auto add = [&](Kind k, int c) { out[n++] = Dep{{k, c, t.mb}, stage_of(c) != here}; };
    switch (t.kind) {
      case Kind::F:
        if (t.chunk + 1 < chunks_) add(Kind::F, t.chunk + 1);
        add(Kind::B, t.chunk);
        if (cfg_.ordered_forwards && t.mb + 1 < cfg_.microbatches)
          out[n++] = Dep{{Kind::F, t.chunk, t.mb + 1}, false, true};
        break;
      case Kind::B:
        if (t.chunk > 0) add(Kind::B, t.chunk - 1);
        if (cfg_.split_backward) add(Kind::W, t.chunk);
        break;
      case Kind::W:
        break;
    }
    return n;
  }
  // Whether the task waits for a message from another stage (its same-kind predecessor).
  bool has_remote_input(const TaskId& t) const {
    const int c = t.kind == Kind::F ? t.chunk - 1 : t.chunk + 1;
    return t.kind != Kind::W && c >= 0 && c < chunks_ && stage_of(c) != stage_of(t.chunk);
  }

  // Every task of one stage in a canonical order (kind, local chunk, mb).
  std::vector<TaskId> stage_tasks(int stage) const;

 private:
  PipelineConfig cfg_;
  int chunks_;
  std::vector<int> stage_of_chunk_;
  std::vector<int> local_chunk_;
  std::vector<std::vector<int>> stage_chunks_;
  FastDivisor by_mbs_, by_chunks_;
};

}  // namespace rrfp
