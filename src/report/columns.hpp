// The text columns of the report's tables (table.cpp, predict_format.cpp): nanoseconds as
// milliseconds, and a cell padded to its column's width on the right or the left.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace rrfp::columns {

inline double ms(std::int64_t ns) {
  return static_cast<double>(ns) / 1e6;
}

inline std::string pad(std::string s, std::size_t w) {
  if (s.size() < w) s += std::string(w - s.size(), ' ');
  return s;
}

inline std::string lpad(std::string s, std::size_t w) {
  if (s.size() < w) s = std::string(w - s.size(), ' ') + s;
  return s;
}

}  // namespace rrfp::columns
