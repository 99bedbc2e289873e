// The mapping for Megatron-LM timer timelines (docs/twin.md): complete events named after its
// timers, `forward-compute` and `backward-compute` (tasks) and `forward-recv` /
// `backward-recv` (receives), whose args carry the iteration (`iteration` or `step`), the
// microbatch (`microbatch_id` or `microbatch`) and the model chunk (`model_chunk_id` or
// `model_chunk`, the rank's virtual pipeline chunk, 0 when absent). One thread per rank: its
// `thread_name` says "pp P" and "tp T", else args `pp_rank` / `tp_rank` do, else the thread id
// is the global rank, pipeline rank tid / T and TP rank tid % T (Megatron's order, one
// data-parallel replica).
#include <cctype>
#include <map>
#include <optional>

#include "core/error.hpp"
#include "core/format.hpp"
#include "core/printable.hpp"
#include "sim/trace_formats.hpp"

namespace rrfp::trace {

namespace {

// The number after `key` ("pp 3" -> 3) in a thread name; nullopt when absent.
std::optional<int> tagged(const std::string& name, const std::string& key) {
  size_t at = 0;
  while ((at = name.find(key, at)) != std::string::npos) {
    const bool word_start = at == 0 || !std::isalnum(static_cast<unsigned char>(name[at - 1]));
    size_t i = at + key.size();
    while (i < name.size() && (name[i] == ' ' || name[i] == '=' || name[i] == ':'))
      ++i;
    // Past 9 digits it stays at a value no shape reaches (its first 7 digits were read: "pp
    // 99999999999" was quoted as pp 9999999).
    int v = 0, digits = 0;
    for (; i < name.size() && std::isdigit(static_cast<unsigned char>(name[i])); ++i, ++digits)
      v = digits < 9 ? v * 10 + (name[i] - '0') : 1'000'000'000;
    if (word_start && digits > 0) return v;
    at += key.size();
  }
  return std::nullopt;
}

using ThreadNames = std::map<std::pair<std::string, long long>, std::string>;

std::string pid_of(const nlohmann::json& e) {
  return e.contains("pid") ? e.at("pid").dump() : "";
}

// (pid, tid) -> the thread's name, from the trace's metadata.
ThreadNames thread_names(const Doc& d) {
  ThreadNames names;
  size_t n = 0;
  for (const auto& e : events_of(d)) {
    ++n;
    if (e.is_object() && string_at(e, "ph", d.origin, n) == "M" &&
        string_at(e, "name", d.origin, n) == "thread_name" && e.contains("tid") &&
        e.at("tid").is_number_integer() && e.contains("args") && e.at("args").is_object())
      names[{pid_of(e), e.at("tid").get<long long>()}] =
          string_at(e.at("args"), "name", d.origin, n, "args");
  }
  return names;
}

std::string thread_of(const ThreadNames& names, const nlohmann::json& e, long long tid) {
  const auto it = names.find({pid_of(e), tid});
  return it == names.end() ? "" : it->second;
}

// A rank that the thread's name and the event's args both give: the name's, which must agree
// with the args' (the args overrode it unsaid, against docs/twin.md). `fallback`: neither.
int rank_of(const nlohmann::json& args, const char* key, std::optional<int> named, int fallback,
            const std::string& thread, const std::string& where) {
  if (!args.contains(key)) return named.value_or(fallback);
  const int v = whole_at(args, key, where);
  if (named && *named != v)
    throw InputError(where + ": args \"" + key + "\" " + std::to_string(v) + ", but its thread '" +
                     printable(thread, 60) + "' says " + std::to_string(*named));
  return v;
}

int arg_or(const nlohmann::json& args, std::initializer_list<const char*> keys, int dflt,
           const std::string& where, bool required) {
  const char* k = first_key(args, keys);
  if (!k) {
    // Quoted, not in backticks: a trace's field, not an option (the CLI printed "--iteration").
    if (required) {
      std::string names;
      for (const char* key : keys)
        names += std::string(names.empty() ? "\"" : " or \"") + key + "\"";
      throw InputError(where + ": args lack " + names);
    }
    return dflt;
  }
  const int value = whole_at(args, k, where);
  // Two names of one field that disagree ("iteration" 0, "step" 7): one was dropped unsaid. A
  // second name that holds no whole number is no such field, and stays unread.
  for (const char* other : keys)
    if (const auto it = args.find(other);
        it != args.end() && it->is_number_integer() && whole_at(args, other, where) != value)
      throw InputError(where + ": args give \"" + k + "\" " + std::to_string(value) + " but \"" +
                       other + "\" " + std::to_string(whole_at(args, other, where)) +
                       "; give one, or both the same");
  return value;
}

}  // namespace

std::vector<Timeline> read_megatron(const std::vector<Doc>& docs, const WorkModel& m, int tp) {
  std::map<int, Timeline> steps;
  for (const Doc& d : docs) {
    const nlohmann::json& events = events_of(d);
    const ThreadNames names = thread_names(d);
    size_t n = 0;
    for (const auto& e : events) {
      ++n;
      if (!e.is_object() || string_at(e, "ph", d.origin, n) != "X") continue;
      const std::string& name = string_at(e, "name", d.origin, n);
      const bool fwd = name == "forward-compute" || name == "forward-recv";
      const bool bwd = name == "backward-compute" || name == "backward-recv";
      if (!fwd && !bwd) continue;
      const std::string where = d.origin + ": event " + std::to_string(n) + " (" + name + ")";
      const auto args_it = e.find("args");
      if (args_it == e.end() || !args_it->is_object())
        throw InputError(where + ": no args (iteration, microbatch_id, model_chunk_id)");
      const nlohmann::json& args = *args_it;
      const int tid = e.contains("tid") ? whole_at(e, "tid", where) : 0;
      const std::string thread = thread_of(names, e, tid);
      const int pp = rank_of(args, "pp_rank", tagged(thread, "pp"), tid / tp, thread, where);
      const int tp_rank = rank_of(args, "tp_rank", tagged(thread, "tp"), tid % tp, thread, where);
      if (pp >= m.pp() || tp_rank >= tp)
        throw InputError(where + ": rank pp " + std::to_string(pp) + " tp " +
                         std::to_string(tp_rank) + " is outside the shape (pp " +
                         std::to_string(m.pp()) + ", tp " + std::to_string(tp) + ")" +
                         (thread.empty() ? "" : " (thread '" + printable(thread, 60) + "')") +
                         // A TP 2 trace read without `tp` named no way out. Ranks told by tid alone
                         // are pp * tp + tp rank: there a tid past the shape may be either's.
                         ": give the " +
                         (thread.empty() && !args.contains("pp_rank") ? std::string("`pp` and `tp`")
                          : tp_rank >= tp                             ? std::string("`tp`")
                                                                      : std::string("`pp`")) +
                         " it was recorded with");
      const int step = arg_or(args, {"iteration", "step"}, 0, where, true);
      const int mb = arg_or(args, {"microbatch_id", "microbatch"}, 0, where, true);
      // Without it every task is chunk 0's: an interleaved trace's second chunk was told as
      // "task F c0 m0 appears twice ... (two files for one rank?)".
      if (m.vpp() > 1 && !args.contains("model_chunk_id") && !args.contains("model_chunk"))
        throw InputError(where + ": no model_chunk_id, which tells the chunks of a stage apart " +
                         "at `vpp` " + std::to_string(m.vpp()));
      const int local = arg_or(args, {"model_chunk_id", "model_chunk"}, 0, where, false);
      if (local >= m.vpp())
        throw InputError(where + ": model chunk " + std::to_string(local) + " >= `vpp` " +
                         std::to_string(m.vpp()));
      const TaskId task{fwd ? Kind::F : Kind::B, m.chunk_at(pp, local), mb};
      const double ts = clock_at(e, "ts", where), dur = number_at(e, "dur", where);
      Timeline& t = steps[step];
      if (t.format.empty()) {
        t.format = "megatron";
        t.step = step;
        t.run = "iteration " + std::to_string(step);
      }
      if (name.ends_with("-recv"))
        t.recvs.push_back({task, tp_rank, ts, ts + dur});
      else
        t.tasks.push_back({task, tp_rank, ts, dur});
    }
  }
  std::vector<Timeline> out;
  for (auto& [n, t] : steps)
    out.push_back(std::move(t));
  return out;
}

Shape probe_megatron(const std::vector<Doc>& docs, int tp) {
  Shape s;
  IdsSeen pp_ids{"pp rank"}, chunk_ids{"model_chunk_id"}, mb_ids{"microbatch_id"};
  double events = 0;
  for (const Doc& d : docs) {
    const ThreadNames names = thread_names(d);
    size_t n = 0;
    for (const auto& e : events_of(d)) {
      ++n;
      if (!e.is_object() || string_at(e, "ph", d.origin, n) != "X") continue;
      const std::string& name = string_at(e, "name", d.origin, n);
      if (name != "forward-compute" && name != "backward-compute") continue;
      const auto args = e.find("args");
      if (args == e.end() || !args->is_object()) continue;
      auto whole = [&](std::initializer_list<const char*> keys) {
        const char* k = first_key(*args, keys);
        return k && args->at(k).is_number_unsigned() && args->at(k).get<std::uint64_t>() < 1u << 20
                   ? args->at(k).get<int>()
                   : 0;
      };
      // The thread's name by its own id, as the reader looks it up: real traces' ids are the
      // system's (2^20 and more), which were looked up as thread 0's, and the shape taken for
      // one stage. Only the default stage (id / tp) is read from small ids alone.
      const long long tid = e.contains("tid") && e.at("tid").is_number_unsigned() &&
                                    e.at("tid").get<std::uint64_t>() <= 1'000'000'000
                                ? e.at("tid").get<long long>()
                                : 0;
      int pp = tid < 1 << 20 ? static_cast<int>(tid) / std::max(1, tp) : 0;
      const std::string thread = thread_of(names, e, tid);
      const auto named = tagged(thread, "pp");
      if (named)
        pp = *named;  // the reader refuses args that say otherwise
      else if (args->contains("pp_rank"))
        pp = whole({"pp_rank"});
      const auto where = [&] {
        return d.origin + ": event " + std::to_string(n) + " (" + name + ")";
      };
      // A pp read from the thread's name is quoted with it: a name's ids past 9 digits read as
      // 10^9, which the error would quote alone.
      const auto where_pp = [&] {
        return named ? d.origin + ": event " + std::to_string(n) + " (" + name + ", thread '" +
                           printable(thread, 60) + "')"
                     : where();
      };
      pp_ids.saw(pp, where_pp);
      chunk_ids.saw(whole({"model_chunk_id", "model_chunk"}), where);
      mb_ids.saw(whole({"microbatch_id", "microbatch"}), where);
      ++events;
    }
  }
  if (events == 0) return s;  // the caller says the trace holds no task (the ids know no file)
  for (const IdsSeen* ids : {&pp_ids, &chunk_ids, &mb_ids})
    ids->check();
  s.pp = pp_ids.ids.empty() ? 0 : pp_ids.top + 1;
  s.chunks = s.pp * (chunk_ids.top + 1);
  s.microbatches = mb_ids.ids.empty() ? 0 : mb_ids.top + 1;
  // A complete iteration has a forward and a backward of every chunk and microbatch on every TP
  // rank: a shape needing more events than the trace holds cannot be it.
  const double needed = 2.0 * s.chunks * s.microbatches * std::max(1, tp);
  if (needed > events)
    throw InputError(docs.front().origin + ": its ids make a shape of P=" + std::to_string(s.pp) +
                     " V=" + std::to_string(chunk_ids.top + 1) +
                     " M=" + std::to_string(s.microbatches) + ", whose iteration has " +
                     fmt("%.0f", needed) + " compute events, but the trace holds " +
                     fmt("%.0f", events));
  return s;
}

}  // namespace rrfp::trace
