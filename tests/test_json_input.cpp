// The checked JSON reader (core/json_input): the same document as nlohmann's parser builds, and a
// key given twice in one object refused at any depth, however it is spelt.
#include <gtest/gtest.h>

#include <string>

#include "core/error.hpp"
#include "core/json_input.hpp"
#include "sim/rng.hpp"

namespace rrfp::test {
namespace {

std::string refusal(const std::string& doc) {
  try {
    parse_scanned_json(doc, "d.json");
    return "accepted";
  } catch (const InputError& e) {
    return e.what();
  }
}

// A document of every kind of value, nested to `depth`, drawn from `seed`.
nlohmann::json drawn(std::uint64_t seed, int depth) {
  const std::uint64_t h = hash_keys(seed, 1, static_cast<std::uint64_t>(depth));
  switch (depth == 0 ? h % 6 : h % 8) {
    case 0:
      return nullptr;
    case 1:
      return (h >> 8) % 2 == 0;
    case 2:
      return -static_cast<std::int64_t>(h >> 20);
    case 3:
      return h;  // unsigned, past the signed range
    case 4:
      return unit_open(h) * 1e300;
    case 5:
      return "s\"\\\n\u00e9" + std::to_string(h % 1000);
    case 6: {
      nlohmann::json a = nlohmann::json::array();
      for (std::uint64_t i = 0; i < h % 5; ++i)
        a.push_back(drawn(hash_keys(seed, 2, i), depth - 1));
      return a;
    }
    default: {
      nlohmann::json o = nlohmann::json::object();
      for (std::uint64_t i = 0; i < h % 5; ++i) {
        std::string key = "k";  // not "k" + ...: g++ 12 warned of a false overflow there
        key += std::to_string(i);
        o[key] = drawn(hash_keys(seed, 3, i), depth - 1);
      }
      return o;
    }
  }
}

TEST(JsonInput, BuildsTheDocumentNlohmannsParserBuilds) {
  for (std::uint64_t seed = 1; seed <= 300; ++seed) {
    const std::string text = drawn(seed, 5).dump(static_cast<int>(seed % 3) - 1);
    EXPECT_EQ(parse_scanned_json(text, "d.json"), nlohmann::json::parse(text)) << text;
  }
  EXPECT_EQ(parse_scanned_json("[]", "d.json"), nlohmann::json::array());
  EXPECT_EQ(parse_scanned_json(" 7 ", "d.json"), 7);
  EXPECT_EQ(parse_scanned_json(R"([{"a":[{}]},[[]],{"b":{"c":[1,{"d":2}]}}])", "d.json"),
            nlohmann::json::parse(R"([{"a":[{}]},[[]],{"b":{"c":[1,{"d":2}]}}])"));
}

TEST(JsonInput, RefusesAKeyGivenTwiceInOneObjectAtAnyDepth) {
  EXPECT_EQ(refusal(R"({"a": 1, "a": 2})"), "d.json: key \"a\" appears twice in one object");
  EXPECT_EQ(refusal(R"([{"x": [{"b": 1, "c": 2, "b": 3}]}])"),
            "d.json: key \"b\" appears twice in one object");
  // Spelt with an escape it is the same key.
  EXPECT_EQ(refusal(R"({"a": 1, "\u0061": 2})"), "d.json: key \"a\" appears twice in one object");
  // One key in sibling or nested objects is no repeat.
  EXPECT_EQ(refusal(R"([{"a": 1}, {"a": 2}, {"a": {"a": 3}}])"), "accepted");
  EXPECT_NE(refusal(R"({"a": 1,})").find("d.json: invalid JSON ("), std::string::npos);
  EXPECT_NE(refusal("[1, 2").find("d.json: invalid JSON ("), std::string::npos);
}

// The parser took a NUL for the end of its input, and what followed was ignored unsaid: a hint
// file's junk, a workload file's second document with a negative duration.
TEST(JsonInput, RefusesANulByteWhereverItIs) {
  using namespace std::string_literals;
  EXPECT_EQ(refusal("{\"a\": 1}\0{\"a\": -5}"s),
            "d.json: invalid JSON (a NUL byte at offset 8; JSON text holds none)");
  EXPECT_EQ(refusal("\0"s), "d.json: invalid JSON (a NUL byte at offset 0; JSON text holds none)");
  EXPECT_NE(refusal("[\"a\0b\"]"s).find("offset 3"), std::string::npos);
}

// A number too small for a double read as 0 without a word ("forward_us": 1e-400, a workload
// of zero durations), where a flag's value is refused; a subnormal, and a zero however spelt,
// read as they are, and a number too large is the parser's refusal.
TEST(JsonInput, RefusesANumberThatUnderflowsToZero) {
  EXPECT_EQ(refusal(R"({"forward_us": 1e-400})"),
            "d.json: \"forward_us\": the number 1e-400 is too small for a double, which would "
            "read it as 0");
  EXPECT_EQ(refusal("[0.5E-999]"),
            "d.json: the number 0.5E-999 is too small for a double, which would read it as 0");
  for (const char* fine : {"[1e-310]", "[0.0]", "[0e-400]", "[-0.000e5]", "[0.5e-300]"})
    EXPECT_EQ(refusal(fine), "accepted") << fine;
  EXPECT_EQ(parse_scanned_json("[1e-310]", "d.json")[0].get<double>(), 1e-310);
  EXPECT_NE(refusal("[1e400]").find("d.json: invalid JSON ("), std::string::npos);
}

}  // namespace
}  // namespace rrfp::test
