#include "emulate/jitter.hpp"

#include <algorithm>

#include "core/clock.hpp"
#include "core/error.hpp"
#include "sim/rng.hpp"

namespace rrfp {

namespace {

class Jittered final : public StageProgram {
 public:
  Jittered(std::unique_ptr<StageProgram> in, JitterLevel j, int pp, std::uint64_t seed)
      : in_(std::move(in)), j_(j), pp_(pp), seed_(seed) {}
  void begin_step(int s) override { in_->begin_step(s); }
  void end_step(int s) override { in_->end_step(s); }
  Payload forward(TaskContext& c, int chunk, int mb, Payload p) override {
    const std::int64_t t0 = now_ns();
    Payload out = in_->forward(c, chunk, mb, std::move(p));
    stall(c, t0);
    return out;
  }
  Payload backward(TaskContext& c, int chunk, int mb, Payload p) override {
    const std::int64_t t0 = now_ns();
    Payload out = in_->backward(c, chunk, mb, std::move(p));
    stall(c, t0);
    return out;
  }
  // The paper sleeps on F and B only: a split backward's W is not disturbed, so a run with W
  // split off sees the same stalls, on the same microbatches, as one without.
  void weight_grad(TaskContext& c, int chunk, int mb) override { in_->weight_grad(c, chunk, mb); }
  std::optional<std::size_t> input_bytes(const TaskId& t) const override {
    return in_->input_bytes(t);
  }
  std::optional<std::int64_t> microbatch_size(int mb) const override {
    return in_->microbatch_size(mb);
  }
  std::string waiting_for() const override { return in_->waiting_for(); }
  bool evaluating() const override { return in_->evaluating(); }

 private:
  void stall(const TaskContext& c, std::int64_t t0) const {
    // An evaluation pass is not disturbed: its backward tasks do nothing, and each drew a stall
    // sized by the floor (40 validation batches took 6.5 s more under J3).
    if (in_->evaluating()) return;
    const TaskId& t = c.task();
    const std::uint64_t key = (static_cast<std::uint64_t>(t.kind) << 40) ^
                              (static_cast<std::uint64_t>(t.chunk) << 20) ^
                              static_cast<std::uint64_t>(t.mb);
    // Keyed by the chunk's stage under the loop placement (its stage itself at V = 1), not by
    // the stage running it: a V-shape run (ZB-V) drew other stalls than a loop run of the same
    // seed, an unpaired comparison.
    const std::uint64_t where =
        static_cast<std::uint64_t>(c.step()) * 4096 + static_cast<std::uint64_t>(t.chunk % pp_);
    if (unit_open(hash_keys(seed_, 91, key, where)) >= j_.p) return;
    const double d_us = static_cast<double>(now_ns() - t0) / 1e3;
    const double u = unit_open(hash_keys(seed_, 92, key, where));
    const double extra_us = j_.alpha * std::max(j_.floor_us, d_us) * (0.5 + u);
    sleep_until_ns(now_ns() + static_cast<std::int64_t>(extra_us * 1e3));
  }
  std::unique_ptr<StageProgram> in_;
  JitterLevel j_;
  int pp_;
  std::uint64_t seed_;
};

}  // namespace

std::unique_ptr<StageProgram> with_jitter(std::unique_ptr<StageProgram> inner, JitterLevel level,
                                          int pp, std::uint64_t seed) {
  if (pp < 1) throw InputError("with_jitter: pp must be at least 1, got " + std::to_string(pp));
  return std::make_unique<Jittered>(std::move(inner), level, pp, seed);
}

}  // namespace rrfp
