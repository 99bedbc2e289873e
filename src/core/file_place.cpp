#include "core/file_place.hpp"

#include <sys/stat.h>

#include <filesystem>

namespace rrfp {

namespace {

std::optional<FilePlace> stat_place(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  return FilePlace{st.st_dev, st.st_ino, {}};
}

// `path`'s folder, as a path this process can stat: "." for a bare name.
std::string containing_folder(const std::string& path) {
  const std::filesystem::path p(path);
  const std::string dir = p.parent_path().string();
  return dir.empty() ? "." : dir;
}

}  // namespace

std::optional<FilePlace> place_of(const std::string& path) {
  if (auto here = stat_place(path)) return here;
  const std::string name = std::filesystem::path(path).filename().string();
  if (name.empty() || name == "." || name == "..") return std::nullopt;
  auto dir = stat_place(containing_folder(path));
  if (!dir) return std::nullopt;
  dir->name = name;
  return dir;
}

bool lands_inside(const std::string& path, const std::string& dir) {
  const auto target = stat_place(dir);
  if (!target) return false;
  std::string up = containing_folder(path);
  // Each step up adds "/..": past about 1,360 levels the path is longer than PATH_MAX and
  // stat fails, which ends the walk (false).
  for (int level = 0; level < 2048; ++level) {
    const auto here = stat_place(up);
    if (!here) return false;
    if (*here == *target) return true;
    const auto parent = stat_place(up + "/..");
    if (!parent || *parent == *here) return false;  // the root: its ".." is itself
    up += "/..";
  }
  return false;
}

}  // namespace rrfp
