// How long this machine leaves a ready process unscheduled, with no rrfp code involved: the
// yardstick for the slow steps of `rrfp run --transport mpi` (docs/results-twin.md).
//
// --procs processes (default 4, as a P=4 MPI run on 2 cores), each with a sleeper thread that
// wakes every --period-us and records how late it woke, and, with --copy-mib M > 0, a copier
// thread that copies an M MiB buffer every --copy-every-ms (what a rank receiving a large
// message in one copy does). Each process reports its wake-up lateness (median, p99, max, and
// how many wake-ups came more than 10, 50 and 100 ms late) and its copies' times.
//
// Usage: stall_probe [--procs 4] [--seconds 60] [--period-us 1000] [--copy-mib 0]
//                    [--copy-every-ms 20]
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

struct Flags {
  int procs = 4;
  double seconds = 60;
  int period_us = 1000;
  int copy_mib = 0;
  int copy_every_ms = 20;
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "stall_probe: %s\nusage: stall_probe [--procs 1..64] [--seconds 1..3600] "
               "[--period-us 100..100000] [--copy-mib 0..1024] [--copy-every-ms 1..10000]\n",
               why);
  std::exit(2);
}

long number(const char* flag, const char* text, long lo, long hi) {
  char* end = nullptr;
  const long v = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || v < lo || v > hi) {
    char why[160];
    std::snprintf(why, sizeof why, "%s: expected an integer in [%ld, %ld], got '%s'", flag, lo, hi,
                  text);
    usage(why);
  }
  return v;
}

Flags parse(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; i += 2) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) usage(("missing value for " + flag).c_str());
    const char* v = argv[i + 1];
    if (flag == "--procs")
      f.procs = static_cast<int>(number("--procs", v, 1, 64));
    else if (flag == "--seconds")
      f.seconds = static_cast<double>(number("--seconds", v, 1, 3600));
    else if (flag == "--period-us")
      f.period_us = static_cast<int>(number("--period-us", v, 100, 100000));
    else if (flag == "--copy-mib")
      f.copy_mib = static_cast<int>(number("--copy-mib", v, 0, 1024));
    else if (flag == "--copy-every-ms")
      f.copy_every_ms = static_cast<int>(number("--copy-every-ms", v, 1, 10000));
    else
      usage(("unknown flag " + flag).c_str());
  }
  return f;
}

double at(std::vector<double>& v, double q) {
  if (v.empty()) return 0;
  const size_t k =
      std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size() - 1)));
  std::nth_element(v.begin(), v.begin() + static_cast<long>(k), v.end());
  return v[k];
}

// One process's measurement, as a line for its parent.
std::string probe(const Flags& f, int id) {
  const auto end = Clock::now() + std::chrono::duration<double>(f.seconds);
  std::atomic<bool> done{false};
  std::vector<double> copies_ms;
  std::thread copier;
  if (f.copy_mib > 0)
    copier = std::thread([&] {
      const size_t bytes = static_cast<size_t>(f.copy_mib) << 20;
      std::vector<char> a(bytes, 1), b(bytes, 0);  // touched: no page faults inside the clock
      auto next = Clock::now();
      while (!done.load()) {
        const auto t0 = Clock::now();
        std::memcpy(b.data(), a.data(), bytes);
        copies_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
        next += std::chrono::milliseconds(f.copy_every_ms);
        std::this_thread::sleep_until(next);
      }
    });
  std::vector<double> late_ms;
  auto due = Clock::now();
  while (due < end) {
    due += std::chrono::microseconds(f.period_us);
    std::this_thread::sleep_until(due);
    const auto woke = Clock::now();
    late_ms.push_back(std::chrono::duration<double, std::milli>(woke - due).count());
    if (woke > due + std::chrono::microseconds(f.period_us)) due = woke;  // no catch-up burst
  }
  done = true;
  if (copier.joinable()) copier.join();
  const auto over = [&](double ms) {
    return std::count_if(late_ms.begin(), late_ms.end(), [ms](double x) { return x > ms; });
  };
  const long n10 = over(10), n50 = over(50), n100 = over(100);
  const size_t wakes = late_ms.size();
  const double p50 = at(late_ms, 0.5), p99 = at(late_ms, 0.99), mx = at(late_ms, 1.0);
  char line[256];
  std::snprintf(line, sizeof line, "%4d %8zu %8.3f %8.3f %9.1f %6ld %6ld %6ld", id, wakes, p50, p99,
                mx, n10, n50, n100);
  std::string out = line;
  if (!copies_ms.empty()) {
    const size_t nc = copies_ms.size();
    const double c50 = at(copies_ms, 0.5), cmax = at(copies_ms, 1.0);
    std::snprintf(line, sizeof line, "   %6zu %8.2f %8.1f", nc, c50, cmax);
    out += line;
  }
  return out + "\n";
}

}  // namespace

int main(int argc, char** argv) {
  const Flags f = parse(argc, argv);
  std::printf("stall_probe: %d processes, %.0f s, wake every %d us%s\n", f.procs, f.seconds,
              f.period_us,
              f.copy_mib > 0 ? (", copy " + std::to_string(f.copy_mib) + " MiB every " +
                                std::to_string(f.copy_every_ms) + " ms")
                                   .c_str()
                             : ", no copies");
  std::printf("proc    wakes  late_p50  late_p99  late_max  >10ms  >50ms >100ms%s\n",
              f.copy_mib > 0 ? "   copies  copy_p50 copy_max" : "");
  std::fflush(stdout);
  std::vector<int> fds;
  std::vector<pid_t> kids;
  for (int i = 0; i < f.procs; ++i) {
    int p[2];
    if (pipe(p) != 0) return 1;
    const pid_t pid = fork();
    if (pid < 0) return 1;
    if (pid == 0) {
      close(p[0]);
      const std::string line = probe(f, i);
      const ssize_t w = write(p[1], line.data(), line.size());
      _exit(w == static_cast<ssize_t>(line.size()) ? 0 : 1);
    }
    close(p[1]);
    fds.push_back(p[0]);
    kids.push_back(pid);
  }
  int rc = 0;
  for (int i = 0; i < f.procs; ++i) {
    char buf[512];
    const ssize_t n = read(fds[static_cast<size_t>(i)], buf, sizeof buf - 1);
    if (n > 0) std::fwrite(buf, 1, static_cast<size_t>(n), stdout);
    int status = 0;
    waitpid(kids[static_cast<size_t>(i)], &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) rc = 1;
  }
  return rc;
}
