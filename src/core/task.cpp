#include "core/task.hpp"

#include <charconv>

#include "core/error.hpp"
#include "core/printable.hpp"

namespace rrfp {

char kind_char(Kind k) {
  switch (k) {
    case Kind::F:
      return 'F';
    case Kind::B:
      return 'B';
    case Kind::W:
      return 'W';
  }
  return '?';
}

std::string to_string(const TaskId& t) {
  return std::string(1, kind_char(t.kind)) + " c" + std::to_string(t.chunk) + " m" +
         std::to_string(t.mb);
}

std::string to_token(const TaskId& t) {
  return std::string(1, kind_char(t.kind)) + std::to_string(t.chunk) + ":" + std::to_string(t.mb);
}

namespace {
// Digits only: from_chars took "-0" for 0 (F-0:0 ran as F0:0, where F+0:0 was refused). A
// number of digits past the type's range is named as such (it read "bad task token").
bool parse_int(std::string_view s, std::int32_t& out, std::string_view token) {
  if (s.empty() || s.front() < '0' || s.front() > '9') return false;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  if (ec == std::errc::result_out_of_range && ptr == s.data() + s.size())
    throw InputError("task token '" + printable(token) + "': " + printable(s, 30) +
                     " is past any run's chunks and microbatches (at most 2147483647)");
  return ec == std::errc() && ptr == s.data() + s.size() && out >= 0;
}
}  // namespace

TaskId parse_token(std::string_view token) {
  auto bad = [&] {
    return InputError("bad task token '" + printable(token) +
                      "' (expected KIND CHUNK:MB such as F3:12, kind one of F B W)");
  };
  if (token.size() < 4) throw bad();
  TaskId t;
  switch (token[0]) {
    case 'F':
      t.kind = Kind::F;
      break;
    case 'B':
      t.kind = Kind::B;
      break;
    case 'W':
      t.kind = Kind::W;
      break;
    default:
      throw bad();
  }
  auto colon = token.find(':');
  if (colon == std::string_view::npos) throw bad();
  if (!parse_int(token.substr(1, colon - 1), t.chunk, token)) throw bad();
  if (!parse_int(token.substr(colon + 1), t.mb, token)) throw bad();
  return t;
}

std::optional<TaskId> data_producer(const TaskId& consumer) {
  if (consumer.kind == Kind::W) return std::nullopt;
  return TaskId{consumer.kind, consumer.kind == Kind::F ? consumer.chunk - 1 : consumer.chunk + 1,
                consumer.mb};
}

}  // namespace rrfp
