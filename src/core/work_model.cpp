#include "core/work_model.hpp"

#include "core/error.hpp"

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
  if (static_cast<long long>(cfg.pp) * cfg.vpp * cfg.microbatches > kMaxChunkMicrobatches)
    throw InputError("`pp` x `vpp` x `microbatches`: more than 50 million chunk-microbatches");
  if (cfg.placement == Placement::VShape && cfg.vpp != 2)
    throw InputError("`placement` vshape: needs `vpp` 2, got `vpp` " + std::to_string(cfg.vpp));
}

WorkModel::WorkModel(const PipelineConfig& cfg) : cfg_(cfg), chunks_(cfg.pp * cfg.vpp) {
  validate(cfg_);
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

bool WorkModel::valid(const TaskId& t) const {
  return t.chunk >= 0 && t.chunk < chunks_ && t.mb >= 0 && t.mb < cfg_.microbatches &&
         (t.kind != Kind::W || cfg_.split_backward);
}

int WorkModel::deps(const TaskId& t, std::array<Dep, 2>& out) const {
  int n = 0;
  auto add = [&](TaskId d) { out[n++] = Dep{d, stage_of(d) != stage_of(t)}; };
  switch (t.kind) {
    case Kind::F:
      if (t.chunk > 0) add({Kind::F, t.chunk - 1, t.mb});
      break;
    case Kind::B:
      add({Kind::F, t.chunk, t.mb});
      if (t.chunk + 1 < chunks_) add({Kind::B, t.chunk + 1, t.mb});
      break;
    case Kind::W:
      add({Kind::B, t.chunk, t.mb});
      break;
  }
  return n;
}

int WorkModel::consumers(const TaskId& t, std::array<Dep, 2>& out) const {
  int n = 0;
  auto add = [&](TaskId d) { out[n++] = Dep{d, stage_of(d) != stage_of(t)}; };
  switch (t.kind) {
    case Kind::F:
      if (t.chunk + 1 < chunks_) add({Kind::F, t.chunk + 1, t.mb});
      add({Kind::B, t.chunk, t.mb});
      break;
    case Kind::B:
      if (t.chunk > 0) add({Kind::B, t.chunk - 1, t.mb});
      if (cfg_.split_backward) add({Kind::W, t.chunk, t.mb});
      break;
    case Kind::W:
      break;
  }
  return n;
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
