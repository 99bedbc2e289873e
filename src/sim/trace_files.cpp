// The trace files read: each gzip member inflated, a folder's files in name order with digit runs
// compared as numbers, every file's parse costed before any is parsed (sim/trace_formats.hpp).
#include <zlib.h>

#include <algorithm>
#include <cctype>
#include <filesystem>

#include "core/error.hpp"
#include "core/format.hpp"
#include "core/input_file.hpp"
#include "core/json_input.hpp"
#include "core/memory.hpp"
#include "sim/trace_formats.hpp"
#include "sim/trace_import.hpp"

namespace rrfp::trace {

namespace {

// The most bytes one decompressed trace may hold: the replay's cap (core/input_file.hpp).
constexpr std::uint64_t kMaxTraceBytes = kReplayTrace.max_bytes;
constexpr size_t kMaxTraceFiles = 4096;

bool gzipped(const std::string& text) {
  return text.size() >= 2 && static_cast<unsigned char>(text[0]) == 0x1f &&
         static_cast<unsigned char>(text[1]) == 0x8b;
}

// Inflates every gzip member (`cat a.gz b.gz` and bgzip write several: the first alone was read,
// the rest dropped silently), refusing output past kMaxTraceBytes (a small file can expand a lot).
std::string gunzip(const std::string& in, const std::string& origin) {
  z_stream z{};
  if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK)
    throw InputError(origin + ": cannot start gzip decompression");
  std::string out;
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  z.avail_in = static_cast<uInt>(in.size());
  for (;;) {
    if (out.size() >= kMaxTraceBytes) {
      inflateEnd(&z);
      throw InputError(origin + ": decompresses to more than " +
                       std::to_string(kMaxTraceBytes >> 20) + " MiB (the replay's cap)");
    }
    const size_t at = out.size();
    out.resize(std::min<std::uint64_t>(kMaxTraceBytes, at + (1u << 20)));
    z.next_out = reinterpret_cast<Bytef*>(out.data() + at);
    z.avail_out = static_cast<uInt>(out.size() - at);
    const int rc = inflate(&z, Z_NO_FLUSH);
    out.resize(out.size() - z.avail_out);
    if (rc == Z_STREAM_END) {
      // Zero bytes after the last member are padding (block-padded copies), which gzip and
      // Python skip too.
      if (std::all_of(z.next_in, z.next_in + z.avail_in, [](Bytef b) { return b == 0; })) break;
      // Other bytes after a member that start no other were dropped without a word (the same
      // JSON uncompressed, with them, was refused).
      if (z.avail_in < 2 || z.next_in[0] != 0x1f || z.next_in[1] != 0x8b) {
        const std::size_t left = z.avail_in;
        inflateEnd(&z);
        throw InputError(origin + ": " + std::to_string(left) +
                         " byte(s) after the gzip stream that start no other gzip member");
      }
      inflateReset(&z);  // another member follows
      continue;
    }
    if (rc != Z_OK || (z.avail_in == 0 && z.avail_out != 0)) {
      inflateEnd(&z);
      throw InputError(origin + ": not a complete gzip stream (" +
                       (z.msg ? std::string(z.msg) : "truncated") + ")");
    }
  }
  inflateEnd(&z);
  return out;
}

// natural_less without its tie-break: <0, 0 or >0.
int natural_order(const std::string& a, const std::string& b) {
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (std::isdigit(static_cast<unsigned char>(a[i])) &&
        std::isdigit(static_cast<unsigned char>(b[j]))) {
      size_t ei = i, ej = j;
      while (ei < a.size() && std::isdigit(static_cast<unsigned char>(a[ei])))
        ++ei;
      while (ej < b.size() && std::isdigit(static_cast<unsigned char>(b[ej])))
        ++ej;
      const std::string_view x = std::string_view(a).substr(i, ei - i);
      const std::string_view y = std::string_view(b).substr(j, ej - j);
      const size_t zx = std::min(x.find_first_not_of('0'), x.size());
      const size_t zy = std::min(y.find_first_not_of('0'), y.size());
      if (x.size() - zx != y.size() - zy) return x.size() - zx < y.size() - zy ? -1 : 1;
      if (const int c = x.substr(zx).compare(y.substr(zy)); c != 0) return c;
      i = ei;
      j = ej;
    } else {
      if (a[i] != b[j])
        return static_cast<unsigned char>(a[i]) < static_cast<unsigned char>(b[j]) ? -1 : 1;
      ++i;
      ++j;
    }
  }
  const size_t ra = a.size() - i, rb = b.size() - j;
  return ra < rb ? -1 : ra > rb ? 1 : 0;
}

// Name order with digit runs compared as numbers: rank2 before rank10. Names alike but for
// leading zeros (r1, r01) fall back to byte order: equal, they kept the folder's listing order,
// which decides the steps a folder's traces number.
bool natural_less(const std::string& a, const std::string& b) {
  const int c = natural_order(a, b);
  return c != 0 ? c < 0 : a < b;
}

}  // namespace

std::vector<Doc> parse_docs(const std::vector<std::pair<std::string, std::string>>& files) {
  if (files.empty()) throw InputError("no trace files to read");
  // Every file's parse is costed before any is parsed: together they must fit (three files of
  // `{}` objects each under the size cap ended in an uncaught bad_alloc).
  std::vector<std::string> unzipped(files.size());
  std::vector<std::string_view> texts(files.size());
  // The decompressed texts are held until parsed: their running total counts as it grows (20
  // files of 240 KB, each 250 MB unzipped, took 5.4 GB before the parse was costed).
  double bytes = 0, unzipped_bytes = 0;
  for (size_t i = 0; i < files.size(); ++i) {
    const auto& [origin, text] = files[i];
    if (gzipped(text)) unzipped[i] = gunzip(text, origin);
    texts[i] = gzipped(text) ? std::string_view(unzipped[i]) : std::string_view(text);
    bytes += json_parse_bytes(texts[i], origin);
    unzipped_bytes += static_cast<double>(unzipped[i].size());
    if (files.size() == 1 || unzipped[i].empty()) continue;  // one file: the check below
    check_memory(bytes + unzipped_bytes,
                 origin + ": decompressing and parsing " + std::to_string(i + 1) + " of " +
                     std::to_string(files.size()) + " trace files",
                 "", "the traces' size (fewer files, events, or steps)");
  }
  const std::string what =
      files.size() == 1 ? files[0].first : std::to_string(files.size()) + " trace files";
  check_memory(bytes, what + ": parsing the trace", "",
               "the trace's size (fewer events, or steps)");
  std::vector<Doc> docs;
  for (size_t i = 0; i < files.size(); ++i) {
    docs.push_back({files[i].first, parse_scanned_json(texts[i], files[i].first)});
    std::string().swap(unzipped[i]);  // texts[i] is not read again
  }
  return docs;
}

std::vector<Doc> read_docs(const std::string& path, const char* option) {
  const std::string flag = std::string("`") + option + "`: ";
  std::vector<std::string> paths;
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    for (const auto& entry : std::filesystem::directory_iterator(path, ec)) {
      const std::string p = entry.path().string();
      if (!trace_file_name(p)) continue;
      if (paths.size() == kMaxTraceFiles)
        throw InputError(flag + path + " holds more than " + std::to_string(kMaxTraceFiles) +
                         " trace files");
      paths.push_back(p);
    }
    if (ec) throw InputError(flag + "cannot list " + path + ": " + ec.message());
    if (paths.empty()) throw InputError(flag + path + " holds no .json or .json.gz trace file");
    std::sort(paths.begin(), paths.end(), natural_less);
  } else {
    paths.push_back(path);
  }
  // Every file is held until all are parsed: their sizes together must fit before the first is
  // read (a folder of 12 files of 250 MB took 3 GB before any check). One file too: a 41 MB
  // trace read under a 60 MB `ulimit -v` ended in a bare "out of memory".
  double bytes = 0;
  for (const std::string& p : paths) {
    std::error_code size_ec;  // a file whose size is unknown is refused as it is read
    const std::uintmax_t n = std::filesystem::file_size(p, size_ec);
    if (!size_ec) bytes += static_cast<double>(n);
  }
  check_memory(bytes,
               paths.size() == 1
                   ? path + ": reading the trace"
                   : path + ": reading its " + std::to_string(paths.size()) + " trace files",
               "",
               paths.size() == 1 ? "the trace's size (fewer events, or steps)"
                                 : "the traces' size (fewer files, events, or steps)");
  std::vector<std::pair<std::string, std::string>> files;
  for (const std::string& p : paths)
    files.emplace_back(p, read_input_file(p, InputKind{option, kMaxTraceBytes, 0}));
  return parse_docs(files);
}

}  // namespace rrfp::trace

namespace rrfp {

std::string trace_file_bytes(const std::string& path, std::string text) {
  // A trace named t.json.gz was written as plain JSON: rrfp read it back (it looks at the
  // bytes), but gzip and Python's gzip.open refused it.
  if (!ends_with_ci(path, ".gz")) return text;
  z_stream z{};
  if (deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) !=
      Z_OK)
    throw Error("cannot start gzip compression");
  // In pieces zlib's 32-bit counts hold: a trace of 4 GiB or more, given whole, wrapped and was
  // cut to its first (size mod 4 GiB) bytes.
  constexpr std::size_t kPiece = std::size_t{1} << 30;
  std::string out;
  std::size_t at = 0;
  int rc = Z_OK;
  do {
    const std::size_t in = std::min(kPiece, text.size() - at);
    z.next_in = reinterpret_cast<Bytef*>(text.data() + at);
    z.avail_in = static_cast<uInt>(in);
    at += in;
    const int flush = at == text.size() ? Z_FINISH : Z_NO_FLUSH;
    do {
      const std::size_t had = out.size();
      out.resize(had + deflateBound(&z, static_cast<uLong>(z.avail_in)) + 64);
      z.next_out = reinterpret_cast<Bytef*>(out.data() + had);
      z.avail_out = static_cast<uInt>(out.size() - had);
      rc = deflate(&z, flush);
      out.resize(out.size() - z.avail_out);
    } while (rc == Z_OK && (z.avail_in > 0 || (flush == Z_FINISH)));
  } while (rc == Z_OK && at < text.size());
  deflateEnd(&z);
  if (rc != Z_STREAM_END) throw Error("gzip compression of a trace failed");
  return out;
}

}  // namespace rrfp
