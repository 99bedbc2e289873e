#pragma once
// Numbers in messages and reports, formatted one way for every layer.
#include <cstdint>
#include <string>

namespace rrfp {

// printf-formats one number: fmt("%.2f", x), fmt("%g", x).
std::string fmt(const char* printf_format, double v);
// "1.5 GiB", "12 KiB", "300 bytes": sizes in messages.
std::string format_bytes(std::uint64_t n);

}  // namespace rrfp
