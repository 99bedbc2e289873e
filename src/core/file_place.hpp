#pragma once
// Where a path lands, told without its absolute path: in a working folder whose absolute path
// is longer than PATH_MAX, std::filesystem's absolute() and canonical() fail, and the checks
// that keep one output from clobbering another or an input compared the names as typed (an
// SVG written over the JSON report, a report written into the trace folder it read).
#include <sys/types.h>

#include <filesystem>
#include <optional>
#include <string>

namespace rrfp {

// An existing file (links followed) as its device and inode; a path that does not exist yet as
// its folder's, with its own name.
struct FilePlace {
  dev_t dev = 0;
  ino_t ino = 0;
  std::string name;  // empty for an existing file
  bool operator==(const FilePlace&) const = default;
};

// Where `path` lands; nullopt where neither it nor its folder can be looked at.
std::optional<FilePlace> place_of(const std::string& path);

// Where writing `path` lands, absolute and normal: a final symbolic link is followed first,
// since weakly_canonical leaves one whose target does not exist yet as it is. `ec` is set where
// there is no absolute path (a working folder past PATH_MAX).
std::filesystem::path landing(const std::string& path, std::error_code& ec);

// Whether `a` and `b` name one file: the same inode where both exist (a hard link, a symbolic
// link, another spelling), else the same place to land, else (no absolute path) the same folder
// and name; the names as typed where not even that can be told.
bool same_place(const std::string& a, const std::string& b);

// Whether `path` lands inside the existing folder `dir` (at any depth), found by walking up
// through ".." from `path`'s folder; false where either cannot be looked at.
bool lands_inside(const std::string& path, const std::string& dir);

}  // namespace rrfp
