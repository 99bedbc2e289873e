// The field readers every trace format's reader shares (sim/trace_formats.hpp): each bounds what
// it reads and names the file, event and field it refuses.
#include <algorithm>
#include <limits>

#include "core/error.hpp"
#include "core/format.hpp"
#include "core/json_input.hpp"
#include "sim/trace_formats.hpp"
#include "sim/workload.hpp"

namespace rrfp {

namespace trace {

const nlohmann::json& events_of(const Doc& d) {
  if (d.json.is_object()) {
    auto it = d.json.find("traceEvents");
    if (it == d.json.end()) throw InputError(d.origin + ": a JSON object without `traceEvents`");
    if (!it->is_array()) throw InputError(d.origin + ": `traceEvents` is not an array");
    return *it;
  }
  if (!d.json.is_array()) throw InputError(d.origin + ": not a Chrome trace (array or object)");
  return d.json;
}

// A field that must be a number in [0, most]; `what` says what the bound is.
double bounded_at(const nlohmann::json& obj, const char* key, const std::string& where, double most,
                  const char* what) {
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_number())
    throw InputError(where + ": field \"" + key + "\" is missing or not a number");
  const double v = it->get<double>();
  if (!(v >= 0)) throw InputError(where + ": field \"" + key + "\" is negative: " + brief(*it));
  if (v > most) throw InputError(where + ": field \"" + key + "\" is " + brief(*it) + "; " + what);
  return v;
}

// A trace's durations are microseconds: 1e13 is four months (1e300 and 9.2e18 ended in a
// "deadlock" line of 758 characters).
double number_at(const nlohmann::json& obj, const char* key, const std::string& where) {
  return bounded_at(obj, key, where, kMaxSpanUs, "at most 1e13 (us) is read");
}

double wait_at(const nlohmann::json& obj, const char* key, const std::string& where) {
  return bounded_at(obj, key, where, kMaxTaskUs, "a wait of at most 1e9 (us, 1000 s) is read");
}

double clock_at(const nlohmann::json& obj, const char* key, const std::string& where) {
  return bounded_at(obj, key, where, kMaxClockUs,
                    "at most 4e15 (us since the epoch, the year 2096) is read");
}

void rebase(Timeline& t, const std::string& origin) {
  double first = t.first_wait_us, last = -std::numeric_limits<double>::infinity();
  for (const TimelineTask& k : t.tasks) {
    first = std::min(first, k.start_us);
    last = std::max(last, k.start_us + k.dur_us);
  }
  for (const TimelineRecv& r : t.recvs) {
    first = std::min(first, r.start_us);
    last = std::max(last, r.end_us);
  }
  if (!(first <= last)) return;  // no events: the caller says so
  // Each time's difference to the earliest is exact (both near one another), so durations and
  // gaps keep the precision the file's numbers had.
  if (last - first > kMaxSpanUs)
    throw InputError(origin + (t.run.empty() ? "" : " (" + t.run + ")") + ": its events span " +
                     fmt("%.4g", last - first) + " us (from ts " + fmt("%.17g", first) +
                     "); at most 1e13 (us) is read");
  for (TimelineTask& k : t.tasks)
    k.start_us -= first;
  t.first_wait_us -= first;  // +inf stays so
  for (TimelineRecv& r : t.recvs) {
    r.start_us -= first;
    r.end_us -= first;
  }
}

int whole_at(const nlohmann::json& obj, const char* key, const std::string& where) {
  // Bounded here, not by number_at: 2^63 was told "at most 1e13 (us) is read", a time's range.
  const double v = bounded_at(obj, key, where, 1e9, "a whole number in [0, 1e9] is read");
  if (v != static_cast<int>(v))
    throw InputError(where + ": field \"" + key +
                     "\" is not a whole number in [0, 1e9]: " + brief(obj.at(key)));
  return static_cast<int>(v);
}

const std::string& string_at(const nlohmann::json& obj, const char* key, const std::string& origin,
                             size_t event, const char* parent) {
  static const std::string none;
  const auto it = obj.find(key);
  if (it == obj.end()) return none;
  if (!it->is_string())
    throw InputError(origin + ": event " + std::to_string(event) + ": field \"" +
                     (parent ? std::string(parent) + "." : "") + key +
                     "\" must be a string (or absent), got " + brief(*it));
  return it->get_ref<const std::string&>();
}

const char* first_key(const nlohmann::json& obj, std::initializer_list<const char*> keys) {
  for (const char* k : keys)
    if (obj.contains(k)) return k;
  return nullptr;
}

}  // namespace trace

}  // namespace rrfp
