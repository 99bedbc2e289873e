#pragma once
// The checkpoint of a multi-process run: every process of replica 0 packs the chunks it holds,
// rank 0 gathers the packs and writes one checkpoint of the whole model in its global order,
// the file a one-process run writes. So a checkpoint does not depend on the processes that
// wrote it, and any layout with the same tensor-parallel size resumes from it
// (load_checkpoint_part).
#include <string>
#include <vector>

#include "train/checkpoint.hpp"

namespace rrfp::train {

// One chunk's tensors on one TP rank, as a process holds them.
struct ChunkTensors {
  int chunk = 0, tp_rank = 0;
  std::vector<std::string> names;
  std::vector<torch::Tensor> params, exp_avg, exp_avg_sq;
};

// This process's chunks as bytes, for rank 0 to gather.
std::string pack_chunks(const std::vector<ChunkTensors>& chunks);

// Rank 0: every process's packs into `s` (whose model, step and run are set), in the model's
// global order: chunk, then TP rank. Throws Error when a (chunk, rank) is missing or twice.
void unpack_chunks(const std::vector<std::vector<std::byte>>& packs, int chunks, int tp,
                   CheckpointState& s);

}  // namespace rrfp::train
