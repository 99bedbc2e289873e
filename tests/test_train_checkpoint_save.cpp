// Saving a checkpoint (train/checkpoint.hpp): a full disk keeps the previous one, a link's
// target is saved and the link kept, and a signal's handler removes the temporary being written.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <string>

#include "core/error.hpp"
#include "core/output_file.hpp"
#include "file_size_signal.hpp"
#include "train/trainer.hpp"
#include "train_cases.hpp"
#include "train_helpers.hpp"

namespace rrfp::train {
namespace {

// A full disk during a save: the write fails with ENOSPC (PATH.tmp is made a link to /dev/full,
// which refuses every write that way), the error says so, the partial file is removed and the
// previous checkpoint still loads.
TEST(Checkpoint, AFullDiskLeavesThePreviousCheckpoint) {
  const Case c{"fixed 1f1b", 2, 1, "1f1b", Policy::Fixed, false};
  const TrainOptions o = options(c, 0);
  const std::string path = ::testing::TempDir() + "rrfp-full.bin";
  Trainer t(o);
  t.save(path);
  const std::string before = read_bytes(path);
  t.step();
  ::unlink((path + ".tmp").c_str());
  ASSERT_EQ(::symlink("/dev/full", (path + ".tmp").c_str()), 0);
  try {
    t.save(path);
    ADD_FAILURE() << "a save onto a full disk succeeded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("No space left on device"), std::string::npos) << e.what();
  }
  struct stat st;
  EXPECT_NE(::lstat((path + ".tmp").c_str(), &st), 0) << "the partial file was left behind";
  EXPECT_EQ(read_bytes(path), before);
  EXPECT_EQ(refusal(path, o), "accepted");
}

// A checkpoint a link names (to a larger disk): its target is saved, and the link stays. The
// rename replaced the link with a file, and left the target at the earlier step.
TEST(Checkpoint, ASaveThroughALinkReplacesItsTarget) {
  const Case c{"fixed 1f1b", 2, 1, "1f1b", Policy::Fixed, false};
  const TrainOptions o = options(c, 0);
  const std::string target = ::testing::TempDir() + "rrfp-linked-target.bin";
  const std::string link = ::testing::TempDir() + "rrfp-link.bin";
  Trainer t(o);
  t.save(target);
  const std::string before = read_bytes(target);
  ::unlink(link.c_str());
  ASSERT_EQ(::symlink(target.c_str(), link.c_str()), 0);
  t.step();
  t.save(link);
  struct stat st;
  ASSERT_EQ(::lstat(link.c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode)) << "the link was replaced by a file";
  EXPECT_NE(read_bytes(target), before) << "the link's target kept the earlier step";
  EXPECT_NE(::lstat((target + ".tmp").c_str(), &st), 0) << "a temporary was left behind";
  EXPECT_NE(::lstat((link + ".tmp").c_str(), &st), 0) << "a temporary was left behind";
  EXPECT_EQ(refusal(link, o), "accepted");
  // Made before the first save (the usual way): its target is made there, the link kept.
  ::unlink(target.c_str());
  t.save(link);
  ASSERT_EQ(::lstat(link.c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode)) << "a dangling link was replaced by a file";
  EXPECT_EQ(refusal(target, o), "accepted");
  ::unlink(link.c_str());
  ::unlink(target.c_str());
}

// A second signal ends `train` at once, its handler removing the temporary being written: a
// checkpoint's (of the model's size, 200 MB and more) was left behind, not named to it. The
// signal is SIGXFSZ, which a write past the file size limit raises mid-write in the writing
// thread, for a handler that does as the stop signal's does.
char g_checkpoint_tmp[512];
volatile sig_atomic_t g_tmp_before = -1, g_tmp_after = -1;

void on_checkpoint_size_limit(int) {
  const int saved = errno;
  g_tmp_before = ::access(g_checkpoint_tmp, F_OK) == 0;
  remove_temporary_in_progress();
  g_tmp_after = ::access(g_checkpoint_tmp, F_OK) == 0;
  errno = saved;
}

TEST(Checkpoint, ASignalHandlerRemovesItsTemporary) {
  const Case c{"fixed 1f1b", 2, 1, "1f1b", Policy::Fixed, false};
  Trainer t(options(c, 0));
  const std::string path = ::testing::TempDir() + "rrfp-signalled.bin";
  const std::string tmp = path + ".tmp";
  ASSERT_LT(tmp.size(), sizeof g_checkpoint_tmp);
  std::memcpy(g_checkpoint_tmp, tmp.c_str(), tmp.size() + 1);
  {
    const test::FileSizeSignal limit(on_checkpoint_size_limit, 4096);  // the header fits
    EXPECT_THROW(t.save(path), Error);
  }
  EXPECT_EQ(g_tmp_before, 1);
  EXPECT_EQ(g_tmp_after, 0);
  EXPECT_FALSE(std::filesystem::exists(path));
}

}  // namespace
}  // namespace rrfp::train
