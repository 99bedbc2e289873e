#pragma once
// For a test of what a signal handler does mid-write: while it lives, SIGXFSZ runs `handler`
// and the file size limit is `bytes`, so that a write past it raises the signal in the writing
// thread at a known point; both restored when it goes.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <csignal>

namespace rrfp::test {

class FileSizeSignal {
 public:
  FileSizeSignal(void (*handler)(int), rlim_t bytes) {
    struct sigaction sa {};
    sa.sa_handler = handler;
    sigemptyset(&sa.sa_mask);
    EXPECT_EQ(::sigaction(SIGXFSZ, &sa, &old_sa_), 0);
    EXPECT_EQ(::getrlimit(RLIMIT_FSIZE, &old_lim_), 0);
    rlimit lim = old_lim_;
    lim.rlim_cur = bytes;
    EXPECT_EQ(::setrlimit(RLIMIT_FSIZE, &lim), 0);
  }
  ~FileSizeSignal() {
    ::setrlimit(RLIMIT_FSIZE, &old_lim_);
    ::sigaction(SIGXFSZ, &old_sa_, nullptr);
  }
  FileSizeSignal(const FileSizeSignal&) = delete;
  FileSizeSignal& operator=(const FileSizeSignal&) = delete;

 private:
  struct sigaction old_sa_ {};
  rlimit old_lim_{};
};

}  // namespace rrfp::test
