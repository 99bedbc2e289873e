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

std::filesystem::path landing(const std::string& path, std::error_code& ec) {
  namespace fs = std::filesystem;
  fs::path p = fs::absolute(path, ec);
  std::error_code link;
  for (int hops = 0; !ec && hops < 40 && fs::is_symlink(fs::symlink_status(p, link)); ++hops) {
    const fs::path to = fs::read_symlink(p, link);
    if (link) break;
    p = to.is_absolute() ? to : p.parent_path() / to;
  }
  return ec ? fs::path() : fs::weakly_canonical(p, ec);
}

bool same_place(const std::string& a, const std::string& b) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::exists(a, ec) && fs::exists(b, ec)) return fs::equivalent(a, b, ec) && !ec;
  const fs::path ca = landing(a, ec);
  const fs::path cb = ec ? fs::path() : landing(b, ec);
  if (!ec) return ca == cb;
  const auto pa = place_of(a), pb = place_of(b);
  return pa && pb ? *pa == *pb : a == b;
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
