// The output side of core's file handling: a FIFO the check holds open for the write, and what
// happens when the path stops naming it between the two.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/output_file.hpp"
#include "file_size_signal.hpp"

namespace rrfp {
namespace {

// A folder of its own under the test's temporary folder, and the readers of FIFOs there, let
// go when the test ends.
class OutputFiles : public ::testing::Test {
 protected:
  void TearDown() override {
    for (const int r : readers_)
      ::close(r);
    for (const auto& d : dirs_)
      std::filesystem::remove_all(d);
  }
  // A FIFO `file` in a folder of its own, with a reader open on it (`reader`: -1 if none).
  std::string fifo_with_reader(const std::string& name, const std::string& file, int& reader) {
    const std::string fifo = fresh_dir(name) + "/" + file;
    EXPECT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    reader = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK);
    if (reader >= 0) readers_.push_back(reader);
    return fifo;
  }
  std::string fresh_dir(const std::string& name) {
    const auto dir = std::filesystem::path(::testing::TempDir()) /
                     ("rrfp-output-" + name + "-" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    dirs_.push_back(dir);
    return dir.string();
  }

 private:
  std::vector<std::filesystem::path> dirs_;
  std::vector<int> readers_;
};

std::string contents(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST_F(OutputFiles, AFifoWithItsReaderIsHeldFromTheCheckToTheWrite) {
  int reader = -1;
  const std::string fifo = fifo_with_reader("held", "fifo", reader);
  ASSERT_GE(reader, 0);
  check_output_path(fifo, "`json`: 'fifo'");
  const int fd = open_output(fifo, "`json`: 'fifo'");
  write_all(fd, "report", "`json`");
  ::close(fd);
  char buf[16] = {};
  EXPECT_EQ(::read(reader, buf, sizeof buf), 6);
  EXPECT_EQ(std::string(buf, 6), "report");
}

TEST_F(OutputFiles, AFifoWithNoReaderIsRefusedByTheCheck) {
  const std::string fifo = fresh_dir("lonely") + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  try {
    check_output_path(fifo, "`json`: 'fifo'");
    FAIL() << "accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("`json`: 'fifo' is a FIFO with no reader"),
              std::string::npos)
        << e.what();
  }
}

// The FIFO checked was replaced by a file before the write: the write goes to the file the path
// now names (it went into the held FIFO, and the file stayed empty).
TEST_F(OutputFiles, AFifoReplacedAfterTheCheckIsLetGo) {
  int reader = -1;
  const std::string fifo = fifo_with_reader("replaced", "out", reader);
  ASSERT_GE(reader, 0);
  check_output_path(fifo, "`json`: 'out'");
  ASSERT_EQ(::unlink(fifo.c_str()), 0);
  std::ofstream(fifo) << "old";
  const int fd = open_output(fifo, "`json`: 'out'");
  write_all(fd, "new", "`json`");
  ::close(fd);
  EXPECT_EQ(contents(fifo), "new");
  char buf[8] = {};
  EXPECT_LE(::read(reader, buf, sizeof buf), 0);  // nothing went into the FIFO
}

// The hidden temporaries of replace_file in `dir`.
int temporaries_in(const std::string& dir) {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    n += e.path().filename().string().starts_with(".rrfp-");
  return n;
}

// Seen from a signal handler in the middle of replace_file's write: whether the temporary was
// there, and whether remove_temporary_in_progress() took it away. Only async-signal-safe calls
// (access), on a name made before: the temporary's, the first of this process in the folder.
char g_temporary_name[4096];
int g_before = -1, g_after = -1;
void on_file_size_limit(int) {
  const int saved = errno;  // the interrupted write's EFBIG is read after the handler
  g_before = ::access(g_temporary_name, F_OK) == 0;
  remove_temporary_in_progress();
  g_after = ::access(g_temporary_name, F_OK) == 0;
  errno = saved;
}

// A second signal ends a command at once: the file it was replacing had its temporary left
// behind. The signal is SIGXFSZ, which a write past the file size limit raises in the writing
// thread at a known point (mid-write), for a handler that removes the temporary as a stop
// signal's does.
TEST_F(OutputFiles, ASignalHandlerRemovesTheTemporaryBeingWritten) {
  const std::string dir = fresh_dir("temporary");
  const std::string out = dir + "/report.json";
  const std::string tmp = dir + "/.rrfp-" + std::to_string(::getpid()) + "-0.tmp";
  ASSERT_LT(tmp.size(), sizeof g_temporary_name);
  std::memcpy(g_temporary_name, tmp.c_str(), tmp.size() + 1);
  {
    const test::FileSizeSignal limit(on_file_size_limit, 4096);
    EXPECT_THROW(replace_file(out, std::string(1 << 16, 'x'), "`json`"), Error);
  }
  EXPECT_EQ(g_before, 1);
  EXPECT_EQ(g_after, 0);
  EXPECT_EQ(temporaries_in(dir), 0);
  EXPECT_FALSE(std::filesystem::exists(out));
  remove_temporary_in_progress();  // none held now: nothing happens
}

}  // namespace
}  // namespace rrfp
