#include "core/text_file.hpp"

#include <fstream>
#include <sstream>

#include "core/error.hpp"

namespace rrfp {

std::string read_text_file(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(what + " '" + path + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace rrfp
