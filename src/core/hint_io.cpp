#include "core/hint_io.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/error.hpp"
#include "core/format.hpp"
#include "core/input_file.hpp"
#include "core/json_input.hpp"
#include "core/printable.hpp"

namespace rrfp {

namespace {

std::string header_line(const WorkModel& m) {
  const auto& c = m.config();
  return std::string(kHintFormat) + " 1 pp=" + std::to_string(c.pp) +
         " vpp=" + std::to_string(c.vpp) + " microbatches=" + std::to_string(c.microbatches) +
         " placement=" + to_string(c.placement) + " split=" + (c.split_backward ? "1" : "0");
}

// Checks "key=value" header fields against the model; true where the header gives `pp`.
bool check_header(std::string_view line, const WorkModel& m, const std::string& where) {
  std::istringstream in{std::string(line)};
  std::string word;
  in >> word;  // "rrfp-hint"
  if (!(in >> word)) throw HintError(where + ": the header line lacks its format version (1)");
  if (word != "1")
    throw HintError(where + ": unsupported hint format version '" + printable(word) + "'");
  const auto& c = m.config();
  // Every field read before any is compared: a field given twice was taken (the split's scan
  // and this check may each read another), and "split=1 split=0" was told the run has split=0,
  // a flag never given, before the second was seen.
  std::vector<std::pair<std::string, std::string>> fields;
  std::set<std::string> seen;
  while (in >> word) {
    auto eq = word.find('=');
    if (eq == std::string::npos)
      throw HintError(where + ": bad header field '" + printable(word) + "'");
    std::string key = word.substr(0, eq);
    if (!seen.insert(key).second)
      throw HintError(where + ": header field " + printable(key) + " is given twice");
    fields.emplace_back(std::move(key), word.substr(eq + 1));
  }
  for (const auto& [key, val] : fields) {
    std::string want;
    if (key == "pp")
      want = std::to_string(c.pp);
    else if (key == "vpp")
      want = std::to_string(c.vpp);
    else if (key == "microbatches")
      want = std::to_string(c.microbatches);
    else if (key == "placement")
      want = to_string(c.placement);
    else if (key == "split")
      want = c.split_backward ? "1" : "0";
    else
      throw HintError(where + ": unknown header field '" + printable(key) + "'");
    // "pp=x" was told the run has pp=4, the default, as if x were a shape; so was pp=0, as the
    // JSON form's "pp": 0 was.
    if (key != "placement" && (val.empty() || val.find_first_not_of("0123456789") != val.npos))
      throw HintError(where + ": header field " + key + "=" + printable(val) +
                      " is not a whole number");
    // "placement=zigzag" was told the run has placement=loop, as if it were a shape.
    if (key == "placement" && val != "loop" && val != "vshape")
      throw HintError(where + ": header field placement=" + printable(val) +
                      " is not loop or vshape");
    // "split=2" was told the run has split=0, as if 2 were another run's.
    if (key == "split" && val != "0" && val != "1")
      throw HintError(where + ": header field split=" + printable(val) + " is not 0 or 1");
    if (key != "placement" && key != "split" &&
        (val.size() > 8 || std::stoll(val) < 1 || std::stoll(val) > kMaxChunkMicrobatches))
      throw HintError(where + ": header field " + key + "=" + printable(val) +
                      " is not a whole number from 1 to " + std::to_string(kMaxChunkMicrobatches));
    // The split is the one field whose option has another name: "split=0" named no flag.
    // Numbers compare as numbers: "microbatches=03" was told the run has microbatches=3.
    if (key == "placement" || key == "split" ? val != want : std::stoll(val) != std::stoll(want))
      throw HintError(where + ": hint was written for " + key + "=" + printable(val) +
                      " but the run has " + key + "=" + want +
                      (key == "split"
                           ? std::string(" (`split_backward` ") + (want == "1" ? "on)" : "off)")
                           : ""));
  }
  return seen.count("pp") > 0;
}

}  // namespace

std::string write_hint_text(const ListHint& h, const WorkModel& m) {
  std::string out = header_line(m) + "\n";
  for (size_t s = 0; s < h.stages.size(); ++s) {
    out += "stage " + std::to_string(s) + ":";
    for (const TaskId& t : h.stages[s])
      out += " " + to_token(t);
    out += "\n";
  }
  return out;
}

// The document nlohmann's dump(1) made of the hint (its keys in order, one space a level),
// written directly: its tree held a string per task, copied twice over (a plan of 8M tasks took
// 0.9 GB more to write its --out as JSON).
std::string write_hint_json(const ListHint& h, const WorkModel& m) {
  const auto& c = m.config();
  std::string out =
      "{\n \"format\": \"rrfp-hint\",\n \"microbatches\": " + std::to_string(c.microbatches) +
      ",\n \"placement\": \"" + to_string(c.placement) + "\",\n \"pp\": " + std::to_string(c.pp) +
      ",\n \"split_backward\": " + (c.split_backward ? "true" : "false") + ",\n \"stages\": ";
  // An array as dump(1) lays it out at `indent` spaces: "[]" when empty.
  const auto array = [&out](std::size_t n, int indent, const auto& item) {
    if (n == 0) {
      out += "[]";
      return;
    }
    out += '[';
    for (std::size_t i = 0; i < n; ++i) {
      out += i ? ",\n" : "\n";
      out.append(indent + 1, ' ');
      item(i);
    }
    out += '\n';
    out.append(indent, ' ');
    out += ']';
  };
  array(h.stages.size(), 1, [&](std::size_t s) {
    const auto& stage = h.stages[s];
    array(stage.size(), 2, [&](std::size_t i) { out += '"' + to_token(stage[i]) + '"'; });
  });
  return out + ",\n \"version\": 1,\n \"vpp\": " + std::to_string(c.vpp) + "\n}\n";
}

bool is_hint_header(std::string_view content) {
  const std::size_t n = kHintFormat.size();
  return content.substr(0, n) == kHintFormat &&
         (content.size() == n || content[n] == ' ' || content[n] == '\t');
}

std::string_view hint_line_content(std::string_view line) {
  if (auto hash = line.find('#'); hash != std::string_view::npos) line = line.substr(0, hash);
  return trim(line);
}

ListHint parse_hint_text(std::string_view text, const WorkModel& m, const std::string& origin) {
  ListHint h;
  h.stages.resize(m.pp());
  std::vector<char> seen(m.pp(), 0);
  std::vector<int> line_of(m.pp(), 0);  // each stage's line, for the errors validate_hint finds
  int line_no = 0, header_at = 0;
  bool header_pp = false;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t nl = text.find('\n', pos);
    std::string_view line = text.substr(pos, nl == std::string_view::npos ? text.npos : nl - pos);
    pos = nl == std::string_view::npos ? text.size() + 1 : nl + 1;
    ++line_no;
    const std::string where = origin + ":" + std::to_string(line_no);
    line = hint_line_content(line);
    if (line.empty()) continue;
    if (is_hint_header(line)) {
      // The shape is taken from the first header alone: a second one's fields were checked
      // against a shape they did not give ("written for microbatches=2 but the run has 8").
      if (header_at > 0)
        throw HintError(where + ": a second header line (the first is line " +
                        std::to_string(header_at) + ")");
      header_at = line_no;
      header_pp = check_header(line, m, where);
      continue;
    }
    // "stage", then a blank: a tab as well as a space, as between the tasks.
    if (line.substr(0, 5) != "stage" || line.size() < 6 || (line[5] != ' ' && line[5] != '\t'))
      throw HintError(where + ": expected 'stage N: TASK ...', got '" + printable(line) + "'");
    auto colon = line.find(':');
    if (colon == std::string_view::npos)
      throw HintError(where + ": missing ':' after stage number");
    std::string num(trim(line.substr(6, colon - 6)));
    // "stage 1 F1:0 ..." found the colon of its first task: "stage '1 F1' out of range".
    if (const auto blank = num.find_first_of(" \t"); blank != std::string::npos)
      throw HintError(where + ": missing ':' after 'stage " + printable(num.substr(0, blank)) +
                      "'");
    int s = -1;
    // Digits alone: std::stoi took "+1" as stage 1.
    const bool digits = num.find_first_not_of("0123456789") == std::string::npos;
    try {
      size_t used = 0;
      if (digits) s = std::stoi(num, &used);
      if (used != num.size()) s = -1;
    } catch (...) {
    }
    if (s < 0 || s >= m.pp())
      throw HintError(where + ": stage '" + printable(num) + "' out of range 0.." +
                      std::to_string(m.pp() - 1) + " (" +
                      (header_pp ? "its header's pp=" : "the run has `pp` ") +
                      std::to_string(m.pp()) + ")");
    if (seen[s]) throw HintError(where + ": stage " + std::to_string(s) + " listed twice");
    seen[s] = 1;
    line_of[s] = line_no;
    std::istringstream in{std::string(line.substr(colon + 1))};
    std::string tok;
    while (in >> tok) {
      try {
        h.stages[s].push_back(parse_token(tok));
      } catch (const InputError& e) {
        throw HintError(where + ": " + e.what());
      }
    }
  }
  // An empty file was told "stage 0 has no line (the run has `pp` 4 stages...)".
  if (std::find(seen.begin(), seen.end(), 1) == seen.end())
    throw HintError(origin + (header_at > 0
                                  ? ": has its header but no stage line ('stage N: TASK ...')"
                                  : ": holds no hint: no header, no stage line (an empty file?)"));
  // A header's pp is the run's (check_header refused another): naming it rather than the
  // option, which may not have been given.
  for (int s = 0; s < m.pp(); ++s)
    if (!seen[s])
      throw HintError(origin + ": stage " + std::to_string(s) + " has no line (" +
                      (header_pp ? "its header's pp=" + std::to_string(m.pp()) + ": stages"
                                 : "the run has `pp` " + std::to_string(m.pp()) + " stages,") +
                      " 0.." + std::to_string(m.pp() - 1) + ")");
  validate_hint(h, m, origin, &line_of);
  return h;
}

namespace {

// A JSON hint's fields other than its stages: its format and version, no unknown key, and the
// shape it was written for against the run's (each field's type and range first).
void check_json_header(const nlohmann::json& j, const WorkModel& m, const std::string& origin) {
  if (!j.is_object() || !j.contains("format"))
    throw HintError(origin + ": not an rrfp hint (missing \"format\": \"rrfp-hint\")");
  // Compared as JSON: value<std::string>() threw nlohmann's type error for "format": 5.
  if (j["format"] != kHintFormat)
    throw HintError(origin + ": \"format\" is " + brief(j["format"]) +
                    "; an rrfp hint's is \"rrfp-hint\"");
  // Exactly the integer 1: value<int>() would read 1.5 as 1.
  if (!j.contains("version") || !j["version"].is_number_integer() || j["version"] != 1)
    throw HintError(origin + ": unsupported hint version " +
                    (j.contains("version") ? brief(j["version"]) : std::string("(none)")) +
                    "; this rrfp reads version 1");
  // The text format refuses an unknown header field; here a misspelt shape key
  // ("microbatch") was skipped, and with it the check of the shape.
  static const std::set<std::string> keys = {
      "format", "version", "pp", "vpp", "microbatches", "placement", "split_backward", "stages"};
  for (const auto& [key, value] : j.items())
    if (!keys.count(key))
      throw HintError(origin + ": unknown key \"" + printable(key) +
                      "\" (the keys are format, version, pp, vpp, microbatches, placement, "
                      "split_backward, stages)");
  const auto& c = m.config();
  auto check = [&](const char* key, const nlohmann::json& want) {
    // "pp": "2" was told the run has pp=4, the default, as if it were another shape.
    // 2.5, 0 or -2 was told the run has another shape, as if it were one; 3.0 and 3e0 are 3.
    if (j.contains(key) && want.is_number()) {
      const double v = j[key].is_number() ? j[key].get<double>() : 0;
      if (!(v >= 1 && v <= kMaxChunkMicrobatches && v == std::floor(v)))
        throw HintError(origin + ": \"" + key + "\" must be a whole number from 1 to " +
                        std::to_string(kMaxChunkMicrobatches) + ", got " + brief(j[key]));
    }
    if (j.contains(key) && want.is_string() &&
        !(j[key] == nlohmann::json("loop") || j[key] == nlohmann::json("vshape")))
      throw HintError(origin + ": \"" + key + "\" must be \"loop\" or \"vshape\", got " +
                      brief(j[key]));
    if (j.contains(key) && want.is_boolean() && !j[key].is_boolean())
      throw HintError(origin + ": \"" + key + "\" must be true or false, got " + brief(j[key]));
    if (j.contains(key) && j[key] != want)
      throw HintError(origin + ": hint was written for " + key + "=" + brief(j[key]) +
                      " but the run has " + key + "=" + want.dump() +
                      (want.is_boolean()
                           ? std::string(" (`") + key + "` " + (want.get<bool>() ? "on)" : "off)")
                           : ""));
  };
  check("pp", c.pp);
  check("vpp", c.vpp);
  check("microbatches", c.microbatches);
  check("placement", to_string(c.placement));
  check("split_backward", c.split_backward);
}

}  // namespace

ListHint parse_hint_json(std::string_view text, const WorkModel& m, const std::string& origin) {
  nlohmann::json j;
  try {
    j = parse_json(text, origin);
  } catch (const InputError& e) {
    throw HintError(e.what());  // a hint that cannot be read is a bad hint
  }
  try {
    check_json_header(j, m, origin);
    if (!j.contains("stages"))  // j.at() said "[json.exception.out_of_range.403] ..."
      throw HintError(origin + ": no \"stages\" (each stage's order of tasks)");
    const auto& st = j.at("stages");
    // Without a "pp" the count is the run's `pp`, perhaps its default: said, as the text form
    // says it ("8 stage orders" read as the file's own demand).
    if (!st.is_array() || static_cast<int>(st.size()) != m.pp())
      throw HintError(origin + ": \"stages\" must be an array of " + std::to_string(m.pp()) +
                      " stage orders (" +
                      (j.contains("pp") ? "its \"pp\""
                                        : "the run has `pp` " + std::to_string(m.pp()) +
                                              " stages; the file gives no \"pp\"") +
                      (st.is_array() ? ", it lists " + std::to_string(st.size()) : std::string()) +
                      ")");
    ListHint h;
    h.stages.resize(m.pp());
    for (int s = 0; s < m.pp(); ++s) {
      if (!st[s].is_array())
        throw HintError(origin + ": stage " + std::to_string(s) + " is not an array of tasks");
      for (const auto& tok : st[s]) {
        if (!tok.is_string())
          throw HintError(origin + ": stage " + std::to_string(s) + ": task " + brief(tok) +
                          " is not a string such as \"F0:3\"");
        try {
          h.stages[s].push_back(parse_token(tok.get<std::string>()));
        } catch (const InputError& e) {
          throw HintError(origin + ": stage " + std::to_string(s) + ": " + e.what());
        }
      }
    }
    validate_hint(h, m, origin);
    return h;
  } catch (const nlohmann::json::exception& e) {
    throw HintError(origin + ": " + std::string(e.what()).substr(0, 160));
  }
}

HintFormat HintFormatProbe::take(char c) {
  if (format_ != HintFormat::Unknown) return format_;
  if (!past_bom_) {
    static constexpr std::string_view kBom = "\xEF\xBB\xBF";
    if (c == kBom[bom_]) {
      past_bom_ = ++bom_ == kBom.size();
      return format_;
    }
    if (bom_ > 0) return format_ = HintFormat::Text;
    past_bom_ = true;
  }
  if (c == ' ' || c == '\t' || c == '\r' || c == '\n') return format_;
  return format_ = c == '{' ? HintFormat::Json : HintFormat::Text;
}

HintFormat hint_format(std::string_view text) {
  HintFormatProbe probe;
  for (const char c : text)
    if (probe.take(c) != HintFormat::Unknown) return probe.format();
  return HintFormat::Text;
}

ListHint parse_hint(std::string_view text, const WorkModel& m, const std::string& origin) {
  const HintFormat format = hint_format(text);
  text = skip_bom(text);  // as the JSON reader does, and --workload-file's
  if (format == HintFormat::Json) return parse_hint_json(text, m, origin);
  // Lines ended by CR alone (classic Mac OS) are one line: it was told "bad header field
  // 'stage'", the stages read as the header's words.
  if (text.find('\r') != std::string_view::npos && text.find('\n') == std::string_view::npos)
    throw HintError(origin +
                    ": its lines end in CR alone (classic Mac OS line endings), which "
                    "are not read; convert them to LF (or CRLF)");
  return parse_hint_text(text, m, origin);
}

void check_hint_file_holds(const std::string& path, const PipelineConfig& c, const char* option) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return;
  const double tasks = tasks_of(c, 1);
  // Only where the run is costly to build: the reader's own words are more precise ("stage 2
  // has no line").
  if (tasks > (1 << 20) && static_cast<double>(st.st_size) < 4 * tasks)
    throw HintError("`" + std::string(option) + "`: '" + path + "' (" + std::to_string(st.st_size) +
                    " bytes) cannot list the " + fmt("%.0f", tasks) +
                    " tasks of P=" + std::to_string(c.pp) + " V=" + std::to_string(c.vpp) +
                    " M=" + std::to_string(c.microbatches) +
                    ", 4 bytes a task at least: written for another shape, or cut short");
}

namespace {

// A hint file past this run's bound whose header names another shape: refused for that, as a
// file within the bound is (a hint of M=200000 given -m 8 was told its 29 MiB, its header's
// microbatches=200000 unsaid).
void refuse_other_shape_header(const std::string& path, const WorkModel& m) {
  const HintFields declared = hint_file_fields(path);
  for (const auto& [key, value, string] : declared.fields) {
    const int run = key == "pp"             ? m.pp()
                    : key == "vpp"          ? m.vpp()
                    : key == "microbatches" ? m.microbatches()
                                            : 0;
    if (run == 0 || string) continue;
    char* end = nullptr;
    const double v = std::strtod(value.c_str(), &end);
    if (!value.empty() && *end == '\0' && v != run)
      throw HintError(path + ": hint was written for " + key + "=" + printable(value) +
                      " but the run has " + key + "=" + std::to_string(run));
  }
}

}  // namespace

ListHint read_hint_file(const std::string& path, const WorkModel& m, const char* option) {
  // As large as a hint of this run can be: each task a token of at most ~24 bytes (JSON, with
  // its indentation), a stage's tasks on one line, plus room for a header.
  // The document is bounded; the text format's lines are too (JSON may be one line, as
  // json.dump writes it: the document bound is its bound).
  const std::uint64_t doc = static_cast<std::uint64_t>(m.num_tasks()) * 24 + (1u << 20);
  // Where the bound comes from, said with it: the refusal of a valid hint, re-indented deeper
  // than rrfp writes it, gave its size and the cap alone. A hint of another, larger run is
  // refused by its header where that names another shape.
  const std::string why = "24 bytes for each of the run's " + std::to_string(m.num_tasks()) +
                          " tasks, and 1 MiB: a hint of this run, indented as rrfp writes it, "
                          "fits";
  std::string text;
  try {
    text = read_input_file(path, InputKind{option, doc, 0, why});
    if (hint_format(text) == HintFormat::Text)
      check_line_lengths(
          text,
          InputKind{option, doc, static_cast<std::size_t>(m.tasks_per_stage()) * 24 + (1u << 16)},
          path);
  } catch (const InputError&) {
    refuse_other_shape_header(path, m);
    throw;
  }
  return parse_hint(text, m, path);
}

}  // namespace rrfp
