#pragma once
// A byte-level corpus: every regular file of a directory is a document (by default the
// licence texts every Debian machine has), each file once however many names link to it;
// subfolders are not read, and a document too short for a window in both its parts is skipped
// (the banner counts both). The first 90% of each document trains, the last 10%
// is held out. A batch draws, from a seeded stream, one window per microbatch at a random
// position of a random document (weighted by length), of a random length: microbatches hold
// genuinely different token counts and no padding.
#include <cstdint>
#include <string>
#include <vector>

#include "train/data.hpp"

namespace rrfp::train {

// The corpus is kept in memory: a directory holding more than this is refused up front.
inline constexpr std::uint64_t kMaxCorpusBytes = 1ull << 30;

class Corpus final : public DataSource {
 public:
  // Throws InputError naming the directory if it is missing, unreadable or holds no document
  // long enough for `max_len` + 1 bytes in both its trained and held-out parts.
  Corpus(const std::string& dir, int max_len);

  // Batch `index` of the training (or validation) stream for `seed`.
  StepBatch batch(std::uint64_t seed, std::int64_t index, int microbatches, const WindowOptions& w,
                  bool validation) const override;
  // Entropy of the training bytes' unigram distribution, in nats: the loss of a model that
  // ignores context. A trained model must go well below it.
  double unigram_entropy() const override;
  std::string describe() const override;
  // "N documents, B bytes, digest H": H is a 64-bit FNV-1a over each document read, in reading
  // order, of its name within the directory, its length and its bytes (an earlier build wrote
  // "hash H", without the lengths: earlier_contents(), which takes some changed corpora for
  // the same, but still tells a file rewritten in place at its length).
  std::string contents() const override;
  std::string earlier_contents() const override;
  std::size_t bytes() const { return total_; }
  std::size_t documents() const { return docs_.size(); }

 private:
  struct Doc {
    std::string text;
    std::size_t split;  // [0, split) trains, [split, size) is held out
  };
  std::vector<Doc> docs_;
  std::string kept() const;

  std::size_t total_ = 0;
  std::uint64_t hash_ = 0, earlier_hash_ = 0;
  std::size_t min_bytes_;  // the shortest document read
  std::size_t short_docs_ = 0, short_bytes_ = 0, duplicates_ = 0, subfolders_ = 0, others_ = 0;
};

}  // namespace rrfp::train
