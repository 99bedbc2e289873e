#pragma once
// Every file rrfp reads from a user goes through here: one reader that knows what kind of input
// it is, so that no input is read without a size and type bound (docs/reliability.md).
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "core/error.hpp"

namespace rrfp {

// An input that is not there, or a folder where a file is wanted: InputErrors (the CLI's exit 2)
// that Python raises as FileNotFoundError and IsADirectoryError, as its own open() would (they
// were ValueErrors).
class MissingInputError : public InputError {
 public:
  using InputError::InputError;
};
class InputIsDirectoryError : public InputError {
 public:
  using InputError::InputError;
};

// A kind of input file: the option that names it (for messages), the most bytes it may hold,
// and for text the longest line.
struct InputKind {
  const char* option;
  std::uint64_t max_bytes;
  std::size_t max_line = 0;       // 0: binary
  std::string_view cap_reason{};  // where the cap comes from, said with it where not empty
};

inline constexpr InputKind kWorkloadFile{"workload_file", 1ull << 20, 64u << 10};
inline constexpr InputKind kReplayFile{"replay", 256ull << 20, 4u << 10};
inline constexpr InputKind kReplayTrace{"replay", 256ull << 20, 0};  // JSON: one long line

// The whole file. Throws InputError naming the option and the path when the file is missing,
// is a directory or anything but a regular file (device, FIFO, socket: never opened in a way
// that blocks), is larger than the kind allows (saying its size and the cap), or, for text, has
// a line longer than the kind allows. Kinds whose size depends on the run (hints, checkpoints)
// are built by their readers from it.
std::string read_input_file(const std::string& path, const InputKind& kind);

// The pieces a scan hands on at a time: what it holds of the file.
inline constexpr std::size_t kScanPiece = 64u << 10;

// The file as read_input_file checks it (missing, not a regular file, larger than the kind
// allows: the same InputError, and a FIFO never opened in a way that blocks), handed to `take`
// in pieces of at most kScanPiece bytes in order, for a reader that needs only a little of a
// large file but must see all of it. Stops when `take` returns false. Lines are not checked.
void scan_input_file(const std::string& path, const InputKind& kind,
                     const std::function<bool(std::string_view)>& take);

// The line check of read_input_file alone (a reader that learns the format from the text):
// throws the same InputError when a line of `text` is longer than `kind.max_line` (0: none).
void check_line_lengths(std::string_view text, const InputKind& kind, const std::string& path);

}  // namespace rrfp
