#pragma once
// What the training tests share: a small model and short run, and a program wrapper that
// injects delays.
#include <chrono>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <thread>

#include "core/error.hpp"
#include "runtime/program.hpp"
#include "sim/rng.hpp"
#include "train/trainer.hpp"

namespace rrfp::train {

// What a resume from `path` under `o` refuses (its InputError's words), or "accepted".
inline std::string refusal(const std::string& path, const TrainOptions& o) {
  Trainer t(o);
  try {
    t.resume(path);
  } catch (const InputError& e) {
    return e.what();
  }
  return "accepted";
}

// A file's bytes (empty where it cannot be read).
inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Same shape, dtype and bytes (host tensors).
inline bool bitwise_equal(const torch::Tensor& a, const torch::Tensor& b) {
  return a.sizes() == b.sizes() && a.dtype() == b.dtype() &&
         std::memcmp(a.data_ptr(), b.data_ptr(), a.numel() * a.element_size()) == 0;
}

// A 4-head GPT of width 32 for 3 steps, ready 1F1B. The learning rate is small and AdamW's eps
// large enough that no update depends on the sign of a gradient that rounds near zero, so TP
// and DP runs stay within 1e-5 of a plain run (see test_train_tp.cpp).
inline TrainOptions small_run(int pp, int microbatches, int layers, std::uint64_t model_seed) {
  TrainOptions o;
  o.model.d_model = 32;
  o.model.heads = 4;
  o.model.layers = layers;
  o.model.max_seq = 64;
  o.model.seed = model_seed;
  o.pipe.pp = pp;
  o.pipe.microbatches = microbatches;
  o.hint = "1f1b";
  o.runtime.arbiter.policy = Policy::Ready;
  o.steps = 3;
  o.opt.warmup = 1;
  o.opt.lr = 1e-3;
  o.opt.eps = 1e-6;
  o.opt.clip = 0.5;
  o.window = {8, 48};
  o.runtime.timeout_ms = 30'000;
  return o;
}

// Sleeps a random 0..400 us before each task: a different interleaving per seed.
// `key` picks the stream (the stage; tests of TP add 100 * tp rank). Optionally a fixed sleep
// before every F (`before_f_us`) and after every B (`after_b_us`), which holds the B's output
// back: what makes the ranks of a group see arrivals in different orders.
class Delayed final : public StageProgram {
 public:
  Delayed(std::unique_ptr<StageProgram> in, int key, std::uint64_t seed, int before_f_us = 0,
          int after_b_us = 0)
      : in_(std::move(in)),
        stage_(key),
        seed_(seed),
        before_f_us_(before_f_us),
        after_b_us_(after_b_us) {}
  void begin_step(int s) override { in_->begin_step(s); }
  void end_step(int s) override { in_->end_step(s); }
  Payload forward(TaskContext& c, int chunk, int mb, Payload p) override {
    pause(0, chunk, mb, c.step());
    std::this_thread::sleep_for(std::chrono::microseconds(before_f_us_));
    return in_->forward(c, chunk, mb, std::move(p));
  }
  Payload backward(TaskContext& c, int chunk, int mb, Payload p) override {
    pause(1, chunk, mb, c.step());
    Payload out = in_->backward(c, chunk, mb, std::move(p));
    std::this_thread::sleep_for(std::chrono::microseconds(after_b_us_));
    return out;
  }
  void weight_grad(TaskContext& c, int chunk, int mb) override {
    pause(2, chunk, mb, c.step());
    in_->weight_grad(c, chunk, mb);
  }
  std::optional<std::size_t> input_bytes(const TaskId& t) const override {
    return in_->input_bytes(t);
  }

 private:
  void pause(int kind, int chunk, int mb, int step) const {
    const auto us =
        hash_keys(seed_, 77, kind * 100000 + chunk * 1000 + mb, step * 16 + stage_) % 400;
    std::this_thread::sleep_for(std::chrono::microseconds(us));
  }
  std::unique_ptr<StageProgram> in_;
  int stage_;
  std::uint64_t seed_;
  int before_f_us_, after_b_us_;
};

}  // namespace rrfp::train
