// Progress lines: redrawn in place on a terminal, a plain line at most once an interval into a
// file, nothing when hidden; and the ticker thread that writes them for work without its own.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <regex>
#include <string>
#include <thread>

#include "core/progress_line.hpp"
#include "core/progress_ticker.hpp"

namespace rrfp {
namespace {

// 200 ms between two lines in a log: the checks that no line is due yet come right after the
// interval starts, far inside it even on a loaded machine under a sanitizer.
constexpr std::int64_t kShortNs = 200'000'000;

std::string read_all(std::FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string s;
  for (int c = std::fgetc(f); c != EOF; c = std::fgetc(f))
    s += static_cast<char>(c);
  return s;
}

void past_interval() {
  std::this_thread::sleep_for(std::chrono::milliseconds(250));
}

TEST(ProgressLine, IntoAFileALineOnlyOnceItsIntervalHasPassed) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  {
    ProgressLog log(kShortNs);
    ProgressLine p(true, &log, f);
    EXPECT_FALSE(p.terminal());
    p.show("not yet");  // a short run writes nothing into its log
    past_interval();
    EXPECT_TRUE(p.due());
    EXPECT_TRUE(p.due(false));  // the terminal's redraw cadence does not hold a log back
    p.show("sweep: 3/10 grid points");
    EXPECT_FALSE(p.due());  // the interval starts again from the line written
    EXPECT_FALSE(ProgressLine(true, &log, f).due());  // for every line of the log: the next run's
    p.show("sweep: 4/10 grid points");
    past_interval();
    p.show("sweep: 9/10 grid points");
    p.finish();  // erases nothing in a file
  }
  // The time since the log's start: half a second here, a second or more on a loaded machine.
  EXPECT_TRUE(std::regex_match(read_all(f), std::regex("\\[[0-9]+ s\\] sweep: 3/10 grid points\n"
                                                       "\\[[0-9]+ s\\] sweep: 9/10 grid points\n")))
      << read_all(f);
  std::fclose(f);
}

TEST(ProgressLine, NoneDueWithinTheFirstInterval) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  {
    ProgressLog log;
    ProgressLine p(true, &log, f);
    EXPECT_FALSE(p.due());
    p.show("not yet");
  }
  EXPECT_EQ(read_all(f), "");
  std::fclose(f);
}

// A line into a pipe whose reader is gone (`rrfp sweep ... 2>&1 | head -1`) is lost, and the
// work goes on: SIGPIPE's default action ended a sweep with its grid points done unwritten.
TEST(ProgressLine, AReaderGoneLosesTheLineNotTheProcess) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  ::close(fds[0]);
  std::FILE* f = ::fdopen(fds[1], "w");
  ASSERT_NE(f, nullptr);
  {
    ProgressLog log(kShortNs);
    ProgressLine p(true, &log, f);
    past_interval();
    ASSERT_TRUE(p.due());
    p.show("sweep: 47/60 grid points");  // the process ended here, exit 141
    p.finish();
  }
  sigset_t pending;
  ASSERT_EQ(::sigpending(&pending), 0);
  EXPECT_FALSE(sigismember(&pending, SIGPIPE));  // none left for a later unblocking to deliver
  std::fclose(f);
}

TEST(ProgressLine, HiddenPrintsNothing) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  {
    ProgressLog log(kShortNs);
    ProgressLine p(false, &log, f);
    past_interval();
    EXPECT_FALSE(p.due());
    p.show("anything");
  }
  EXPECT_EQ(read_all(f), "");
  std::fclose(f);
}

TEST(ProgressLine, OnATerminalRedrawnInPlaceAndErased) {
  const int master = ::posix_openpt(O_RDWR | O_NOCTTY);
  if (master < 0 || ::grantpt(master) != 0 || ::unlockpt(master) != 0)
    GTEST_SKIP() << "no pseudo-terminal on this machine";
  const int slave = ::open(::ptsname(master), O_RDWR | O_NOCTTY);
  ASSERT_GE(slave, 0);
  std::FILE* tty = ::fdopen(slave, "w");
  ASSERT_NE(tty, nullptr);
  {
    ProgressLog log(kShortNs);
    ProgressLine p(true, &log, tty);
    if (!p.terminal()) GTEST_SKIP() << "the pseudo-terminal is not taken for a terminal here";
    EXPECT_TRUE(p.due());
    EXPECT_FALSE(p.due(false));  // on a terminal the caller's cadence decides
    p.show("a: 1 of 2 tasks (50%)");
    p.show("a: 2 of 2 tasks (100%)");
  }  // the destructor erases the line
  std::fclose(tty);
  // Read until the whole text is in (a pseudo-terminal may hand it over in parts).
  const std::string want = "\ra: 1 of 2 tasks (50%)\033[K\ra: 2 of 2 tasks (100%)\033[K\r\033[K";
  std::string got;
  ::fcntl(master, F_SETFL, O_NONBLOCK);
  for (int tries = 0; got.size() < want.size() && tries < 500; ++tries) {
    char buf[256];
    const ssize_t n = ::read(master, buf, sizeof buf);
    if (n > 0)
      got.append(buf, static_cast<std::size_t>(n));
    else
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ::close(master);
  EXPECT_EQ(got, want);
}

// The ticker: its own thread writes what its owner says is under way, into a log at the
// log's interval, and nothing hidden or within the interval.
void sleep_ms(int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

int lines(const std::string& s, const std::string& text) {
  int n = 0;
  for (std::size_t at = s.find(text); at != std::string::npos; at = s.find(text, at + 1))
    ++n;
  return n;
}

TEST(ProgressTicker, WritesWhatIsUnderWayAtTheLogsInterval) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  ProgressLog log(kShortNs);
  const auto start = std::chrono::steady_clock::now();
  {
    ProgressTicker ticker("plan: drawing the work", true, &log, f);
    sleep_ms(700);  // past three intervals: a line, however loaded the machine
    ticker.status("plan: searching");
    sleep_ms(700);
  }
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  const std::string out = read_all(f);
  EXPECT_TRUE(std::regex_search(out, std::regex("^\\[[0-9]+ s\\] plan: drawing the work\n")))
      << out;
  EXPECT_TRUE(std::regex_search(out, std::regex("\\[[0-9]+ s\\] plan: searching\n$"))) << out;
  // No more often than the interval: at most one line an interval of the time it ran.
  const int n = lines(out, "plan: ");
  EXPECT_LE(n, static_cast<int>(ms * 1e6 / kShortNs) + 1) << out;
  std::fclose(f);
}

TEST(ProgressTicker, HiddenOrShortWritesNothing) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  {
    ProgressLog log(kShortNs);
    ProgressTicker hidden("sweep: 1/2 grid points", false, &log, f);
    sleep_ms(500);
  }
  {
    ProgressLog log;  // 30 s: a short piece of work writes nothing into a log
    ProgressTicker brief("sweep: 1/2 grid points", true, &log, f);
    sleep_ms(100);
  }
  EXPECT_EQ(read_all(f), "");
  std::fclose(f);
}

// A described status is asked each time a line falls due: "" shows nothing (a training step
// not yet long), and its text is shown as it says; idle() shows nothing more.
TEST(ProgressTicker, ADescribedStatusIsAskedWhenALineIsDue) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  ProgressLog log(kShortNs);
  std::atomic<int> asked{0};
  {
    ProgressTicker ticker("", true, &log, f);
    sleep_ms(500);  // nothing under way: nothing written
    ticker.status([&asked]() -> std::string {
      return ++asked < 3 ? "" : "step 1/2: " + std::to_string(asked.load()) + " asked";
    });
    sleep_ms(1500);
    ticker.idle();
    const int before = asked.load();
    sleep_ms(500);
    EXPECT_EQ(asked.load(), before) << "asked after idle()";
  }
  const std::string out = read_all(f);
  EXPECT_TRUE(std::regex_search(out, std::regex("^\\[[0-9]+ s\\] step 1/2: [0-9]+ asked\n")))
      << out;
  EXPECT_EQ(lines(out, "step 1/2: 1 asked") + lines(out, "step 1/2: 2 asked"), 0) << out;
  EXPECT_EQ(out.find(" s)"), std::string::npos) << "the ticker's seconds added: " << out;
  std::fclose(f);
}

}  // namespace
}  // namespace rrfp
