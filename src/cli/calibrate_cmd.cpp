// `rrfp calibrate`: what the transport delivers on this machine (dist/calibrate.hpp), written as
// a workload file's message model for the simulator (docs/twin.md).
#include <algorithm>
#include <charconv>
#include <cmath>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>

#include "cli/mpi_launch.hpp"
#include "cli/options.hpp"
#include "cli/stop_signal.hpp"
#include "core/error.hpp"
#include "core/format.hpp"
#include "core/memory.hpp"
#include "core/mpirun_env.hpp"
#include "core/printable.hpp"
#include "core/progress_ticker.hpp"
#include "dist/calibrate.hpp"
#include "dist/job.hpp"

namespace rrfp {

namespace {

struct CalibrateFlags {
  TransportKind transport = TransportKind::Inproc;
  std::string sizes = "8,64K,1M,8M,32M", out, json;
  double seconds = 8, timeout_s = 60;
  bool streams = false;
  int endpoints = 4;
};

// "64K" -> 65536; sizes from 1 byte to 1 GiB, each once (a size given twice was measured twice,
// and the two medians' difference fitted as a bandwidth).
std::vector<std::size_t> parse_sizes(const std::string& text) {
  std::vector<std::size_t> out;
  std::vector<std::string> items;
  // A trailing comma is an empty size, as a leading one is (getline dropped it: "8," ran).
  std::stringstream in(text + (text.ends_with(',') ? "," : ""));
  std::string item;
  while (std::getline(in, item, ',')) {
    // Digits, then K or M: std::stod read 0x10 as 16 and 1.9 was truncated to 1 byte.
    std::uint64_t n = 0;
    const auto [end, err] = std::from_chars(item.data(), item.data() + item.size(), n);
    const std::string unit = item.substr(static_cast<std::size_t>(end - item.data()));
    const double scale = unit.empty() ? 1 : unit == "K" ? 1 << 10 : unit == "M" ? 1 << 20 : 0;
    const double bytes = err == std::errc() ? static_cast<double>(n) * scale : 0;
    if (!(bytes >= 1 && bytes <= double(1 << 30)))
      throw InputError("--sizes: '" + printable(item, 20) +
                       "' is not a size from 1 to 1024M (a whole number of bytes, or of K or M)");
    const auto size = static_cast<std::size_t>(bytes);
    for (std::size_t i = 0; i < out.size(); ++i)
      if (out[i] == size)
        throw InputError("--sizes: '" + printable(items[i], 20) + "' and '" + printable(item, 20) +
                         "' are both " + std::to_string(size) + " bytes (each size at most once)");
    out.push_back(size);
    items.push_back(item);
  }
  if (out.empty() || out.size() > 32) throw InputError("--sizes: give 1 to 32 sizes");
  return out;
}

void report(const CalibrateFlags& f, Calibration c) {
  c.transport = to_string(f.transport);
  const std::string text = calibration_json(c);
  // Standard output however named ('-', /dev/stdout): the JSON alone, the lines for people on
  // stderr (they were left out for '-', and written into the JSON for /dev/stdout).
  const bool json_out = is_stdout(f.json);
  write_then_heed_signals([&] {
    if (!f.out.empty()) write_text_file(f.out, text, "--out");
    if (!f.json.empty() && !json_out) write_text_file(f.json, text, "--json");
  });
  std::ostream& human = json_out ? std::cerr : std::cout;
  if (json_out) std::cout << text << std::flush;
  human << format_calibration(c, "--seconds");
  // A file without a bandwidth (sizes that could not fit one) is refused by run --compare: it
  // was offered to it all the same.
  if (!f.out.empty())
    human << "wrote " << visible(f.out) << ": rrfp simulate --workload-file " << shell_word(f.out)
          << " models messages so"
          << (f.transport == TransportKind::Mpi && c.size_cost != SizeCost::Unresolved
                  ? "; rrfp run --transport mpi --compare --calibration " + shell_word(f.out) +
                        " simulates with it"
                  : std::string())
          << "\n";
}

// --timeout is checked whatever the transport (-5 and nan ran in-process), and each flag is
// refused where it does not apply, as --limit is under --policy fixed: one process's threads
// wait for nothing a timeout could bound, and an MPI job's endpoints are its processes.
void refuse_inapplicable(const CalibrateFlags& f) {
  timeout_ms_of(f.timeout_s);
  const bool mpi = f.transport == TransportKind::Mpi;
  // Refused where they would change nothing only at another value than the default, which a
  // script passing every flag gives as it is (`--timeout 60` in one process was refused).
  const CalibrateFlags defaults;
  if (mpi && f.endpoints != defaults.endpoints)
    throw InputError(
        "--endpoints: the threads of an in-process calibration; under --transport mpi the "
        "job's processes (mpirun -np) are the endpoints (got --endpoints " +
        std::to_string(f.endpoints) + ")");
  // Before the memory estimate, which blamed --sizes for an --endpoints of 300. Endpoints 0-1
  // measure and 2-3 overlap them: 3 measured what 2 does, and 5 to 64 what 4 does, the rest
  // idle, each holding three buffers of the largest size.
  if (!mpi && f.endpoints != 2 && f.endpoints != 4)
    throw InputError(
        "--endpoints: expected 2 (one pair) or 4 (a second pair transferring at once), got " +
        std::to_string(f.endpoints));
  if (!mpi && f.timeout_s != defaults.timeout_s)
    throw InputError(
        "--timeout: bounds how long an MPI job's processes wait for each other (--transport "
        "mpi); in one process no thread can be lost, and --seconds bounds the measurement (got "
        "--timeout " +
        fmt("%g", f.timeout_s) + ")");
}

// A budget the sizes cannot keep at `endpoints` is refused, not overrun (--sizes 1024M
// --seconds 0.1 took 10-23 s).
void refuse_short_budget(const CalibrateOptions& o, int endpoints, bool copied) {
  const double floor = calibration_floor_s(o, endpoints, copied);
  // Rounded up, to a tenth below 10 s: a floor of 0.57 s said "give --seconds 1", where 0.6 runs.
  const double least = floor < 10 ? std::ceil(floor * 10) / 10 : std::ceil(floor);
  if (floor > o.seconds)
    throw InputError(
        "--seconds: " + fmt("%g", o.seconds) + " s cannot hold a calibration of " +
        "these --sizes" +
        (endpoints > 2 ? " between " + std::to_string(endpoints) + " endpoints" : "") +
        ", which takes about " + fmt("%g", least) +
        " s at the least (every repetition at its fewest round trips); give --seconds " +
        fmt("%g", least) + " or more, or smaller --sizes");
}

// The processes are the endpoints: a third measured nothing, a fifth and on sat idle.
void refuse_job_size(int n) {
  if (n != 2 && n != 4)
    throw InputError(
        "--transport mpi: calibrate measures between 2 processes, or 4 (a second pair "
        "transferring at once); start it with mpirun -np 2 or 4 (got -np " +
        std::to_string(n) + ")");
}

// `o`, its sizes' progress said by `ticker`: a calibration of a minute said nothing meanwhile.
CalibrateOptions said_by(ProgressTicker& ticker, CalibrateOptions o) {
  const std::size_t n = o.sizes.size();
  o.on_size = [&ticker, n](std::size_t i, std::size_t bytes) {
    ticker.status("calibrate: size " + std::to_string(i + 1) + " of " + std::to_string(n) + ", " +
                  std::to_string(bytes) + " bytes");
  };
  return o;
}

// One process's part of a calibration over MPI, the job's processes its endpoints.
void calibrate_in_job(const CalibrateFlags& f, const CalibrateOptions& o, Job& job) {
  refuse_job_size(job.size());
  refuse_short_budget(o, job.size(), true);  // 4 processes took 19.3 s of --seconds 3
  // Rank 0 alone writes them: another node's working folder need not hold their folder.
  agree_on_input(&job, [&] {
    if (job.rank() == 0) check_outputs({{f.out, "--out"}, {f.json, "--json"}});
  });
  job.set_layout(JobLayout{job.size(), 1, 1});
  Hosting h = job.hosting();
  std::optional<ProgressTicker> ticker;
  ticker.emplace("calibrate: starting", job.rank() == 0);
  const Calibration c =
      calibrate(*h.transports.at(0), job.size(), job_meeting(job), said_by(*ticker, o));
  ticker.reset();  // its line erased before the report
  if (job.rank() == 0) report(f, c);
  job.all_gather({});  // nobody leaves while a peer may still send
}

void run_calibrate(const CalibrateFlags& f) {
  exit_on_signals("calibrate");  // it died without a word, a file possibly half written
  refuse_inapplicable(f);
  // Under an mpirun of several processes each ran a calibration of its own, all competing for
  // the cores and writing one file, exit 0.
  if (f.transport != TransportKind::Mpi) refuse_inproc_under_mpirun();
  CalibrateOptions o;
  o.sizes = parse_sizes(f.sizes);
  // Each endpoint holds about three buffers of the largest size at once (measured: a peak of
  // 12x the size at 4 endpoints, from 8 to 64 MiB); past the memory there is, or past
  // RRFP_MEMORY_LIMIT as every other command, refused rather than run into swap.
  const int here = f.transport == TransportKind::Mpi ? 1 : f.endpoints;
  check_memory(3.0 * here * static_cast<double>(*std::max_element(o.sizes.begin(), o.sizes.end())),
               "--sizes", " for " + std::to_string(here) + " endpoint(s) in this process",
               "--sizes" + std::string(here > 1 ? " or --endpoints" : ""));
  o.seconds = f.seconds;
  o.streams = f.streams;
  // Over MPI the job's size mpirun gives (else 2, the least), and its own size inside it: at
  // 4 processes the first refusal advised a --seconds the second refused, and at 3 a --seconds
  // before the size itself was refused.
  if (f.transport == TransportKind::Mpi && mpirun_world_size() > 0)
    refuse_job_size(mpirun_world_size());
  refuse_short_budget(
      o, f.transport == TransportKind::Mpi ? std::max(2, mpirun_world_size()) : f.endpoints,
      f.transport == TransportKind::Mpi);
  if (f.transport == TransportKind::Mpi) {
    o.serial_receive = true;  // one progress thread per process copies what arrives
    o.offer_payload = true;   // the runtime's default rendezvous over a transport moving bytes
    o.deadline_s = f.timeout_s;
    run_as_mpi_process(timeout_ms_of(f.timeout_s), [&](Job& job) { calibrate_in_job(f, o, job); });
    return;
  }
  std::optional<ProgressTicker> ticker;
  ticker.emplace("calibrate: starting");
  const Calibration c = calibrate_in_process(f.endpoints, said_by(*ticker, o));
  ticker.reset();
  report(f, c);
}

}  // namespace

void setup_calibrate(CLI::App& app) {
  auto f = std::make_shared<CalibrateFlags>();
  CLI::App* sub = app.add_subcommand(
      "calibrate",
      "measure what the transport delivers here (latency and bandwidth by size, alone and with "
      "two transfers at once) and write it as a workload file's message model");
  add_transport_flag(sub, f->transport, {TransportKind::Inproc, TransportKind::Mpi},
                     "inproc (threads) or mpi (under mpirun -np 2 or 4)");
  sub->add_option("--sizes", f->sizes, "message sizes, comma-separated (bytes, K or M), each once")
      ->capture_default_str();
  sub->add_option("--seconds", f->seconds,
                  "the measurement's time budget (its least depends on --sizes, and a budget "
                  "too short for them is refused saying how long they need)")
      ->check(finite_range(0.1, 3600.0))
      ->capture_default_str();
  sub->add_option("--endpoints", f->endpoints,
                  "inproc: endpoints (threads), 2 or 4: 4 measures two transfers at once (mpi "
                  "takes only the default: its endpoints are the job's processes, -np 2 or 4)")
      ->capture_default_str();
  sub->add_flag("--streams", f->streams,
                "also time one-way streams: one pair, two pairs, and both pairs both ways (four "
                "transfers at once), which then give the links");
  sub->add_option("--out", f->out, "write the workload fragment (JSON) to FILE");
  sub->add_option("--json", f->json, "write the same JSON to FILE ('-': stdout)");
  sub->add_option("--timeout", f->timeout_s,
                  "--transport mpi: seconds a process waits for the others before the job fails "
                  "(inproc takes only the default)")
      ->capture_default_str()
      ->check(timeout_range());
  sub->callback([f] {
    // Before the measurements; over MPI by rank 0, which writes them (run_calibrate).
    if (f->transport != TransportKind::Mpi) check_outputs({{f->out, "--out"}, {f->json, "--json"}});
    run_calibrate(*f);
  });
}

}  // namespace rrfp
