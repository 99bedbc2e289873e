#pragma once
#include <string>

namespace rrfp {

// The whole file as bytes. Throws InputError "<what> '<path>'" when it cannot be opened,
// e.g. what = "`replay`: cannot read".
std::string read_text_file(const std::string& path, const std::string& what);

}  // namespace rrfp
