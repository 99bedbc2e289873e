// What a hint file declares about itself, read as it streams past: the split (which picks the
// run's model before the hint is read) and the shape (which `schedule check` takes for each
// flag not given). One scanner for both, so that they cannot read a file differently.
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.hpp"
#include "core/hint_io.hpp"
#include "core/input_file.hpp"
#include "core/task.hpp"

namespace rrfp {
namespace {

// The fields of a hint file, from its pieces in order: the file is scanned whole (its header
// need not come first: 64 KiB of comments, or a JSON "stages" before "split_backward", hid it)
// without being held. JSON: the top-level members whose values are scalars; text: the first
// header line's key=value fields.
class FieldScan {
 public:
  // Takes the next piece; false once every field is known.
  bool take(std::string_view piece) {
    for (const char c : piece)
      if (!(format_ == Format::Json ? json_char(c) : text_char(c))) return false;
    return true;
  }
  // The answer, after the last piece.
  HintFields fields() {
    if (format_ == Format::Text && !done_) text_char('\n');  // a last line without its newline
    if (format_ == Format::Json && in_value_) end_value();   // a document that broke off
    return std::move(out_);
  }

 private:
  static bool blank(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }
  // Keys and values longer than this are no field a hint has; kept no longer.
  static constexpr std::size_t kLongest = 64;
  static constexpr std::size_t kMostFields = 64;

  void end_value() {
    in_value_ = false;
    if (out_.fields.size() < kMostFields)
      out_.fields.push_back({key_, std::move(value_), value_string_});
    value_.clear();
  }

  // A scalar value at depth 1 (after its key's ':'): a string up to its closing quote, anything
  // else up to a delimiter.
  bool value_char(char c) {
    if (value_string_) {
      if (escaped_)
        escaped_ = false;
      else if (c == '\\')
        escaped_ = true;
      else if (c == '"')
        return end_value(), true;
      if (value_.size() < kLongest) value_ += c;
      return true;
    }
    if (blank(c) || c == ',' || c == '}') {
      end_value();
      return c == ',' || c == '}' ? structure_char(c) : true;
    }
    if (value_.size() < kLongest) value_ += c;
    return true;
  }

  // JSON: strings are skipped but at depth 1, where a key followed by ':' is read.
  bool json_char(char c) {
    if (in_value_) return value_char(c);
    if (in_string_) {
      if (escaped_)
        escaped_ = false;
      else if (c == '\\')
        escaped_ = true;
      else if (c == '"') {
        in_string_ = false;
        key_next_ = depth_ == 1;
        if (key_next_) key_ = string_;
        return true;
      }
      if (string_.size() < kLongest) string_ += c;
      return true;
    }
    if (blank(c)) return true;
    if (colon_seen_) {
      colon_seen_ = false;
      if (c != '{' && c != '[') {  // a scalar: read it
        in_value_ = true;
        value_string_ = c == '"';
        return value_string_ || value_char(c);
      }
    }
    if (key_next_ && c == ':') {
      key_next_ = false;
      colon_seen_ = true;
      return true;
    }
    key_next_ = false;
    return structure_char(c);
  }

  bool structure_char(char c) {
    if (c == '"') {
      in_string_ = true;
      string_.clear();
    } else if (c == '{' || c == '[') {
      ++depth_;
    } else if (c == '}' || c == ']') {
      if (--depth_ == 0) return done_ = true, false;  // the document's end
    }
    return true;
  }

  // Text: a line is kept only while it may be a header ("rrfp-hint" after its blanks).
  bool text_char(char c) {
    if (format_ == Format::Unknown) {
      // A leading byte order mark, skipped as the parsers skip it (a JSON hint was taken for
      // text, and its split was missed).
      if (bom_ < 3 && c == "\xEF\xBB\xBF"[bom_]) {
        ++bom_;
        return true;
      }
      bom_ = 3;
      if (blank(c)) return true;
      format_ = c == '{' ? Format::Json : Format::Text;
      out_.json = format_ == Format::Json;
      if (format_ == Format::Json) return json_char(c);
    }
    if (c != '\n') {
      if (skipping_ || (line_.empty() && blank(c))) return true;
      line_ += c;
      static constexpr std::string_view kHeader = "rrfp-hint";
      if (line_.size() <= kHeader.size() && line_.back() != kHeader[line_.size() - 1])
        skipping_ = true;
      return true;
    }
    if (!skipping_ && hint_line_content(line_).substr(0, 9) == "rrfp-hint") {
      std::istringstream words{std::string(hint_line_content(line_))};
      for (std::string w; words >> w;)
        if (const auto eq = w.find('=');
            eq != std::string::npos && out_.fields.size() < kMostFields)
          out_.fields.push_back({w.substr(0, eq), w.substr(eq + 1), false});
      done_ = true;
      return false;
    }
    line_.clear();
    skipping_ = false;
    return true;
  }

  enum class Format { Unknown, Json, Text } format_ = Format::Unknown;
  HintFields out_;
  bool done_ = false;
  int depth_ = 0;
  bool in_string_ = false, escaped_ = false, key_next_ = false, colon_seen_ = false;
  bool in_value_ = false, value_string_ = false;
  std::string string_, key_, value_;  // the string being read, the last key, a value
  std::string line_;
  bool skipping_ = false;
  std::size_t bom_ = 0;  // the bytes of a leading byte order mark seen
};

}  // namespace

HintFields hint_file_fields(const std::string& path) {
  // The largest hint of any shape: read_hint_file's bound where tasks are most (W split).
  constexpr InputKind kHintScan{"hint", 3 * 24 * kMaxChunkMicrobatches + (1u << 20), 0};
  FieldScan scan;
  try {
    scan_input_file(path, kHintScan, [&](std::string_view piece) { return scan.take(piece); });
  } catch (const InputError&) {
    return {};  // reading the hint refuses it, in the same words
  }
  return scan.fields();
}

bool hint_file_declares_split(const std::string& path) {
  const HintFields h = hint_file_fields(path);
  for (const HintField& f : h.fields)
    if (h.json ? f.key == "split_backward" && !f.string && f.value == "true"
               : f.key == "split" && f.value == "1")
      return true;
  return false;
}

}  // namespace rrfp
