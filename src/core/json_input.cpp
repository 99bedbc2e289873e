#include "core/json_input.hpp"

#include "core/error.hpp"

namespace rrfp {

nlohmann::json parse_json(std::string_view text, const std::string& origin) {
  int depth = 0;
  bool in_string = false, escaped = false;
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
      if (++depth > kMaxJsonDepth)
        throw InputError(origin + ": JSON nested deeper than " + std::to_string(kMaxJsonDepth) +
                         " levels");
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw InputError(origin + ": invalid JSON (" + std::string(e.what()).substr(0, 160) + ")");
  }
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
