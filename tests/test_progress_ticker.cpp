// A progress ticker: its own thread writes what its owner says is under way, into a log at the
// log's interval, and nothing once it is gone or hidden.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <regex>
#include <string>
#include <thread>

#include "core/progress_ticker.hpp"

namespace rrfp {
namespace {

constexpr std::int64_t kIntervalNs = 200'000'000;

std::string read_all(std::FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string s;
  for (int c = std::fgetc(f); c != EOF; c = std::fgetc(f))
    s += static_cast<char>(c);
  return s;
}

void wait_ms(int ms) {
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
  ProgressLog log(kIntervalNs);
  const auto start = std::chrono::steady_clock::now();
  {
    ProgressTicker ticker("plan: drawing the work", true, &log, f);
    wait_ms(700);  // past three intervals: a line, however loaded the machine
    ticker.status("plan: searching");
    wait_ms(700);
  }
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  const std::string out = read_all(f);
  EXPECT_TRUE(std::regex_search(out, std::regex("^\\[[0-9]+ s\\] plan: drawing the work\n")))
      << out;
  EXPECT_TRUE(std::regex_search(out, std::regex("\\[[0-9]+ s\\] plan: searching\n$"))) << out;
  // No more often than the interval: at most one line an interval of the time it ran.
  const int n = lines(out, "plan: ");
  EXPECT_LE(n, static_cast<int>(ms * 1e6 / kIntervalNs) + 1) << out;
  // Gone, it writes nothing more.
  wait_ms(450);
  EXPECT_EQ(read_all(f), out);
  std::fclose(f);
}

TEST(ProgressTicker, HiddenOrShortWritesNothing) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  {
    ProgressLog log(kIntervalNs);
    ProgressTicker hidden("sweep: 1/2 grid points", false, &log, f);
    wait_ms(500);
  }
  {
    ProgressLog log;  // 30 s: a short piece of work writes nothing into a log
    ProgressTicker brief("sweep: 1/2 grid points", true, &log, f);
    wait_ms(100);
  }
  EXPECT_EQ(read_all(f), "");
  std::fclose(f);
}

}  // namespace
}  // namespace rrfp
