#include "core/json_input.hpp"

#include <set>
#include <vector>

#include "core/error.hpp"
#include "core/memory.hpp"

namespace rrfp {

double json_parse_bytes(std::string_view text, const std::string& origin) {
  // What the parsed value will hold: an object's member costs a tree node, its key and its value
  // (about 100 bytes with the allocator's overhead; `{}` objects alone took 94 bytes each), an
  // array's element its value (16). The text is not a bound: 255 MiB of `{}` took 8.4 GB.
  constexpr double kMember = 100, kElement = 16;
  double bytes = 0;
  bool in_string = false, escaped = false;
  std::vector<char> open;  // the brackets enclosing this point, innermost last
  for (const char c : text) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (open.size() == static_cast<size_t>(kMaxJsonDepth))
        throw InputError(origin + ": JSON nested deeper than " + std::to_string(kMaxJsonDepth) +
                         " levels");
      open.push_back(c);
      bytes += c == '{' ? kMember : kElement;
    } else if ((c == ']' || c == '}') && !open.empty()) {
      open.pop_back();
    } else if (c == ':' || (c == ',' && !open.empty() && open.back() == '[')) {
      bytes += c == ':' ? kMember : kElement;
    }
  }
  return bytes;
}

nlohmann::json parse_json(std::string_view text, const std::string& origin) {
  check_memory(json_parse_bytes(text, origin), origin + ": parsing this JSON", "",
               "the file's size (fewer events)");
  return parse_scanned_json(text, origin);
}

nlohmann::json parse_scanned_json(std::string_view text, const std::string& origin) {
  // A key given twice in one object: the parser would keep the last value without a word.
  std::vector<std::set<std::string>> keys;
  auto unique = [&](int, nlohmann::json::parse_event_t ev, nlohmann::json& parsed) {
    using E = nlohmann::json::parse_event_t;
    if (ev == E::object_start) {
      keys.emplace_back();
    } else if (ev == E::object_end) {
      keys.pop_back();
    } else if (ev == E::key && !keys.back().insert(parsed.get<std::string>()).second) {
      const auto& k = parsed.get_ref<const std::string&>();
      throw InputError(origin + ": key \"" + k.substr(0, 40) + "\" appears twice in one object");
    }
    return true;
  };
  try {
    return nlohmann::json::parse(text, unique);
  } catch (const nlohmann::json::exception& e) {
    throw InputError(origin + ": invalid JSON (" + std::string(e.what()).substr(0, 160) + ")");
  }
}

std::string json_text(const nlohmann::json& j, int indent) {
  return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string brief(const nlohmann::json& v) {
  if (v.is_array()) return "an array of " + std::to_string(v.size());
  if (v.is_object()) return "an object of " + std::to_string(v.size()) + " fields";
  if (v.is_string()) {
    const auto& s = v.get_ref<const std::string&>();
    return "\"" + s.substr(0, 40) + (s.size() > 40 ? "...\"" : "\"");
  }
  return v.dump();  // a scalar: bounded
}

}  // namespace rrfp
