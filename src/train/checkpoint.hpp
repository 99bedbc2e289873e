#pragma once
// Checkpoints of a training run: the step, every parameter and the AdamW state, read by name,
// so any pipeline layout of the same TP size resumes from it. At TP=1 the tensors are in the
// model's global order, and the bytes do not depend on the layout they were written from; at
// TP > 1 the shards follow the chunks, then the TP ranks within each, so another layout writes
// the same tensors in another order.
//
// Format (version 1): "RRFPCKPT", u32 version, u64 header length, a JSON header (model config,
// step, and each tensor's name and shape), the tensors' raw float32 bytes in header order, and
// a u64 FNV-1a checksum of everything before it. Written to PATH.tmp, flushed with fsync and
// renamed over PATH, so a crash mid-save leaves the previous checkpoint intact.
#include <torch/torch.h>

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "train/model.hpp"

namespace rrfp::train {

struct CheckpointState {
  GptConfig model;
  int step = 0;
  std::vector<std::string> names;
  std::vector<torch::Tensor> params, exp_avg, exp_avg_sq;
  // The run's options beside the model that decide its numbers (seed, data, schedule), by
  // option name: a resume compares them with its own.
  nlohmann::json run = nlohmann::json::object();
  // Not written: `run`'s data_contents as an earlier build recorded it, which a checkpoint of
  // that build holds (Corpus::earlier_contents).
  std::string earlier_data_contents;
  // Its last step's training loss, as loss.csv logged it (absent in older checkpoints): a
  // resume checks that the log it continues is this run's.
  std::optional<double> loss;
  // Loaded: the options of the run that wrote it, as written (empty in older checkpoints): a
  // resume reads its `steps` and `eval_every`, by which it tells whether the checkpoint's step
  // had a validation due in that run.
  nlohmann::json run_written = nlohmann::json::object();
  // Loaded: the file's trailing checksum, by which the processes of a job, each reading its own
  // copy, check that they resume from one checkpoint.
  std::uint64_t checksum = 0;
};

void save_checkpoint(const std::string& path, const CheckpointState& s);
// FNV-1a of a checkpoint's bytes before its trailing checksum (tests re-seal edited ones).
std::uint64_t checkpoint_checksum(std::string_view bytes);
// Throws InputError naming the file and what is wrong (not a checkpoint, another version, a
// checksum mismatch, truncated, or a model that does not match `expect`'s config and names and
// shapes); on success copies the tensors into `expect`'s tensors and sets its step.
// Returns, for each option of `expect.run` that the checkpoint's run had set otherwise, a line
// naming it ("`seed` is 2; the checkpoint's run had 1").
std::vector<std::string> load_checkpoint(const std::string& path, CheckpointState& expect);
// The same for a process holding part of the model (a multi-process run): `expect` names only
// its own tensors, each found in the checkpoint by name, whatever layout wrote it; `model`
// names every tensor of the whole model, and one in the file that it lacks is refused as
// load_checkpoint refuses it. A file over `max_bytes` (the whole model's tensors; the header
// comes on top) is refused unread.
std::vector<std::string> load_checkpoint_part(const std::string& path, CheckpointState& expect,
                                              std::uint64_t max_bytes,
                                              const std::vector<std::string>& model);

}  // namespace rrfp::train
