#include "core/work_model.hpp"

#include "core/error.hpp"
#include "core/format.hpp"

namespace rrfp {

std::string to_string(Placement p) {
  return p == Placement::Loop ? "loop" : "vshape";
}

Placement parse_placement(const std::string& s) {
  if (s == "loop") return Placement::Loop;
  if (s == "vshape") return Placement::VShape;
  throw InputError("`placement`: unknown placement '" + s + "' (expected loop or vshape)");
}

void validate(const PipelineConfig& cfg) {
  if (cfg.pp < 1) throw InputError("`pp`: must be at least 1, got " + std::to_string(cfg.pp));
  if (cfg.vpp < 1) throw InputError("`vpp`: must be at least 1, got " + std::to_string(cfg.vpp));
  if (cfg.microbatches < 1)
    throw InputError("`microbatches`: must be at least 1, got " + std::to_string(cfg.microbatches));
  if (const double n = chunk_microbatches(cfg.pp, cfg.vpp, cfg.microbatches);
      n > kMaxChunkMicrobatches)
    throw InputError(
        "`pp` x `vpp` x `microbatches`: must be at most 50 million "
        "chunk-microbatches, got " +
        std::to_string(cfg.pp) + " x " + std::to_string(cfg.vpp) + " x " +
        std::to_string(cfg.microbatches) + " = " + fmt("%.16g", n));
  if (cfg.placement == Placement::VShape && cfg.vpp != 2)
    throw InputError("`placement` vshape: needs `vpp` 2, got `vpp` " + std::to_string(cfg.vpp));
}

// Validated before the product is taken: pp = vpp = 65536 overflowed an int first.
WorkModel::WorkModel(const PipelineConfig& cfg)
    : cfg_((validate(cfg), cfg)), chunks_(cfg.pp * cfg.vpp) {
  by_mbs_ = FastDivisor(cfg_.microbatches);
  by_chunks_ = FastDivisor(chunks_);
  stage_of_chunk_.resize(chunks_);
  local_chunk_.resize(chunks_);
  stage_chunks_.assign(cfg_.pp, {});
  const int p = cfg_.pp;
  for (int c = 0; c < chunks_; ++c) {
    int s = cfg_.placement == Placement::Loop ? c % p : (c < p ? c : 2 * p - 1 - c);
    stage_of_chunk_[c] = s;
    local_chunk_[c] = static_cast<int>(stage_chunks_[s].size());
    stage_chunks_[s].push_back(c);
  }
}

std::vector<TaskId> WorkModel::stage_tasks(int stage) const {
  std::vector<TaskId> out;
  out.reserve(tasks_per_stage());
  for (int k = 0; k < num_kinds(); ++k)
    for (int c : stage_chunks_[stage])
      for (int m = 0; m < cfg_.microbatches; ++m)
        out.push_back({static_cast<Kind>(k), c, m});
  return out;
}

}  // namespace rrfp
