#pragma once
// Reading, writing and validating list hints.
//
// Text format (one stage per line, '#' starts a comment, blank lines ignored):
//   rrfp-hint 1 pp=4 vpp=1 microbatches=8 placement=loop split=0   (optional header)
//   stage 0: F0:0 F0:1 F0:2 B0:0 ...
// JSON format:
//   {"format": "rrfp-hint", "version": 1, "pp": 4, "vpp": 1, "microbatches": 8,
//    "placement": "loop", "split_backward": false, "stages": [["F0:0", ...], ...]}
// Tokens are KIND CHUNK:MB (see task.hpp). A header that disagrees with the model is an error.
#include <string>
#include <string_view>
#include <vector>

#include "core/hint.hpp"

namespace rrfp {

std::string write_hint_text(const ListHint& h, const WorkModel& m);
std::string write_hint_json(const ListHint& h, const WorkModel& m);

// `origin` names the source in error messages ("FILE:LINE: ...").
ListHint parse_hint_text(std::string_view text, const WorkModel& m, const std::string& origin);
ListHint parse_hint_json(std::string_view text, const WorkModel& m, const std::string& origin);
// Which format a hint is written in, as every reader of one tells it (the parsers, the file's
// line bounds, the field scan below): after a leading byte order mark and blanks, JSON begins
// with '{' and anything else is text. Fed a file's bytes in order, it knows at the first byte
// that is neither; a broken mark is text (its first byte is).
enum class HintFormat { Unknown, Text, Json };
class HintFormatProbe {
 public:
  HintFormat take(char c);
  HintFormat format() const { return format_; }

 private:
  HintFormat format_ = HintFormat::Unknown;
  std::size_t bom_ = 0;  // the bytes of a leading byte order mark seen
  bool past_bom_ = false;
};
// A whole text's format: text where it holds nothing but a mark and blanks.
HintFormat hint_format(std::string_view text);
// Picks the format by hint_format, validates.
ListHint parse_hint(std::string_view text, const WorkModel& m, const std::string& origin);
// `option` names the file in errors (the CLI's `schedule check` takes it as its FILE).
ListHint read_hint_file(const std::string& path, const WorkModel& m, const char* option = "hint");
// Before a run of shape `c` is sized and built: refuses (HintError) a hint file too small to
// list its tasks, each a token of 4 bytes or more ("F0:0"), where they are over a million. A
// 73-byte file written for 30M microbatches was refused only after the estimate of the run's
// 14 GB, and 1.4 GB and 0.7 s of building its model. What is no regular file is left to the
// reader.
void check_hint_file_holds(const std::string& path, const PipelineConfig& c, const char* option);
// Whether the hint file at `path` says it was written for the split backward: its text header's
// `split=1`, or JSON's top-level "split_backward": true, wherever in the file. False when it
// says nothing; reading the hint checks the header in full. `split_backward` auto follows it,
// so a plan's file replays as it was written. The file is read through the checked reader
// (core/input_file.hpp): one it refuses (missing, a FIFO or a device, never waited on)
// declares nothing, and reading the hint refuses it.
bool hint_file_declares_split(const std::string& path);
// What a hint file says of itself: JSON's top-level members whose values are scalars (a string
// without its quotes, its escapes decoded; a number or a literal as written), or the text
// header's key=value fields (a repeated one: its last value, its key in `repeated`), wherever in
// the file they are, or up to the field named `enough`; read as hint_file_declares_split reads it
// (core/hint_fields.cpp). Each key and value is cut at 64 bytes, at most 64 distinct keys are
// kept. Empty where the checked reader refuses the file.
struct HintField {
  std::string key, value;
  bool string = false;  // a JSON string
};
struct HintFields {
  bool json = false;
  std::vector<HintField> fields;
  std::vector<std::string> repeated;  // keys given twice (text; JSON's reader refuses them)
  int header_line = 0;                // text: the header's line, counted from 1 (0: none)
};
HintFields hint_file_fields(const std::string& path, std::string_view enough = {});
// A line of the text format without its comment and its surrounding blanks, as the parser reads
// it; the header scan reads it so too (it missed an indented header).
std::string_view hint_line_content(std::string_view line);
// A hint file's format name: the text format's first word and the JSON format's "format".
inline constexpr std::string_view kHintFormat = "rrfp-hint";
// Whether such a line is the text format's header: "rrfp-hint" as a word ("rrfp-hints 1" was
// taken for one).
bool is_hint_header(std::string_view content);

// The position of each of stage `s`'s tasks in the list, by WorkModel::local_index: refuses
// (HintError, naming stage and task) a stage the hint lacks, or a task unknown, of another
// stage, listed twice or missing. Linear in the stage's tasks: every arbiter of a list hint
// runs it (an embedder's edited list wrote out of bounds, or ran a task twice).
std::vector<int> stage_positions(const ListHint& h, const WorkModel& m, int s,
                                 const std::string& origin);
// Rejects a hint that cannot run to completion under the fixed policy: a task missing,
// duplicated, unknown or on the wrong stage; a stage order that breaks a local dependency;
// or a cross-stage combination that deadlocks. Throws HintError naming stage and task.
// `stage_lines`: each stage's line in a text file, to name where a stage's error is.
void validate_hint(const ListHint& h, const WorkModel& m, const std::string& origin,
                   const std::vector<int>* stage_lines = nullptr);

}  // namespace rrfp
