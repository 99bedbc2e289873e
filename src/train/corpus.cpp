#include "train/corpus.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <random>
#include <set>
#include <string_view>

#include "core/error.hpp"
#include "core/fnv.hpp"
#include "core/format.hpp"
#include "core/input_file.hpp"
#include "sim/rng.hpp"

#include <sys/stat.h>

namespace rrfp::train {

namespace fs = std::filesystem;

namespace {

std::string count(std::size_t n, const char* what) {
  return std::to_string(n) + (*what ? std::string(" ") + what + (n == 1 ? "" : "s") : "");
}

// The shortest document whose two parts (90% trained, 10% held out) each hold a window of
// `max_len` bytes and its target byte: 10 * (max_len + 1), less what the split's rounding
// allows (641 bytes, not 650, at `max_len` 64).
std::size_t min_document_bytes(int max_len) {
  const auto need = static_cast<std::size_t>(max_len) + 1;
  auto fits = [need](std::size_t n) { return n * 9 / 10 >= need && n - n * 9 / 10 >= need; };
  std::size_t n = 10 * need;
  while (n > 1 && fits(n - 1))
    --n;
  return n;
}

struct Listing {
  std::vector<fs::path> files;                             // by name
  std::size_t duplicates = 0, subfolders = 0, others = 0;  // others: no file, no folder
  std::uint64_t bytes = 0;
};

// The regular files of `dir`, each file once: Debian's GPL, LGPL and GFDL are links to GPL-3,
// LGPL-3 and GFDL-1.3, which were read twice, weighed double and put 12.5% of the held-out
// windows in training. A name that is not a link wins; among the rest, the first by name.
// Devices and FIFOs are skipped, never opened; the bytes are counted before any is read.
Listing list_documents(const std::string& dir) {
  struct Entry {
    fs::path path;
    bool link;
    std::pair<dev_t, ino_t> id;
    std::uint64_t size;
  };
  std::vector<Entry> entries;
  Listing out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    std::error_code fe;
    struct stat st {};
    if (e.is_directory(fe)) {
      ++out.subfolders;
      continue;
    }
    if (!e.is_regular_file(fe) || ::stat(e.path().c_str(), &st) != 0) {
      ++out.others;  // a device, a FIFO, a socket, a broken link: never opened
      continue;
    }
    entries.push_back({e.path(),
                       e.is_symlink(fe),
                       {st.st_dev, st.st_ino},
                       static_cast<std::uint64_t>(st.st_size)});
  }
  if (ec) throw InputError("`data`: cannot list '" + dir + "': " + ec.message());
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return a.path < b.path; });
  std::set<std::pair<dev_t, ino_t>> seen;
  for (const bool links : {false, true})
    for (const Entry& e : entries) {
      if (e.link != links) continue;
      if (!seen.insert(e.id).second) {
        ++out.duplicates;
        continue;
      }
      out.files.push_back(e.path);
      out.bytes += e.size;
    }
  std::sort(out.files.begin(), out.files.end());
  return out;
}

}  // namespace

Corpus::Corpus(const std::string& dir, int max_len) : min_bytes_(min_document_bytes(max_len)) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))  // why it cannot be looked at, where that is the reason
    throw InputError("`data`: '" + dir + "' " +
                     (ec && ec != std::errc::no_such_file_or_directory
                          ? "cannot be looked at: " + ec.message()
                      : fs::is_symlink(fs::symlink_status(dir, ec))
                          ? "is a symbolic link to '" + fs::read_symlink(dir, ec).string() +
                                "', which is no directory"
                      : fs::exists(fs::symlink_status(dir, ec)) ? "is not a directory"
                                                                : "does not exist"));
  const Listing listed = list_documents(dir);
  duplicates_ = listed.duplicates;
  subfolders_ = listed.subfolders;
  others_ = listed.others;
  if (listed.bytes > kMaxCorpusBytes)
    throw InputError("`data`: the " + std::to_string(listed.files.size()) +
                     (listed.files.size() == 1 ? " file in '" + dir + "' holds "
                                               : " files in '" + dir + "' hold ") +
                     format_bytes(listed.bytes) + "; the corpus is kept in memory " +
                     "and may hold at most " + format_bytes(kMaxCorpusBytes));
  hash_ = earlier_hash_ = kFnv1aOffset;
  for (const auto& f : listed.files) {
    Doc d{read_input_file(f.string(), InputKind{"data", kMaxCorpusBytes}), 0};
    if (d.text.size() < min_bytes_) {
      ++short_docs_;
      short_bytes_ += d.text.size();
      continue;
    }
    d.split = d.text.size() * 9 / 10;
    // The name ends at its NUL and the text's length comes before the text, so no split of
    // names and bytes hashes like another: unterminated, a byte moved from one text's end to
    // the next name's start hashed alike (a changed corpus resumed without a word).
    const std::string name = f.filename().string();
    char length[8];
    for (int i = 0; i < 8; ++i)
      length[i] = static_cast<char>((d.text.size() >> (8 * i)) & 0xff);
    hash_ = fnv1a(hash_, std::string_view(name.c_str(), name.size() + 1));
    earlier_hash_ =
        fnv1a(fnv1a(earlier_hash_, std::string_view(name.c_str(), name.size() + 1)), d.text);
    hash_ = fnv1a(fnv1a(hash_, std::string_view(length, sizeof length)), d.text);
    total_ += d.text.size();
    docs_.push_back(std::move(d));
  }
  if (docs_.empty())
    throw InputError(
        "`data`: '" + dir + "' holds no document of at least " + std::to_string(min_bytes_) +
        " bytes (the 90% of each that trains and the " +
        "10% held out need `max_len` + 1 bytes each)" +
        (subfolders_ > 0 ? "; subfolders are not read (" + count(subfolders_, "") + " here)"
                         : std::string()) +
        // A folder of links whose files moved read as documents too short.
        (others_ > 0 ? "; " + std::to_string(others_) +
                           (others_ == 1 ? " entry is no file" : " entries are no files") +
                           " (devices, FIFOs, sockets, broken links)"
                     : std::string()));
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

std::string Corpus::kept() const {
  return count(docs_.size(), "document") + ", " + std::to_string(total_) + " bytes";
}

// What was left out, and why: 50 short files of a folder were 39% of its text, dropped
// without a word.
std::string Corpus::describe() const {
  std::string out = kept();
  if (short_docs_ > 0)
    out += "; skipped " + count(short_docs_, "document") + " of " + std::to_string(short_bytes_) +
           " bytes shorter than " + std::to_string(min_bytes_) + " bytes";
  if (duplicates_ > 0)
    out += "; skipped " + count(duplicates_, "link") + " to a file read under its own name";
  if (subfolders_ > 0) out += "; " + count(subfolders_, "subfolder") + " not read";
  if (others_ > 0)
    out += "; skipped " + std::to_string(others_) +
           (others_ == 1 ? " entry that is no file" : " entries that are no files") +
           " (devices, FIFOs, sockets, broken links)";
  return out;
}

namespace {

std::string hex64(std::uint64_t v) {
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(v));
  return hex;
}

}  // namespace

std::string Corpus::contents() const {
  return kept() + ", digest " + hex64(hash_);
}

std::string Corpus::earlier_contents() const {
  return kept() + ", hash " + hex64(earlier_hash_);
}

double Corpus::unigram_entropy() const {
  ByteHistogram h;
  for (const Doc& d : docs_)
    for (std::size_t i = 0; i < d.split; ++i)
      h.add(static_cast<unsigned char>(d.text[i]));
  return h.entropy();
}

}  // namespace rrfp::train
