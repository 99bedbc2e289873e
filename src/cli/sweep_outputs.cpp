#include "cli/sweep_outputs.hpp"

#include <filesystem>
#include <system_error>
#include <vector>

#include "core/error.hpp"
#include "core/printable.hpp"

namespace rrfp {

std::string partial_name(const std::string& path) {
  const std::size_t slash = path.find_last_of('/');
  const std::size_t dot = path.find_last_of('.');
  const bool ext = dot != std::string::npos && dot > (slash == std::string::npos ? 0 : slash + 1);
  return ext ? path.substr(0, dot) + ".partial" + path.substr(dot) : path + ".partial";
}

std::string stale_partials(const std::string& csv, const std::string& md) {
  std::vector<std::string> left;
  std::error_code ec;
  for (const std::string& path : {csv, md})
    if (!path.empty() && std::filesystem::exists(partial_name(path), ec))
      left.push_back(visible(partial_name(path)));
  if (left.empty()) return "";
  return "; " + left[0] + (left.size() > 1 ? " and " + left[1] : "") +
         ", of an earlier grid that was stopped, left as " +
         (left.size() > 1 ? "they were" : "it was");
}

void refuse_partial_names(const std::string& csv, const std::string& md) {
  if (md.empty()) return;
  if (partial_name(md) == csv || partial_name(csv) == md)
    throw InputError("--csv and --md: a stopped grid writes '" + partial_name(csv) + "' and '" +
                     partial_name(md) +
                     "', one of them the other output's name; give names "
                     "that do not end so");
}

}  // namespace rrfp
