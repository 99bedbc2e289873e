#include "cli/stdout_stream.hpp"

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <iostream>
#include <streambuf>

namespace rrfp {

namespace {

std::atomic<bool> g_failed{false};
std::atomic<int> g_errno{0};
std::atomic<void (*)(int)> g_hook{nullptr};

// Notes the first failure with the errno the failing stdio call left: asked right after it,
// nothing else has changed errno in this thread.
void note_failure() {
  const int err = errno;
  bool none = false;
  if (!g_failed.compare_exchange_strong(none, true)) return;
  g_errno.store(err);
  if (auto* hook = g_hook.load()) hook(err);
}

// std::cout's buffer: every write goes to stdio's stdout at once, as libstdc++'s own
// synchronised buffer does, and a stdio error is noted as it happens. Failing, it returns
// failure, so std::cout goes bad and later writes are dropped.
class StdioOut final : public std::streambuf {
 protected:
  int_type overflow(int_type c) override {
    if (traits_type::eq_int_type(c, traits_type::eof()))
      return sync() == 0 ? traits_type::not_eof(c) : traits_type::eof();
    std::putc(traits_type::to_char_type(c), stdout);
    return checked() ? c : traits_type::eof();
  }

  std::streamsize xsputn(const char* s, std::streamsize n) override {
    const std::size_t done = std::fwrite(s, 1, static_cast<std::size_t>(n), stdout);
    return checked() ? static_cast<std::streamsize>(done) : 0;
  }

  int sync() override {
    std::fflush(stdout);
    return checked() ? 0 : -1;
  }

 private:
  // Whether stdout is still sound; its first error noted.
  static bool checked() {
    if (!std::ferror(stdout)) return true;
    note_failure();
    return false;
  }
};

}  // namespace

void watch_stdout() {
  // Never destroyed: std::cout is flushed at exit, after static objects may be gone.
  static auto* const buffer = new StdioOut;
  std::cout.rdbuf(buffer);
}

bool stdout_failed() {
  return g_failed.load();
}

int stdout_errno() {
  return g_errno.load();
}

void on_stdout_failure(void (*hook)(int err)) {
  g_hook.store(hook);
}

}  // namespace rrfp
