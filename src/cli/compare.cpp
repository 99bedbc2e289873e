#include "cli/compare.hpp"

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>

#include "cli/options.hpp"
#include "core/error.hpp"
#include "core/format.hpp"
#include "core/input_file.hpp"
#include "core/json_input.hpp"
#include "core/printable.hpp"
#include "dist/calibrate.hpp"
#include "report/columns.hpp"

namespace rrfp {

namespace {

// The message sizes a startup calibration measures: the smallest (latency) and the run's own
// payloads (smallest, median, largest), so the fit is made where the run's messages are.
std::vector<std::size_t> calibration_sizes(const Scenario& sc) {
  const WorkModel m(sc.cfg);
  std::vector<std::size_t> bytes;
  for (std::int64_t b : realized_work(sc, m).message_bytes)
    if (b > 0) bytes.push_back(static_cast<std::size_t>(b));
  std::vector<std::size_t> sizes{8};
  if (!bytes.empty()) {
    std::sort(bytes.begin(), bytes.end());
    sizes.insert(sizes.end(), {bytes.front(), bytes[bytes.size() / 2], bytes.back()});
  }
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  return sizes;
}

// A file from rrfp calibrate --out, read as a workload file but named as --calibration.
constexpr InputKind kCalibrationFile{"calibration", kWorkloadFile.max_bytes,
                                     kWorkloadFile.max_line};

// A calibration measured on another transport models other messages (inproc moves pointers):
// refused, where it was taken as the run's. A fragment without the record (written by hand)
// says nothing to compare.
void check_measured_on(const std::string& transport, const nlohmann::json& j,
                       const std::string& path) {
  if (!j.is_object())  // `[]` was told it gave no comm_bandwidth_gbps
    throw InputError("--calibration: '" + path + "' is " + brief(j) +
                     ", not a JSON object (what rrfp calibrate --out writes)");
  if (!j.contains("calibration")) return;
  // A record that is no object ("inproc") skipped the transport's check without a word.
  if (!j["calibration"].is_object())
    throw InputError("--calibration: '" + path + "' gives calibration " + brief(j["calibration"]) +
                     ", not an object (the record rrfp calibrate writes)");
  const nlohmann::json& c = j["calibration"];
  if (!c.contains("transport")) return;
  if (!c["transport"].is_string())
    throw InputError("--calibration: '" + path + "': calibration.transport must be a string, got " +
                     brief(c["transport"]));
  const std::string measured = c["transport"].get<std::string>();
  if (measured != transport)
    throw InputError("--calibration: '" + path + "' was measured on the " + brief(c["transport"]) +
                     " transport, this run's is " + transport + "; give a calibration of " +
                     transport + " (rrfp calibrate --transport " + transport + ")");
}

// A calibration gives the messages alone: a workload field beside them (forward_us, a preset)
// was read and dropped without a word, and a modelled noise has no place in what was measured.
void check_message_fields(const nlohmann::json& j, const std::string& path) {
  static const std::set<std::string> kTaken{
      "comm_latency_us",     "comm_bandwidth_gbps", "comm_links",   "comm_two_slowdown",
      "comm_serial_receive", "comm_offer_payload",  "comm_wake_us", "comm_wake_per_copy_us",
      "comm_sigma",          "comm_slow_prob",      "calibration"};
  std::string others;
  for (const auto& [key, value] : j.items())
    if (!kTaken.contains(key)) others += (others.empty() ? "" : ", ") + printable(key, 40);
  if (!others.empty())
    throw InputError("--calibration: '" + path + "' sets " + printable(others, 200) +
                     ", which a message model does not take (a calibration gives the messages "
                     "alone); remove them, or give the workload with --workload-file");
  for (const char* noise : {"comm_sigma", "comm_slow_prob"})
    if (j.contains(noise) && j[noise] != 0)
      throw InputError("--calibration: '" + path + "' sets " + noise + " " + brief(j[noise]) +
                       ": the transport's message model has no modelled noise (a calibration "
                       "writes 0); remove it");
}

// A file of rrfp calibrate (it holds the record) lacking a field calibrate writes beside a
// bandwidth was edited: the field took the uniform preset's value without a word (a latency of
// 0, no links, no serial receive). A fragment written by hand (no record) sets what it means.
void check_fields_written(const nlohmann::json& j, const std::string& path) {
  if (!j.contains("calibration")) return;
  for (const char* field :
       {"comm_latency_us", "comm_links", "comm_two_slowdown", "comm_serial_receive"})
    if (!j.contains(field))
      throw InputError("--calibration: '" + path + "' gives no " + field +
                       ", which rrfp calibrate writes beside a bandwidth (the file was edited?): "
                       "calibrate again, or add the field");
}

// A bandwidth of 0 models every message's size as free: a calibration writes it only where it
// found so (calibration.size_cost "free"); written by hand it passed the check for a missing one.
bool found_size_free(const nlohmann::json& j) {
  return j.contains("calibration") && j["calibration"].is_object() &&
         j["calibration"].contains("size_cost") && j["calibration"]["size_cost"] == "free";
}

// a / b, or none where b is no time: a workload of zero durations simulates to a step of 0 ns,
// and its speedups and errors printed "-nanx" (null in the JSON, by accident).
std::optional<double> ratio(double a, double b) {
  return b > 0 ? std::optional<double>(a / b) : std::nullopt;
}

std::string error_cell(double measured, std::optional<double> model) {
  if (!model || !(*model > 0)) return "      -";  // a modelled step of no time: no error
  return fmt("  %+5.1f%%", 100 * (measured - *model) / *model);
}

// A speedup printed `width` wide with its "x", or "-" in its place.
std::string speedup_cell(std::optional<double> v, int width) {
  if (!v) return std::string(static_cast<std::size_t>(width) + 1, ' ') + "- ";
  return fmt(("  %" + std::to_string(width) + ".3fx").c_str(), *v);
}

// measured / model - 1 in the JSON; null where the model's step takes no time.
nlohmann::json relative_error(double measured, double model) {
  const auto r = ratio(measured, model);
  return r ? nlohmann::json(*r - 1) : nlohmann::json();
}

}  // namespace

TransportModel transport_model(const std::string& calibration, const std::string& transport,
                               bool offer_payload, const Scenario& sc, Job& world,
                               double timeout_s) {
  if (!calibration.empty() && calibration != "baseline") {
    const std::string text = read_input_file(calibration, kCalibrationFile);
    const nlohmann::json j = parse_json(text, calibration);
    check_measured_on(transport, j, calibration);
    // A calibration whose sizes could not tell a bandwidth from noise leaves it out (and says
    // so): over the preset's 0 every message's size would be free, without a word.
    if (!j.contains("comm_bandwidth_gbps"))
      throw InputError("--calibration: '" + calibration +
                       "' gives no comm_bandwidth_gbps (a calibration whose sizes could not "
                       "tell one from noise leaves it out), and without one every message's "
                       "size would be free; calibrate with larger --sizes (up to 32M), or add "
                       "the field");
    check_message_fields(j, calibration);
    const WorkloadParams w = apply_workload_json(workload_preset("uniform"), text, calibration);
    if (!(w.comm_bandwidth_gbps > 0) && !found_size_free(j))
      throw InputError("--calibration: '" + calibration +
                       "' gives comm_bandwidth_gbps 0, which models every message's size as "
                       "free; a calibration writes it only where it found so (calibration."
                       "size_cost \"free\"): give a bandwidth, or calibrate with rrfp calibrate");
    check_fields_written(j, calibration);
    const MessageModel mm{w.comm_latency_us,   w.comm_bandwidth_gbps,  w.comm_links,
                          w.comm_two_slowdown, w.comm_serial_receive,  offer_payload,
                          w.comm_wake_us,      w.comm_wake_per_copy_us};
    // Tried on the run's messages now: a bandwidth of 1e-300 GB/s was refused once every run
    // had been emulated, in the simulator's words and naming no file.
    try {
      const WorkModel m(sc.cfg);
      RealizedWork work = realized_work(sc, m);
      set_message_model(m, work, mm);
    } catch (const InputError& e) {
      throw InputError("--calibration: '" + calibration +
                       "' cannot model the run's messages: " + e.what());
    }
    return {mm, calibration};
  }
  world.set_layout(JobLayout{world.size(), 1, 1});
  CalibrateOptions o;
  o.sizes = calibration_sizes(sc);
  // The links come from four streams at once (dist/calibrate.hpp), which the ping-pong's two
  // pairs overstate the cost of; their rounds take a second more.
  o.seconds = kRunCalibrationSeconds;
  o.streams = true;
  o.serial_receive = true;  // the mpi transport's one progress thread copies what arrives
  o.offer_payload = offer_payload;
  o.deadline_s = timeout_s;
  Hosting h = world.hosting();
  Calibration c = calibrate(*h.transports.at(0), world.size(), job_meeting(world), o);
  world.all_gather({});  // nobody tears down its endpoint while a peer may still send to it
  c.transport = transport;
  if (world.rank() == 0) print_line(format_calibration(c));  // what the model rests on
  return {
      {c.latency_us, c.bandwidth_gbps, c.links, c.two_slowdown, c.serial_receive, c.offer_payload},
      "measured at " + std::to_string(o.sizes.size()) + " sizes up to " +
          fmt("%.1f", static_cast<double>(o.sizes.back()) / (1 << 20)) + " MiB" +
          (c.links_from_streams() ? ", links from four streams" : "")};
}

// The step takes longer the slower messages are, so a bisection on a log scale finds it.
double fit_bandwidth(const std::function<std::int64_t(double)>& makespan_at,
                     std::int64_t measured) {
  double lo = kFitLowGbps, hi = kFitHighGbps;
  if (makespan_at(hi) >= measured) return hi;  // the step is slower than messages explain
  if (makespan_at(lo) <= measured) return lo;
  for (int i = 0; i < 40; ++i) {
    const double mid = std::sqrt(lo * hi);
    (makespan_at(mid) > measured ? lo : hi) = mid;
  }
  return std::sqrt(lo * hi);
}

MessageModel median_model(const std::vector<MessageModel>& models) {
  auto median = [&](double MessageModel::*field) {
    std::vector<double> v;
    for (const MessageModel& m : models)
      v.push_back(m.*field);
    std::sort(v.begin(), v.end());
    const size_t k = v.size() / 2;
    return v.size() % 2 ? v[k] : (v[k - 1] + v[k]) / 2;
  };
  MessageModel mm = models.at(0);
  for (double MessageModel::*field :
       {&MessageModel::latency_us, &MessageModel::bandwidth_gbps, &MessageModel::links,
        &MessageModel::two_slowdown, &MessageModel::wake_us, &MessageModel::wake_per_copy_us})
    mm.*field = median(field);
  return mm;
}

std::string describe(const MessageModel& mm) {
  return fmt("%.1f", mm.latency_us) + " us" +
         (mm.bandwidth_gbps > 0 ? " + bytes / " + fmt("%.2f", mm.bandwidth_gbps) + " GB/s"
                                : std::string()) +
         (mm.links > 0 ? ", " + fmt("%.2f", mm.links) + " messages' worth shared by all"
                       : std::string()) +
         (mm.two_slowdown > 1
              ? ", two or more at once each at least " + fmt("%.2fx", mm.two_slowdown) + " as long"
              : std::string()) +
         (mm.wake_us + mm.wake_per_copy_us > 0
              ? ", an idle rank starts " + fmt("%.1f", mm.wake_us) + " us + " +
                    fmt("%.1f", mm.wake_per_copy_us) + " us per copy under way after its input"
              : std::string()) +
         (mm.serial_receive ? ", copied one at a time per receiver" : "") +
         (mm.offer_payload ? ", a blocking run's payload with its offer" : "");
}

std::vector<FidelityRow> fidelity_rows(const std::vector<ReportRun>& measured,
                                       const std::vector<ReportRun>& simulated,
                                       const std::vector<ReportRun>& replayed,
                                       const std::vector<std::vector<StepResult>>& timed) {
  std::vector<FidelityRow> rows;
  for (size_t i = 0; i < measured.size(); ++i) {
    FidelityRow& r = rows.emplace_back();
    r.label = measured[i].label;
    r.measured = measured[i].metrics.makespan;
    r.simulated = simulated.at(i).metrics.makespan;
    r.replayed = replayed.at(i).metrics.makespan;
    // To the first start, a task's or a wait's (agree's first round, which the models hold),
    // as predict's measured step begins.
    auto first = [&r](std::int64_t at) {
      r.start_up = r.start_up < 0 ? at : std::min(r.start_up, at);
    };
    for (const TaskRecord& t : measured[i].result.tasks)
      first(t.start);
    for (const BlockedSpan& b : measured[i].result.blocked)
      first(b.start);
    if (i >= timed.size()) continue;
    for (const StepResult& st : timed[i]) {
      r.steps.push_back(st.run.makespan);
      r.fresh.push_back(st.fresh_buffers);
    }
  }
  return rows;
}

std::string fidelity_table(const std::vector<FidelityRow>& rows) {
  const bool ranges = !rows.empty() && rows[0].steps.size() > 1;
  // The labels' column as wide as the longest (at least 24): "fixed interleaved-1f1b
  // (blocking)" pushed its row's numbers past their headers.
  std::size_t width = 24;
  for (const FidelityRow& r : rows)
    width = std::max(width, r.label.size());
  std::string out =
      "\nsimulator fidelity (same seed and messages; simulated: the workload's task durations, "
      "replayed: the run's own measured ones; error: measured / model - 1, above 0 where the "
      "model is short):\n" +
      std::string("run").append(width - 3, ' ') +
      "  measured_ms  simulated_ms   error  replayed_ms   error  speedup_measured  "
      "speedup_simulated   diff" +
      std::string(ranges ? "  measured_range_ms" : "") + "\n";
  for (const FidelityRow& r : rows) {
    const double mm = static_cast<double>(r.measured), sm = static_cast<double>(r.simulated);
    const double rm = static_cast<double>(r.replayed);
    const auto ms = ratio(static_cast<double>(rows[0].measured), mm);
    const auto ss = ratio(static_cast<double>(rows[0].simulated), sm);
    std::string label = r.label;
    label.resize(width, ' ');
    // A step under 1 ms to the nanosecond, as the run's table prints it: a row read "0.15 0.00
    // +4291.3%", its replayed 0.004117 ms shown as nothing. Each by its own length: a measured
    // step of 3.8 ms on a busy machine kept its replay's 0.004 ms at 0.00.
    const auto cell = [](std::int64_t ns, std::size_t w) {
      return "  " + columns::lpad(ms_text(ns, ns), w);
    };
    out += label + cell(r.measured, 11) + cell(r.simulated, 12) + error_cell(mm, sm) +
           cell(r.replayed, 11) + error_cell(mm, rm) + speedup_cell(ms, 15) + speedup_cell(ss, 16) +
           error_cell(ms.value_or(0), ms ? ss : std::nullopt);
    if (ranges) {
      const auto [lo, hi] = std::minmax_element(r.steps.begin(), r.steps.end());
      out += "  " + ms_text(*lo, *lo) + "-" + ms_text(*hi, *hi);
    }
    out += "\n";
  }
  // The measured steps count it and the models do not: on a busy machine a few ms of it read
  // as the replay's error, without a word.
  std::int64_t lo = -1, hi = -1;
  for (const FidelityRow& r : rows)
    if (r.start_up >= 0) {
      lo = lo < 0 ? r.start_up : std::min(lo, r.start_up);
      hi = std::max(hi, r.start_up);
    }
  if (hi >= 0)
    out +=
        "start-up (a measured step's start to its first task or wait: the compute threads' start, "
        "in the measured step, in neither model): " +
        fmt("%.3f", static_cast<double>(lo) / 1e6) +
        (hi > lo ? fmt("-%.3f", static_cast<double>(hi) / 1e6) : std::string()) + " ms\n";
  return out;
}

nlohmann::json fidelity_json(const std::vector<FidelityRow>& rows, const std::string& model) {
  using columns::ms;
  nlohmann::json j;
  if (!model.empty()) j["message_model"] = model;
  j["runs"] = nlohmann::json::array();
  for (const FidelityRow& r : rows) {
    nlohmann::json steps = nlohmann::json::array();
    for (std::int64_t s : r.steps)
      steps.push_back(ms(s));
    j["runs"].push_back({{"label", r.label},
                         {"measured_ms", ms(r.measured)},
                         {"simulated_ms", ms(r.simulated)},
                         {"replayed_ms", ms(r.replayed)},
                         {"error", relative_error(ms(r.measured), ms(r.simulated))},
                         {"replayed_error", relative_error(ms(r.measured), ms(r.replayed))},
                         {"start_up_ms", r.start_up >= 0 ? nlohmann::json(ms(r.start_up))
                                                         : nlohmann::json(nullptr)},
                         {"measured_steps_ms", steps},
                         {"measured_steps_fresh_buffers", r.fresh}});
  }
  return j;
}

}  // namespace rrfp
