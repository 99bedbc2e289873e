// What a hint file declares about itself, read as it streams past: the split (which picks the
// run's model before the hint is read) and the shape (which `schedule check` takes for each
// flag not given). One scanner for both, reading keys and values as the parsers do (JSON's
// escapes decoded, a text header's repeated field taking its last value).
#include <algorithm>
#include <cstdint>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.hpp"
#include "core/hint_io.hpp"
#include "core/input_file.hpp"
#include "core/work_model.hpp"

namespace rrfp {
namespace {

// Keys and values longer than this are no field a hint has; kept no longer. A raw JSON string
// is kept up to six times as long, the most its escapes can take for that many characters, and
// so is a number, whose digits past 64 can still make it a whole one.
constexpr std::size_t kLongest = 64;
constexpr std::size_t kLongestRaw = 6 * kLongest;
constexpr std::size_t kMostFields = 64;  // distinct keys: a hint has 8

void append_utf8(std::string& out, std::uint32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

// A JSON string's content with its escapes decoded ("v\u0070p" is "vpp" to the parser); an
// escape the parser refuses is kept as written (the parse then refuses the file).
std::string decode_json_string(std::string_view raw) {
  std::string out;
  for (std::size_t i = 0; i < raw.size() && out.size() < kLongest; ++i) {
    if (raw[i] != '\\' || i + 1 >= raw.size()) {
      out += raw[i];
      continue;
    }
    const char e = raw[++i];
    static constexpr std::string_view kFrom = "\"\\/bfnrt", kTo = "\"\\/\b\f\n\r\t";
    if (const auto k = kFrom.find(e); k != std::string_view::npos) {
      out += kTo[k];
    } else if (e == 'u' && i + 4 < raw.size()) {
      std::uint32_t c = 0;
      bool hex = true;
      for (std::size_t j = i + 1; j <= i + 4; ++j) {
        const char h = raw[j];
        const int v = h >= '0' && h <= '9'   ? h - '0'
                      : h >= 'a' && h <= 'f' ? h - 'a' + 10
                      : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                             : -1;
        hex = hex && v >= 0;
        c = c * 16 + static_cast<std::uint32_t>(v < 0 ? 0 : v);
      }
      if (!hex) {
        out += '\\';
        out += e;
        continue;
      }
      append_utf8(out, c);  // a surrogate half stays one: no key of a hint has one
      i += 4;
    } else {
      out += '\\';
      out += e;
    }
  }
  return out.substr(0, kLongest);
}

// The fields of a hint file, from its pieces in order: the file is scanned whole (its header
// need not come first: 64 KiB of comments, or a JSON "stages" before "split_backward", hid it)
// without being held, or until the field `enough` is read. JSON: the top-level members whose
// values are scalars; text: the first header line's key=value fields.
class FieldScan {
 public:
  explicit FieldScan(std::string_view enough) : enough_(enough) {}
  // Takes the next piece; false once every field wanted is known.
  bool take(std::string_view piece) {
    for (const char c : piece)
      if (!(format() == HintFormat::Json ? json_char(c) : text_char(c))) return false;
    return true;
  }
  // The answer, after the last piece.
  HintFields fields() {
    if (format() == HintFormat::Text && !done_) text_char('\n');  // a last line without its newline
    if (format() == HintFormat::Json && in_value_ && !value_string_)  // broke off after a number
      end_value(value_.size() > kLongestRaw ? std::string() : std::move(value_));
    return std::move(out_);
  }

 private:
  static bool blank(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

  // A repeated key takes its last value and is listed in `repeated` (both parsers refuse it).
  bool add(std::string key, std::string value, bool string) {
    const bool last = !enough_.empty() && key == enough_;
    for (HintField& f : out_.fields)
      if (f.key == key) {
        if (out_.repeated.size() < kMostFields &&  // bounded as the fields are
            std::find(out_.repeated.begin(), out_.repeated.end(), key) == out_.repeated.end())
          out_.repeated.push_back(key);
        f.value = std::move(value), f.string = string;
        return !last;
      }
    if (out_.fields.size() < kMostFields)
      out_.fields.push_back({std::move(key), std::move(value), string});
    return !last;
  }
  bool end_value(std::string value) {
    in_value_ = false;
    done_ = !add(key_, std::move(value), value_string_);
    value_.clear();
    return !done_;
  }

  // JSON: strings are read at depth 1 only (keys, and values after a key's ':'); a value that
  // is no string runs up to a delimiter.
  bool json_char(char c) {
    if (in_string_) return string_char(c);
    if (in_value_) {  // a number or a literal
      if (!blank(c) && c != ',' && c != '}') {
        // Kept whole up to a raw string's length ("2.000...0e-64" is the parser's 2); a
        // longer one is cut, and read as no number.
        if (value_.size() <= kLongestRaw) value_ += c;
        return true;
      }
      if (value_.size() > kLongestRaw) value_.clear();
      if (!end_value(std::move(value_))) return false;
    }
    if (blank(c)) return true;
    if (colon_seen_) {
      colon_seen_ = false;
      if (c != '{' && c != '[') {  // a scalar: read it
        in_value_ = true;
        value_string_ = c == '"';
        if (!value_string_) return json_char(c);
        in_string_ = true;
        raw_.clear();
        return true;
      }
    }
    if (key_next_ && c == ':') {
      key_next_ = false;
      colon_seen_ = true;
      return true;
    }
    key_next_ = false;
    if (c == '"') {
      in_string_ = true;
      raw_.clear();
    } else if (c == '{' || c == '[') {
      ++depth_;
    } else if ((c == '}' || c == ']') && --depth_ == 0) {
      done_ = true;  // the document's end
      return false;
    }
    return true;
  }

  bool string_char(char c) {
    if (escaped_) {
      escaped_ = false;
    } else if (c == '\\') {
      escaped_ = true;
    } else if (c == '"') {
      in_string_ = false;
      if (in_value_) return end_value(decode_json_string(raw_));
      key_next_ = depth_ == 1;
      if (key_next_) key_ = decode_json_string(raw_);
      return true;
    }
    if (raw_.size() < kLongestRaw) raw_ += c;
    return true;
  }

  // Text: a line is kept only while it may be a header ("rrfp-hint" after its blanks). The
  // file's first bytes decide its format.
  bool text_char(char c) {
    if (format() == HintFormat::Unknown) {
      // Decided as the parsers decide it (a JSON hint behind a byte order mark was taken for
      // text, and its split was missed).
      if (probe_.take(c) == HintFormat::Unknown) {
        line_no_ += c == '\n';  // blank lines before the format shows count
        return true;
      }
      out_.json = format() == HintFormat::Json;
      if (out_.json) return json_char(c);
    }
    if (c != '\n') {
      if (skipping_ || (line_.empty() && blank(c))) return true;
      line_ += c;
      if (line_.size() <= kHintFormat.size() && line_.back() != kHintFormat[line_.size() - 1])
        skipping_ = true;
      return true;
    }
    ++line_no_;
    if (!skipping_ && is_hint_header(hint_line_content(line_))) {
      out_.header_line = line_no_;
      std::istringstream words{std::string(hint_line_content(line_))};
      for (std::string w; words >> w;)
        if (const auto eq = w.find('='); eq != std::string::npos)
          add(w.substr(0, std::min(eq, kLongest)), w.substr(eq + 1, kLongest), false);
      done_ = true;
      return false;
    }
    line_.clear();
    skipping_ = false;
    return true;
  }

  HintFormat format() const { return probe_.format(); }

  HintFormatProbe probe_;
  std::string enough_;
  HintFields out_;
  bool done_ = false;
  int depth_ = 0;
  bool in_string_ = false, escaped_ = false, key_next_ = false, colon_seen_ = false;
  bool in_value_ = false, value_string_ = false;
  std::string raw_, key_, value_;  // the string being read as written, the last key, a value
  std::string line_;
  int line_no_ = 0;  // lines ended so far
  bool skipping_ = false;
};

}  // namespace

HintFields hint_file_fields(const std::string& path, std::string_view enough) {
  // The largest hint of any shape: read_hint_file's bound where tasks are most (W split).
  constexpr InputKind kHintScan{"hint", 3 * 24 * kMaxChunkMicrobatches + (1u << 20), 0};
  FieldScan scan(enough);
  try {
    scan_input_file(path, kHintScan, [&](std::string_view piece) { return scan.take(piece); });
  } catch (const InputError&) {
    return {};  // reading the hint refuses it, in the same words
  }
  return scan.fields();
}

bool hint_file_declares_split(const std::string& path) {
  // Written files declare their split before their stages: the scan stops there.
  const HintFields jf = hint_file_fields(path, "split_backward");
  for (const HintField& f : jf.fields)
    if (jf.json ? f.key == "split_backward" && !f.string && f.value == "true"
                : f.key == "split" && f.value == "1")
      return true;
  return false;
}

}  // namespace rrfp
