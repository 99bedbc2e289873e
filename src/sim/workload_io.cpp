// Workload files: JSON overrides of WorkloadParams.
#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/format.hpp"
#include "core/input_file.hpp"
#include "core/json_input.hpp"
#include "core/modes.hpp"
#include "sim/workload.hpp"

namespace rrfp {

namespace {

using Setter = std::function<void(WorkloadParams&, const nlohmann::json&, const std::string&)>;

Setter number(double WorkloadParams::*field) {
  return [field](WorkloadParams& w, const nlohmann::json& v, const std::string& where) {
    if (!v.is_number()) throw InputError(where + ": must be a number, got " + brief(v));
    w.*field = v.get<double>();
  };
}
// The most any integer field takes (validate() checks the same ranges).
constexpr int kMaxCountField = 1000000;

// An integer field in [lo, hi] (validate()'s range for it), compared as the JSON holds it: an
// unsigned value past INT64_MAX read as a signed one wrapped (2^64 - 1 became -1,
// straggler_stage's "none").
Setter integer(int WorkloadParams::*field, int lo, int hi) {
  return [field, lo, hi](WorkloadParams& w, const nlohmann::json& v, const std::string& where) {
    bool in_range = false;
    if (v.is_number_unsigned()) {
      const auto x = v.get<std::uint64_t>();
      in_range = x <= static_cast<std::uint64_t>(hi) && static_cast<std::int64_t>(x) >= lo;
    } else if (v.is_number_integer()) {
      const auto x = v.get<std::int64_t>();
      in_range = x >= lo && x <= hi;
    }
    if (!in_range)
      throw InputError(where + ": must be an integer from " + std::to_string(lo) + " to " +
                       std::to_string(hi) + ", got " + brief(v));
    w.*field = static_cast<int>(v.get<std::int64_t>());
  };
}
Setter boolean(bool WorkloadParams::*field) {
  return [field](WorkloadParams& w, const nlohmann::json& v, const std::string& where) {
    if (!v.is_boolean()) throw InputError(where + ": must be true or false, got " + brief(v));
    w.*field = v.get<bool>();
  };
}
Setter jitter(double JitterLevel::*field) {
  return [field](WorkloadParams& w, const nlohmann::json& v, const std::string& where) {
    if (!v.is_number()) throw InputError(where + ": must be a number, got " + brief(v));
    w.jitter.*field = v.get<double>();
  };
}

const std::map<std::string, Setter>& setters() {
  using W = WorkloadParams;
  static const std::map<std::string, Setter> s = {
      {"forward_us", number(&W::forward_us)},
      {"backward_ratio_min", number(&W::backward_ratio_min)},
      {"backward_ratio_max", number(&W::backward_ratio_max)},
      {"weight_share", number(&W::weight_share)},
      {"head_factor", number(&W::head_factor)},
      {"compute_sigma", number(&W::compute_sigma)},
      {"tokens_mean", number(&W::tokens_mean)},
      {"tokens_sigma", number(&W::tokens_sigma)},
      {"tokens_min", number(&W::tokens_min)},
      {"tokens_max", number(&W::tokens_max)},
      {"quadratic_share", number(&W::quadratic_share)},
      {"images_scale", number(&W::images_scale)},
      {"images_alpha", number(&W::images_alpha)},
      {"images_max", integer(&W::images_max, 0, kMaxCountField)},
      {"image_us", number(&W::image_us)},
      {"image_tokens", number(&W::image_tokens)},
      {"vision_chunks", integer(&W::vision_chunks, 0, kMaxCountField)},
      {"jitter_p", jitter(&JitterLevel::p)},
      {"jitter_floor_us", jitter(&JitterLevel::floor_us)},
      {"jitter_alpha", jitter(&JitterLevel::alpha)},
      {"straggler_stage", integer(&W::straggler_stage, -2, kMaxCountField)},
      {"straggler_factor", number(&W::straggler_factor)},
      {"straggler_window", integer(&W::straggler_window, 1, kMaxCountField)},
      {"straggler_prob", number(&W::straggler_prob)},
      {"comm_latency_us", number(&W::comm_latency_us)},
      {"comm_bandwidth_gbps", number(&W::comm_bandwidth_gbps)},
      {"comm_sigma", number(&W::comm_sigma)},
      {"comm_slow_prob", number(&W::comm_slow_prob)},
      {"comm_slow_us", number(&W::comm_slow_us)},
      {"comm_links", number(&W::comm_links)},
      {"comm_serial_receive", boolean(&W::comm_serial_receive)},
      {"comm_offer_payload", boolean(&W::comm_offer_payload)},
      {"comm_two_slowdown", number(&W::comm_two_slowdown)},
      {"comm_wake_us", number(&W::comm_wake_us)},
      {"comm_wake_per_copy_us", number(&W::comm_wake_per_copy_us)},
      {"bytes_per_token", number(&W::bytes_per_token)},
      {"tp_sigma", number(&W::tp_sigma)},
      {"tp_collective_us", number(&W::tp_collective_us)},
      {"coord_latency_us", number(&W::coord_latency_us)},
  };
  return s;
}

}  // namespace

WorkloadParams apply_workload_json(WorkloadParams w, const std::string& text,
                                   const std::string& origin) {
  const nlohmann::json j = parse_json(text, origin);
  if (!j.is_object()) throw InputError(origin + ": expected a JSON object of workload fields");
  if (j.contains("preset")) {
    if (!j["preset"].is_string()) throw InputError(origin + ": \"preset\" must be a string");
    w = workload_preset(j["preset"].get<std::string>(), origin + ": field \"preset\"");
  }
  for (auto it = j.begin(); it != j.end(); ++it) {
    // "calibration": the measurements behind a fragment `rrfp calibrate` wrote; not a field.
    if (it.key() == "preset" || it.key() == "calibration") continue;
    const std::string where = origin + ": field \"" + it.key() + "\"";
    auto s = setters().find(it.key());
    if (s == setters().end()) throw InputError(where + " is not a workload parameter");
    s->second(w, it.value(), where);
  }
  try {
    validate(w);
  } catch (const InputError& e) {
    throw InputError(origin + ": " + e.what());
  }
  w.origin = origin;
  return w;
}

WorkloadParams read_workload_file(const std::string& path, const std::string& preset,
                                  bool preset_given) {
  const std::string text = read_input_file(path, kWorkloadFile);
  // A file's own preset replaces the one given beside it: `--workload language` over a file
  // naming "uniform" simulated uniform, silently.
  if (preset_given) {
    const nlohmann::json j = parse_json(text, path);
    if (j.is_object() && j.contains("preset") && j["preset"].is_string() &&
        workload_preset(j["preset"].get<std::string>(), path + ": field \"preset\"").preset !=
            workload_preset(preset).preset)
      throw InputError("`workload_file`: '" + path + "' names a preset of its own ('" +
                       j["preset"].get<std::string>() + "'), which replaces `workload` " + preset +
                       "; give one of them");
  }
  return apply_workload_json(workload_preset(preset), text, path);
}

std::vector<std::string> workload_file_fields(const std::string& path) {
  const nlohmann::json j = parse_json(read_input_file(path, kWorkloadFile), path);
  std::vector<std::string> fields;
  if (!j.is_object()) return fields;  // refused by its reader, with the reason
  for (auto it = j.begin(); it != j.end(); ++it)
    fields.push_back(it.key() == "preset" && it.value().is_string()
                         ? "preset " + it.value().get<std::string>()
                         : it.key());
  return fields;
}

std::string workload_label(const std::string& preset, bool preset_given, const std::string& file,
                           bool replay) {
  if (file.empty()) return preset;
  if (replay && !preset_given) return file;  // the replay's durations replace the preset's
  for (const std::string& field : workload_file_fields(file))
    if (field.rfind("preset ", 0) == 0) return file;
  return preset + " + " + file;
}

}  // namespace rrfp
