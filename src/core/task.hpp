#pragma once
// A unit of pipeline work: (kind, chunk, microbatch). See semantics.md §1.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace rrfp {

enum class Kind : std::uint8_t { F = 0, B = 1, W = 2 };
inline constexpr int kNumKinds = 3;

char kind_char(Kind k);

struct TaskId {
  Kind kind = Kind::F;
  std::int32_t chunk = 0;
  std::int32_t mb = 0;
  friend bool operator==(const TaskId&, const TaskId&) = default;
};

// "F c3 m12": the human name used in traces, reports and error messages.
std::string to_string(const TaskId& t);
// "F3:12": the compact token used in hint files.
std::string to_token(const TaskId& t);
// Parses a token written by to_token; throws InputError naming the token.
TaskId parse_token(std::string_view token);

// The task whose output an F or B takes as its data input: the same kind one chunk away (F from
// chunk - 1, B from chunk + 1). It may lie outside the model (the first forward, the last
// backward) or on the consumer's own stage; a W takes none.
std::optional<TaskId> data_producer(const TaskId& consumer);

}  // namespace rrfp

template <>
struct std::hash<rrfp::TaskId> {
  size_t operator()(const rrfp::TaskId& t) const noexcept {
    return (static_cast<size_t>(t.kind) << 56) ^ (static_cast<size_t>(t.chunk) << 28) ^
           static_cast<size_t>(t.mb);
  }
};
