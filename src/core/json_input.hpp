#pragma once
// JSON from users (workload files, JSON hints, checkpoint headers): bounded before it is parsed,
// and never dumped whole into a message.
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace rrfp {

inline constexpr int kMaxJsonDepth = 64;

// Parses `text`; throws InputError "<origin>: invalid JSON (...)" on a syntax error and refuses,
// before parsing, nesting deeper than kMaxJsonDepth (the parser, and every recursive walk of a
// value afterwards, would otherwise recurse as deep as the input says) and, with `check_cost`,
// a document whose parsed value would take more memory than is available (core/memory.hpp);
// while parsing, a key given twice in one object (whose first value would be dropped silently).
nlohmann::json parse_json(std::string_view text, const std::string& origin, bool check_cost = true);
// The memory the parsed value of `text` will take, estimated from its members and elements;
// refuses nesting deeper than kMaxJsonDepth. For a caller parsing several documents at once.
double json_parse_bytes(std::string_view text, const std::string& origin);

// A value as a message may show it: scalars as themselves (strings cut at 40 characters),
// arrays and objects by their size only.
std::string brief(const nlohmann::json& v);

}  // namespace rrfp
