#pragma once
// JSON from users (workload files, JSON hints, checkpoint headers): bounded before it is parsed,
// and never dumped whole into a message; and the text of the JSON rrfp writes for them.
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace rrfp {

inline constexpr int kMaxJsonDepth = 64;

// Parses `text`; throws InputError "<origin>: invalid JSON (...)" on a syntax error and refuses,
// before parsing, nesting deeper than kMaxJsonDepth (the parser, and every recursive walk of a
// value afterwards, would otherwise recurse as deep as the input says) and a document whose
// parsed value would take more memory than is available (core/memory.hpp); while parsing, a
// key given twice in one object (whose first value would be dropped silently).
nlohmann::json parse_json(std::string_view text, const std::string& origin);
// The two halves of parse_json, for a caller that costs several documents together before it
// parses any. json_parse_bytes: the memory the parsed value of `text` will take, estimated from
// its members and elements; refuses nesting deeper than kMaxJsonDepth. parse_scanned_json:
// parses a text json_parse_bytes accepted, refusing syntax errors and repeated keys.
double json_parse_bytes(std::string_view text, const std::string& origin);
nlohmann::json parse_scanned_json(std::string_view text, const std::string& origin);

// The text of a report or trace rrfp writes (`indent` as nlohmann's dump; -1: one line). A
// string that is not UTF-8, such as a path with another encoding's byte (legal on Linux), is
// written with U+FFFD in its place: the strict dump threw after all the work, and nothing was
// written.
std::string json_text(const nlohmann::json& j, int indent = -1);

// A value as a message may show it: scalars as themselves (strings cut at 40 characters),
// arrays and objects by their size only.
std::string brief(const nlohmann::json& v);

}  // namespace rrfp
