#include "core/json_input.hpp"

#include <set>
#include <vector>

#include "core/error.hpp"
#include "core/memory.hpp"
#include "core/printable.hpp"

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

namespace {

// The parsed document, built event by event, refusing a key given twice in one object (the
// parser would keep the last value without a word). nlohmann's parser with a callback, which
// did this before, scans the enclosing array for a discarded value after every object it
// ends, discarded or not: quadratic in a trace's events (65K took 2.1 s, 262K 26 s).
class CheckedDom final : public nlohmann::json_sax<nlohmann::json> {
 public:
  explicit CheckedDom(const std::string& origin) : origin_(origin) {}
  nlohmann::json result;

  bool null() override { return put(nullptr) != nullptr; }
  bool boolean(bool v) override { return put(v) != nullptr; }
  bool number_integer(number_integer_t v) override { return put(v) != nullptr; }
  bool number_unsigned(number_unsigned_t v) override { return put(v) != nullptr; }
  // A number too small for a double reads as 0: "1e-400" became a duration of 0 without a
  // word, where a flag's value is refused (a number too large is the parser's error).
  bool number_float(number_float_t v, const string_t& text) override {
    const std::size_t mantissa = text.find_first_of("eE");
    if (v == 0 && text.substr(0, mantissa).find_first_of("123456789") != std::string::npos)
      throw InputError(origin_ + ": " +
                       (!open_.empty() && open_.back()->is_object()
                            ? "\"" + printable(key_, 40) + "\": "
                            : std::string()) +
                       "the number " + printable(text, 40) +
                       " is too small for a double, which would read it as 0");
    return put(v) != nullptr;
  }
  bool string(string_t& v) override { return put(std::move(v)) != nullptr; }
  bool binary(binary_t& v) override { return put(nlohmann::json::binary(std::move(v))) != nullptr; }
  bool start_object(std::size_t) override {
    open_.push_back(put(nlohmann::json::object()));
    keys_.emplace_back();
    return true;
  }
  bool key(string_t& k) override {
    if (!keys_.back().insert(k).second)
      throw InputError(origin_ + ": key \"" + printable(k, 40) + "\" appears twice in one object");
    key_ = std::move(k);
    return true;
  }
  bool end_object() override {
    open_.pop_back();
    keys_.pop_back();
    return true;
  }
  bool start_array(std::size_t) override {
    open_.push_back(put(nlohmann::json::array()));
    return true;
  }
  bool end_array() override {
    open_.pop_back();
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::json::exception& e) override {
    throw InputError(origin_ + ": invalid JSON (" + std::string(e.what()).substr(0, 160) + ")");
  }

 private:
  // Places `v` in the innermost open container (an object's under the last key): the
  // containers open hold their place, since an array gains no element while its last is open.
  nlohmann::json* put(nlohmann::json v) {
    if (open_.empty()) {
      result = std::move(v);
      return &result;
    }
    nlohmann::json& in = *open_.back();
    if (in.is_array()) {
      in.push_back(std::move(v));
      return &in.back();
    }
    return &(in[key_] = std::move(v));
  }

  const std::string& origin_;
  std::vector<nlohmann::json*> open_;
  std::vector<std::set<std::string>> keys_;
  std::string key_;
};

}  // namespace

nlohmann::json parse_scanned_json(std::string_view text, const std::string& origin) {
  // The parser takes a NUL for the end of its input: what followed was ignored unsaid (a hint
  // file's, a workload's second document). JSON text holds none, escaped in strings or not.
  if (const size_t at = text.find('\0'); at != std::string_view::npos)
    throw InputError(origin + ": invalid JSON (a NUL byte at offset " + std::to_string(at) +
                     "; JSON text holds none)");
  CheckedDom dom(origin);
  try {
    nlohmann::json::sax_parse(text, &dom);
  } catch (const nlohmann::json::exception& e) {
    throw InputError(origin + ": invalid JSON (" + std::string(e.what()).substr(0, 160) + ")");
  }
  return std::move(dom.result);
}

std::string json_text(const nlohmann::json& j, int indent) {
  return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string brief(const nlohmann::json& v) {
  if (v.is_array()) return "an array of " + std::to_string(v.size());
  if (v.is_object()) return "an object of " + std::to_string(v.size()) + " fields";
  if (v.is_string()) {
    const auto& s = v.get_ref<const std::string&>();
    return "\"" + printable(s, 40) + "\"";
  }
  return v.dump();  // a scalar: bounded
}

}  // namespace rrfp
