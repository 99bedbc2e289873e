// Saving a checkpoint (train/checkpoint.hpp): a full disk keeps the previous one, a link's
// target is saved and the link kept, and a signal's handler removes the temporary being written;
// and values no save writes, sealed with a valid checksum, refused at load.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.hpp"
#include "core/output_file.hpp"
#include "expect_error.hpp"
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

// A checkpoint (8-byte magic, 4-byte version, the header's length, the header, the parameters,
// AdamW's first and then second moments, a checksum) with float `k` of tensor `name` in group
// `group` (0 parameters, 1 and 2 the moments) set to `v`, sealed anew: what a checksum alone
// lets through.
std::string with_value(std::string bytes, const std::string& name, int group, int k, float v) {
  std::uint64_t hlen = 0;
  std::memcpy(&hlen, bytes.data() + 12, sizeof hlen);
  const auto header = nlohmann::json::parse(bytes.substr(20, hlen));
  std::size_t at = 0, total = 0;
  for (const auto& t : header.at("tensors")) {
    if (t.at("name") == name) at = total;
    std::size_t n = sizeof(float);
    for (const auto d : t.at("shape"))
      n *= d.get<std::size_t>();
    total += n;
  }
  std::memcpy(bytes.data() + 20 + hlen + group * total + at + k * sizeof v, &v, sizeof v);
  bytes.resize(bytes.size() - 8);
  const std::uint64_t sum = checkpoint_checksum(bytes);
  bytes.append(reinterpret_cast<const char*>(&sum), sizeof sum);
  return bytes;
}

// A resume from them failed a step or two later (exit 1), or trained on with a NaN in an
// embedding row no batch reached.
TEST(Checkpoint, ValuesNoRunWritesAreRefused) {
  const Case c{"fixed 1f1b", 2, 1, "1f1b", Policy::Fixed, false};
  const TrainOptions o = options(c, 0);
  const std::string path = ::testing::TempDir() + "rrfp-values.bin";
  Trainer t(o);
  t.step();
  t.save(path);
  const std::string good = read_bytes(path);
  auto load = [&](const std::string& bytes) {
    std::ofstream(path, std::ios::binary) << bytes;
    Trainer(o).resume(path);
  };
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_ERROR(load(with_value(good, "head.out.bias", 0, 3, nan)), InputError,
               "holds NaN at element 3 in tensor 'head.out.bias', which no run writes: the file "
               "is damaged, or not a run's");
  EXPECT_ERROR(load(with_value(good, "embed.tokens", 1, 0, -inf)), InputError,
               "holds -inf at element 0 in tensor 'embed.tokens' (AdamW's first moment)");
  EXPECT_ERROR(load(with_value(good, "block0.fc1.weight", 2, 7, -1e-30f)), InputError,
               "holds -1e-30 at element 7 in tensor 'block0.fc1.weight' (AdamW's second moment)");
  // A negative first moment, and a second of -0, are a run's.
  EXPECT_NO_THROW(load(with_value(good, "block0.fc1.weight", 1, 7, -1e-30f)));
  EXPECT_NO_THROW(load(with_value(good, "block0.fc1.weight", 2, 7, -0.0f)));
}

}  // namespace
}  // namespace rrfp::train
