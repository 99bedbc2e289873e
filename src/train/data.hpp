#pragma once
// Where a training run's batches come from: the byte corpus (text) or the synthetic image-text
// task. Batches are a pure function of (seed, index, split), so every stage, every run and a
// resumed run see the same data.
#include <array>
#include <cmath>
#include <cstdint>
#include <string>

#include "train/batch.hpp"
#include "train/options.hpp"

namespace rrfp::train {

// Counts bytes; entropy() is the loss, in nats, of predicting them by frequency alone.
class ByteHistogram {
 public:
  void add(unsigned char b) {
    ++count_[b];
    ++total_;
  }
  double entropy() const {
    double h = 0;
    for (double c : count_)
      if (c > 0) h -= c / total_ * std::log(c / total_);
    return h;
  }

 private:
  std::array<double, 256> count_{};
  double total_ = 0;
};

class DataSource {
 public:
  virtual ~DataSource() = default;
  virtual StepBatch batch(std::uint64_t seed, std::int64_t index, int microbatches,
                          const WindowOptions& w, bool validation) const = 0;
  // The loss of a model that predicts the text bytes' unigram distribution, in nats.
  virtual double unigram_entropy() const = 0;
  virtual std::string describe() const = 0;
  // What was read, for a resume to compare with the checkpoint's run: the same text under
  // another path spelling trains the same, a file rewritten in place does not. Empty for
  // synthetic data, which its options define.
  virtual std::string contents() const { return {}; }
  // The same as an earlier build recorded it, which a checkpoint of that build is compared
  // with (empty: no earlier record differs from the current one).
  virtual std::string earlier_contents() const { return {}; }
};

}  // namespace rrfp::train
