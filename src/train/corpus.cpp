#include "train/corpus.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string_view>

#include "core/error.hpp"
#include "core/format.hpp"
#include "core/input_file.hpp"
#include "sim/rng.hpp"

namespace rrfp::train {

namespace fs = std::filesystem;

namespace {

// FNV-1a, continued from `h` over `bytes`.
std::uint64_t fnv1a(std::uint64_t h, std::string_view bytes) {
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return h;
}

}  // namespace

Corpus::Corpus(const std::string& dir, int max_len) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw InputError("`data`: '" + dir + "' is not a directory");
  std::vector<fs::path> files;
  std::uint64_t bytes = 0;
  // Regular files only (a device or FIFO among them is skipped, never opened), and no more
  // than the corpus may keep in memory, checked before anything is read.
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    std::error_code fe;
    if (!e.is_regular_file(fe)) continue;
    files.push_back(e.path());
    bytes += e.file_size(fe);
  }
  if (ec) throw InputError("`data`: cannot list '" + dir + "': " + ec.message());
  if (bytes > kMaxCorpusBytes)
    throw InputError("`data`: the " + std::to_string(files.size()) + " files in '" + dir +
                     "' hold " + format_bytes(bytes) + "; the corpus is kept in memory and may " +
                     "hold at most " + format_bytes(kMaxCorpusBytes));
  std::sort(files.begin(), files.end());
  hash_ = 1469598103934665603ULL;
  for (const auto& f : files) {
    Doc d{read_input_file(f.string(), InputKind{"data", kMaxCorpusBytes}), 0};
    d.split = d.text.size() * 9 / 10;
    // Both regions must hold at least one window of the longest length plus its target byte.
    if (d.split < static_cast<std::size_t>(max_len) + 1 ||
        d.text.size() - d.split < static_cast<std::size_t>(max_len) + 1)
      continue;
    // The name ends at its NUL, so no split of names and bytes hashes like another.
    const std::string name = f.filename().string();
    hash_ = fnv1a(fnv1a(hash_, std::string_view(name.c_str(), name.size() + 1)), d.text);
    total_ += d.text.size();
    docs_.push_back(std::move(d));
  }
  if (docs_.empty())
    throw InputError("`data`: '" + dir + "' holds no document of at least " +
                     std::to_string(10 * (max_len + 1)) + " bytes");
}

StepBatch Corpus::batch(std::uint64_t seed, std::int64_t index, int microbatches,
                        const WindowOptions& w, bool validation) const {
  std::mt19937_64 rng(hash_keys(seed, validation ? 2 : 1, static_cast<std::uint64_t>(index)));
  std::vector<double> weights;
  for (const Doc& d : docs_)
    weights.push_back(static_cast<double>(validation ? d.text.size() - d.split : d.split));
  std::discrete_distribution<std::size_t> pick_doc(weights.begin(), weights.end());
  std::uniform_int_distribution<int> pick_len(w.min_len, w.max_len);
  StepBatch b;
  for (int mb = 0; mb < microbatches; ++mb) {
    const Doc& d = docs_[pick_doc(rng)];
    const int len = pick_len(rng);
    const std::size_t lo = validation ? d.split : 0;
    const std::size_t hi = (validation ? d.text.size() : d.split) - len - 1;
    const std::size_t at = std::uniform_int_distribution<std::size_t>(lo, hi)(rng);
    auto window = torch::empty({len + 1}, torch::kInt64);
    auto* p = window.data_ptr<int64_t>();
    for (int i = 0; i <= len; ++i)
      p[i] = static_cast<unsigned char>(d.text[at + i]);
    b.tokens.push_back(window.narrow(0, 0, len).clone());
    b.targets.push_back(window.narrow(0, 1, len).clone());
  }
  return b;
}

std::string Corpus::describe() const {
  return std::to_string(docs_.size()) + (docs_.size() == 1 ? " document, " : " documents, ") +
         std::to_string(total_) + " bytes";
}

std::string Corpus::contents() const {
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(hash_));
  return describe() + ", hash " + hex;
}

double Corpus::unigram_entropy() const {
  ByteHistogram h;
  for (const Doc& d : docs_)
    for (std::size_t i = 0; i < d.split; ++i)
      h.add(static_cast<unsigned char>(d.text[i]));
  return h.entropy();
}

}  // namespace rrfp::train
