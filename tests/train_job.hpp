#pragma once
// Runs one Trainer per rank of a Job layout and collects what the tests compare.
#include <cstring>
#include <functional>

#include "dist/local_job.hpp"
#include "rank_threads.hpp"
#include "train/trainer.hpp"

namespace rrfp::train {

// FNV-1a over the bits of every parameter this trainer holds, in order.
inline std::uint64_t param_hash(const Trainer& t) {
  std::uint64_t h = 1469598103934665603ULL;
  for (const auto& p : t.parameters()) {
    const auto c = p.detach().contiguous();
    const auto* b = static_cast<const unsigned char*>(c.data_ptr());
    for (std::int64_t i = 0; i < c.numel() * c.element_size(); ++i)
      h = (h ^ b[i]) * 1099511628211ULL;
  }
  return h;
}

struct RankOutcome {
  std::vector<double> losses;
  std::uint64_t hash = 0;
  std::unique_ptr<Trainer> trainer;
};

// Trains `steps` steps on every rank of an in-process job of `world` threads.
inline std::vector<RankOutcome> train_local_job(int world, int steps,
                                                const std::function<TrainOptions()>& make) {
  auto jobs = make_local_jobs(world);
  std::vector<RankOutcome> out(world);
  test::on_every_rank(world, [&](int r) {
    TrainOptions o = make();
    o.job = jobs[r].get();
    out[r].trainer = std::make_unique<Trainer>(o);
    for (int s = 0; s < steps; ++s)
      out[r].losses.push_back(out[r].trainer->step().loss);
    out[r].hash = param_hash(*out[r].trainer);
  });
  return out;
}

}  // namespace rrfp::train
