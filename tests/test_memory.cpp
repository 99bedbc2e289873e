// The memory a process may take: its cgroup's limit, read from a hierarchy laid out in a
// temporary folder as /sys/fs/cgroup lays it out under cgroup v2 and v1. Only the v2 root's
// memory.max was read: a limit on a process's own cgroup, or a v1 limit, let a run past it be
// killed without a word.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "core/memory.hpp"

namespace rrfp::test {
namespace {

namespace fs = std::filesystem;

class CgroupLimit : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("rrfp-cgroup-" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
             "-" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }
  void write(const std::string& file, const std::string& text) {
    fs::create_directories((root_ / file).parent_path());
    std::ofstream(root_ / file) << text << "\n";
  }
  std::int64_t limit(const std::string& membership) const {
    return cgroup_limit(root_.string(), membership);
  }
  fs::path root_;
};

TEST_F(CgroupLimit, V2ReadsTheOwnCgroupAndEveryCgroupAboveIt) {
  write("a/b/memory.max", "max");
  write("a/memory.max", "419430400");
  EXPECT_EQ(limit("0::/a/b\n"), 419430400);
  write("a/b/memory.max", "209715200");
  EXPECT_EQ(limit("0::/a/b\n"), 209715200);  // the least
  EXPECT_EQ(limit("0::/a/b/\n"), 209715200);
}

TEST_F(CgroupLimit, V1ReadsTheMemoryControllersHierarchy) {
  write("memory/job/memory.limit_in_bytes", "419430400");
  write("memory/memory.limit_in_bytes", "9223372036854771712");  // v1's "unlimited"
  write("cpu/job/memory.limit_in_bytes", "1000");                // not the memory controller
  EXPECT_EQ(limit("12:cpu,cpuacct:/job\n5:memory:/job\n0::/\n"), 419430400);
  EXPECT_EQ(limit("5:cpuset,memory:/job\n"), 419430400);
  EXPECT_EQ(limit("5:memory:/\n"), 0);
}

TEST_F(CgroupLimit, NoneWhereNoFileSaysOneAndTheLeastOfBothHierarchies) {
  EXPECT_EQ(limit(""), 0);
  EXPECT_EQ(limit("0::/\n"), 0);
  EXPECT_EQ(limit("garbage\n::\n"), 0);
  write("memory.max", "max");
  EXPECT_EQ(limit("0::/\n"), 0);
  write("memory.max", "104857600");  // a container's own root
  EXPECT_EQ(limit("0::/\n"), 104857600);
  write("memory/x/memory.limit_in_bytes", "52428800");
  EXPECT_EQ(limit("3:memory:/x\n0::/\n"), 52428800);
}

}  // namespace
}  // namespace rrfp::test
