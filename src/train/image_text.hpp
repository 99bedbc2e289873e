#pragma once
// A synthetic image-text task whose captions are a deterministic function of the images, so a
// model that reads its image tokens can drive the loss down. Each sample holds 0..max_images
// images (heavy-tailed: fewer is likelier), each an 8x8 picture of one of 8 patterns plus
// noise, cut into 4 patches of 4x4; the text is one short caption per image ("a checks. ") or
// "nothing. ". The loss counts text positions only.
#include "train/data.hpp"

namespace rrfp::train {

class ImageText final : public DataSource {
 public:
  static constexpr int kPatches = 4, kPatchDim = 16;
  explicit ImageText(int max_images = 4);
  // The longest sequence a sample with up to `max_images` images can have, in tokens (patch
  // tokens and caption bytes): what the model's max_seq must hold.
  static std::int64_t longest_sample(int max_images);
  StepBatch batch(std::uint64_t seed, std::int64_t index, int microbatches, const WindowOptions& w,
                  bool validation) const override;
  double unigram_entropy() const override;
  std::string describe() const override;

 private:
  int max_images_;
};

}  // namespace rrfp::train
