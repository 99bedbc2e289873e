#include "train/image_text.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "sim/rng.hpp"

namespace rrfp::train {

namespace {

const char* const kNames[8] = {"stripes", "dots", "checks", "waves",
                               "rings",   "grid", "zigzag", "blank"};

// Pixel (i, j) of pattern k, in [0, 1].
float pattern(int k, int i, int j) {
  switch (k) {
    case 0:
      return i % 2;
    case 1:
      return (i % 3 == 1 && j % 3 == 1) ? 1.f : 0.f;
    case 2:
      return (i / 2 + j / 2) % 2;
    case 3:
      return 0.5f + 0.5f * std::sin(i + 0.8f * j);
    case 4:
      return std::abs(std::hypot(i - 3.5f, j - 3.5f) - 2.5f) < 0.8f ? 1.f : 0.f;
    case 5:
      return (i % 4 == 0 || j % 4 == 0) ? 1.f : 0.f;
    case 6:
      return (i + (j % 4 < 2 ? j % 4 : 3 - j % 4)) % 4 == 0 ? 1.f : 0.f;
    default:
      return 0.f;
  }
}

}  // namespace

ImageText::ImageText(int max_images) : max_images_(max_images) {}

std::int64_t ImageText::longest_sample(int max_images) {
  std::size_t name = 0;
  for (const char* n : kNames)
    name = std::max(name, std::strlen(n));
  // Each image: its patch tokens and the caption "a <name>. "; the inputs are the text less
  // its last byte. No image: "nothing. ".
  const std::int64_t per_image = kPatches + static_cast<std::int64_t>(name) + 4;
  return std::max<std::int64_t>(8, static_cast<std::int64_t>(max_images) * per_image - 1);
}

std::string ImageText::describe() const {
  return "synthetic image-text, 0.." + std::to_string(max_images_) + " images per sample";
}

StepBatch ImageText::batch(std::uint64_t seed, std::int64_t index, int microbatches,
                           const WindowOptions&, bool validation) const {
  std::mt19937_64 rng(hash_keys(seed, validation ? 4 : 3, static_cast<std::uint64_t>(index)));
  std::vector<double> w;
  for (int n = 0; n <= max_images_; ++n)
    w.push_back(1.0 / std::pow(n + 1.0, 1.5));
  std::discrete_distribution<int> count(w.begin(), w.end());
  std::uniform_int_distribution<int> cls(0, 7);
  std::normal_distribution<float> noise(0.f, 0.1f);
  StepBatch b;
  for (int mb = 0; mb < microbatches; ++mb) {
    const int n = count(rng);
    auto img = torch::empty({n, kPatches, kPatchDim});
    auto* px = img.data_ptr<float>();
    std::string text;
    for (int k = 0; k < n; ++k) {
      const int c = cls(rng);
      for (int i = 0; i < 8; ++i)
        for (int j = 0; j < 8; ++j) {
          const int patch = (i / 4) * 2 + j / 4, at = (i % 4) * 4 + j % 4;
          px[(k * kPatches + patch) * kPatchDim + at] = pattern(c, i, j) + noise(rng);
        }
      text += std::string("a ") + kNames[c] + ". ";
    }
    if (n == 0) text = "nothing. ";
    const auto len = static_cast<std::int64_t>(text.size()) - 1;
    auto tokens = torch::empty({len}, torch::kInt64);
    auto targets = torch::full({n * kPatches + len}, -100, torch::kInt64);
    for (std::int64_t i = 0; i < len; ++i) {
      tokens[i] = static_cast<unsigned char>(text[i]);
      targets[n * kPatches + i] = static_cast<unsigned char>(text[i + 1]);
    }
    b.tokens.push_back(tokens);
    b.targets.push_back(targets);
    b.images.push_back(img);
  }
  return b;
}

double ImageText::unigram_entropy() const {
  ByteHistogram h;
  for (int i = 0; i < 64; ++i) {
    const StepBatch b = batch(12345, i, 8, {}, false);
    // The bytes the loss predicts: each caption's targets (its inputs would count the first
    // byte, never predicted, instead of the last).
    for (const auto& t : b.targets)
      for (std::int64_t j = 0; j < t.size(0); ++j)
        if (const auto byte = t[j].item<std::int64_t>(); byte >= 0)
          h.add(static_cast<unsigned char>(byte));
  }
  return h.entropy();
}

}  // namespace rrfp::train
