#include "train/checkpoint.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "core/error.hpp"
#include "core/fnv.hpp"
#include "core/format.hpp"
#include "core/input_file.hpp"
#include "core/json_input.hpp"
#include "core/output_file.hpp"
#include "core/printable.hpp"
#include "train/options.hpp"

namespace rrfp::train {

namespace {

constexpr char kMagic[8] = {'R', 'R', 'F', 'P', 'C', 'K', 'P', 'T'};
constexpr std::uint32_t kVersion = 1;

template <class T>
void put(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}

nlohmann::json model_json(const GptConfig& m) {
  return {{"vocab", m.vocab},
          {"d_model", m.d_model},
          {"heads", m.heads},
          {"layers", m.layers},
          {"max_seq", m.max_seq}};
}

std::vector<const std::vector<torch::Tensor>*> groups(const CheckpointState& s) {
  return {&s.params, &s.exp_avg, &s.exp_avg_sq};
}

}  // namespace

std::uint64_t checkpoint_checksum(std::string_view bytes) {
  return fnv1a(kFnv1aOffset, bytes);
}

void save_checkpoint(const std::string& path, const CheckpointState& s) {
  nlohmann::json h;
  h["format"] = "rrfp-checkpoint";
  h["model"] = model_json(s.model);
  h["step"] = s.step;
  h["run"] = s.run;
  if (s.loss && std::isfinite(*s.loss)) h["loss"] = *s.loss;
  h["tensors"] = nlohmann::json::array();
  for (size_t i = 0; i < s.params.size(); ++i)
    h["tensors"].push_back({{"name", s.names[i]}, {"shape", s.params[i].sizes().vec()}});
  const std::string header = h.dump();
  std::string head(kMagic, sizeof kMagic);
  put(head, kVersion);
  put(head, static_cast<std::uint64_t>(header.size()));
  head += header;
  // Through a link (to a larger disk): its target is replaced, where the rename replaced the
  // link with a file and left the target at the earlier step.
  const std::string file = link_target(path);
  const std::string tmp = file + ".tmp";
  const int fd = open_output(tmp, "checkpoint '" + path + "': its temporary '" + tmp + "'",
                             OutputMode{.named_by_user = false});
  const TemporaryInProgress in_progress(tmp);  // a second signal removes it (of the model's size)
  // A failed save (a full disk: "No space left on device") leaves the previous checkpoint as
  // it was and no partial file behind.
  try {
    // Tensor by tensor, the checksum running: the whole file in one buffer (and that buffer's
    // regrowth) faulted in twice the checkpoint's size of fresh pages.
    const std::string failed = "checkpoint '" + path + "': writing failed";
    std::uint64_t sum = checkpoint_checksum(head);  // continued over the tensors
    write_all(fd, head, failed);
    for (const auto* g : groups(s))
      for (const auto& t : *g) {
        const auto c = t.detach().cpu().contiguous();  // a GPU's tensors through host memory
        const std::string_view bytes(static_cast<const char*>(c.data_ptr()),
                                     c.numel() * c.element_size());
        sum = fnv1a(sum, bytes);
        write_all(fd, bytes, failed);
      }
    std::string tail;
    put(tail, sum);
    write_all(fd, tail, failed);
    if (::fsync(fd) != 0)
      throw Error("checkpoint '" + path + "': fsync failed: " + std::strerror(errno));
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  if (::close(fd) != 0) {
    ::unlink(tmp.c_str());
    throw Error("checkpoint '" + path + "': close failed: " + std::strerror(errno));
  }
  if (std::rename(tmp.c_str(), file.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw Error("checkpoint '" + path + "': cannot rename " + tmp +
                " over it: " + std::strerror(err));
  }
  // Make the rename itself durable.
  const std::string dir =
      file.find('/') == std::string::npos ? "." : file.substr(0, file.rfind('/'));
  const int dfd = ::open(dir.empty() ? "/" : dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

namespace {

// A checkpoint's bytes, checked up to its header: where the tensors start, and the header.
struct Parsed {
  nlohmann::json header;
  std::size_t data = 0, end = 0;  // the tensors' bytes: [data, end)
  std::uint64_t checksum = 0;
};

Parsed parse(const std::string& bytes, const std::string& path, const GptConfig& model) {
  auto bad = [&](const std::string& why) { return InputError("`resume`: '" + path + "' " + why); };
  const std::size_t fixed = sizeof kMagic + sizeof(std::uint32_t) + sizeof(std::uint64_t);
  if (bytes.size() < fixed + sizeof(std::uint64_t) || std::memcmp(bytes.data(), kMagic, 8) != 0)
    throw bad("is not an rrfp checkpoint");
  std::uint32_t version = 0;
  std::memcpy(&version, bytes.data() + 8, sizeof version);
  if (version != kVersion)
    throw bad("has format version " + std::to_string(version) + "; this rrfp reads version " +
              std::to_string(kVersion));
  std::uint64_t stored = 0;
  std::memcpy(&stored, bytes.data() + bytes.size() - sizeof stored, sizeof stored);
  if (checkpoint_checksum(std::string_view(bytes).substr(0, bytes.size() - sizeof stored)) !=
      stored)
    throw bad("is corrupt or truncated (checksum mismatch)");
  std::uint64_t hlen = 0;
  std::memcpy(&hlen, bytes.data() + 12, sizeof hlen);
  if (hlen > bytes.size() - fixed) throw bad("is truncated (header)");
  Parsed p;
  p.checksum = stored;
  try {
    p.header = parse_json(std::string_view(bytes).substr(fixed, hlen), "header");
  } catch (const InputError&) {
    throw bad("has an unreadable header");
  }
  // Every header field is checked for its type and range: a checksum only says the bytes are
  // the ones written, not that a writer wrote sense.
  const nlohmann::json& h = p.header;
  for (const char* name : {"step", "model", "tensors"})
    if (!h.is_object() || !h.contains(name))
      throw bad(std::string("has no header field \"") + name + "\"");
  // Written by every save; an edited file's say where they would be taken for absent.
  if (h.contains("format") && h["format"] != "rrfp-checkpoint")
    throw bad("header field \"format\" is " + brief(h["format"]) + ", not \"rrfp-checkpoint\"");
  if (h.contains("run") && !h["run"].is_object())
    throw bad("header field \"run\" must be an object (the run's options), got " + brief(h["run"]));
  const auto& step = h["step"];
  if (!step.is_number_integer() || step.get<long long>() < 0 || step.get<long long>() > kMaxSteps)
    throw bad("header field \"step\" must be a whole number in [0, 1e9], got " + brief(step));
  if (const nlohmann::json ours = model_json(model); h["model"] != ours) {
    // Named by the options that differ (both models' JSON in full left the reader to compare).
    std::string differ;
    if (h["model"].is_object())
      for (const auto& [key, value] : ours.items())
        if (const auto it = h["model"].find(key); it != h["model"].end() && *it != value)
          differ += (differ.empty() ? "" : ", ") + ("`" + key + "` ") + value.dump() +
                    " where the checkpoint's has " + printable(it->dump(), 40);
    throw bad("holds another model (" +
              (differ.empty() ? printable(h["model"].dump(), 200) + ", this run has " + ours.dump()
                              : "this run's " + differ) +
              ")");
  }
  p.data = fixed + hlen;
  p.end = bytes.size() - sizeof stored;
  return p;
}

// Entry e's shape if it is a well-formed {"name", "shape"} with a size in range; else nullopt.
std::optional<std::vector<std::int64_t>> shape_of(const nlohmann::json& e) {
  if (!e.is_object() || !e.contains("name") || !e["name"].is_string() || !e.contains("shape") ||
      !e["shape"].is_array() || e["shape"].size() > 8)
    return std::nullopt;
  std::vector<std::int64_t> out;
  std::int64_t n = 1;
  for (const auto& d : e["shape"]) {
    if (!d.is_number_integer() || d.get<std::int64_t>() < 0 || d.get<std::int64_t>() > (1LL << 40))
      return std::nullopt;
    out.push_back(d.get<std::int64_t>());
    n *= out.back();
    if (n > (1LL << 40)) return std::nullopt;
  }
  return out;
}

// The first of `n` float32 values at `from` that is not finite, or negative where
// `non_negative`, in words with its index; "" where none is. By bits, so that the scan of a
// large model's tensors stays a pass over memory.
std::string bad_value(const char* from, std::int64_t n, bool non_negative) {
  for (std::int64_t k = 0; k < n; ++k) {
    std::uint32_t bits = 0;
    std::memcpy(&bits, from + k * sizeof bits, sizeof bits);
    const bool finite = (bits & 0x7f800000u) != 0x7f800000u;
    // -0 is not negative: the sign bit alone set.
    if (finite && !(non_negative && (bits >> 31) != 0 && bits != 0x80000000u)) continue;
    float v = 0;
    std::memcpy(&v, &bits, sizeof v);
    return (std::isnan(v) ? std::string("NaN") : fmt("%g", static_cast<double>(v))) +
           " at element " + std::to_string(k);
  }
  return "";
}

void copy_in(const torch::Tensor& t, const char* from, std::size_t n) {
  if (t.is_cpu()) {
    std::memcpy(t.data_ptr(), from, n);
  } else {  // a GPU's tensor: through host memory
    auto host = torch::empty(t.sizes(), t.options().device(torch::kCPU));
    std::memcpy(host.data_ptr(), from, n);
    t.copy_(host);
  }
}

// The options of `expect.run` that the checkpoint's run had set otherwise, each named.
std::vector<std::string> differences(const nlohmann::json& h, const CheckpointState& expect) {
  std::vector<std::string> out;
  if (h.contains("run") && h["run"].is_object())  // absent in checkpoints of older runs
    for (const auto& [name, mine] : expect.run.items()) {
      const auto& was = h["run"].value(name, nlohmann::json());
      if (was.is_null() || was == mine) continue;  // absent: written before it was recorded
      // A checkpoint of an earlier build records the corpus as that build did.
      if (name == "data_contents" && !expect.earlier_data_contents.empty() &&
          was == expect.earlier_data_contents)
        continue;
      if (name == "data_contents" && was.is_string())  // the corpus read, named by its flag
        out.push_back("`data` holds " + mine.get<std::string>() + "; the checkpoint's run read " +
                      printable(was.get<std::string>(), 120));
      else if (name == "intra_op_threads")  // no option: torch's count, or OMP_NUM_THREADS's
        out.push_back("the intra-op threads (OMP_NUM_THREADS) are " + brief(mine) +
                      "; the checkpoint's run had " + brief(was));
      else if (name == "cpu_kernels")  // no option: the processor's, or ATEN_CPU_CAPABILITY's
        out.push_back("LibTorch's CPU kernels (ATEN_CPU_CAPABILITY) are " + brief(mine) +
                      "; the checkpoint's run had " + brief(was));
      else
        out.push_back("`" + name + "` is " + brief(mine) + "; the checkpoint's run had " +
                      brief(was));
    }
  return out;
}

std::uint64_t bytes_of(const CheckpointState& s) {
  std::uint64_t n = 0;
  for (const auto* g : groups(s))
    for (const auto& t : *g)
      n += static_cast<std::uint64_t>(t.numel() * t.element_size());
  return n;
}

}  // namespace

namespace {

// 1 + k for a tensor's name ending "@tpk" (a tensor-parallel shard's), else 1.
int shard_count_at_least(const std::string& name) {
  const auto at = name.rfind("@tp");
  if (at == std::string::npos) return 1;
  const std::string k = name.substr(at + 3);
  if (k.empty() || k.size() > 4 ||
      !std::all_of(k.begin(), k.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return 1;
  return std::stoi(k) + 1;
}

// A checkpoint of another task or another tensor-parallel size names its tensors otherwise:
// refused naming that option (it was refused with a guess naming both, over a tensor's name).
template <typename Where, typename Bad>
void refuse_another_model(const nlohmann::json& header, const Where& where,
                          const CheckpointState& expect, const std::vector<std::string>& model,
                          const Bad& bad) {
  const auto& run = header.value("run", nlohmann::json());
  if (run.is_object() && run.contains("task") && expect.run.contains("task") &&
      run["task"] != expect.run["task"])
    throw bad("was written by a run of `task` " + brief(run["task"]) + "; this run's is " +
              brief(expect.run["task"]) + ": a checkpoint resumes the task that wrote it");
  int was = 1, now = 1;
  for (const auto& [name, _] : where)
    was = std::max(was, shard_count_at_least(name));
  for (const std::string& name : model)
    now = std::max(now, shard_count_at_least(name));
  if (was != now)
    throw bad("holds the shards of tensor-parallel size " + std::to_string(was) +
              "; this run's `tp` is " + std::to_string(now) +
              ": a checkpoint resumes at the size that wrote it");
}

// `model`: every tensor name of the whole model, of which `expect` may hold a part. A tensor of
// the file the model lacks is refused (another task's encoder was dropped with only a
// warning, and a job's processes, each checking its part alone, dropped it so).
std::vector<std::string> load_by_name(const std::string& path, CheckpointState& expect,
                                      std::uint64_t max_bytes,
                                      const std::vector<std::string>& model) {
  const std::string bytes = read_input_file(path, InputKind{"resume", max_bytes + (16u << 20)});
  const Parsed p = parse(bytes, path, expect.model);
  auto bad = [&](const std::string& why) { return InputError("`resume`: '" + path + "' " + why); };
  // Where each tensor's parameter bytes start, by name; the moments follow the parameters.
  std::map<std::string, std::pair<std::size_t, std::vector<std::int64_t>>> where;
  std::size_t total = 0;
  if (!p.header["tensors"].is_array())
    throw bad("holds " + brief(p.header["tensors"]) + " parameter tensors, not a list");
  for (const auto& e : p.header["tensors"]) {
    const auto shape = shape_of(e);
    if (!shape) throw bad("has a malformed tensor entry " + printable(e.dump(), 120));
    std::int64_t n = 1;
    for (auto d : *shape)
      n *= d;
    if (!where.emplace(e["name"].get<std::string>(), std::make_pair(total, *shape)).second)
      throw bad("names tensor '" + e["name"].get<std::string>() + "' twice");
    total += static_cast<std::size_t>(n) * sizeof(float);
    if (total > p.end - p.data) throw bad("is truncated (tensor data)");
  }
  if (p.data + 3 * total != p.end)
    throw bad("holds " + std::to_string(p.end - p.data) + " bytes of tensors; its header names " +
              std::to_string(3 * total));
  refuse_another_model(p.header, where, expect, model, bad);
  for (size_t i = 0; i < expect.params.size(); ++i) {  // every one there, before any is copied
    const auto it = where.find(expect.names[i]);
    if (it == where.end() || it->second.second != expect.params[i].sizes().vec())
      throw bad("has no tensor '" + expect.names[i] +
                "' of this run's shape (another task's, of an rrfp that did not record it?)");
  }
  const std::set<std::string> known(model.begin(), model.end());
  for (const auto& [name, _] : where)
    if (!known.contains(name))
      throw bad("holds tensor '" + printable(name, 80) +
                "', which this run's model does not have (another task?)");
  // The values too, before any is copied: a run makes none that is not finite (it stops at a
  // loss that is not a number), nor a negative second moment, whose square root the next step
  // took: a resume from such bytes failed a step or two later (exit 1), or trained on with a
  // NaN in a row of the embedding no batch reached.
  static constexpr const char* kGroup[] = {"", " (AdamW's first moment)",
                                           " (AdamW's second moment)"};
  for (size_t i = 0; i < expect.params.size(); ++i)
    for (size_t g = 0; g < 3; ++g) {
      const std::size_t at = p.data + g * total + where.at(expect.names[i]).first;
      if (const std::string v = bad_value(bytes.data() + at, expect.params[i].numel(), g == 2);
          !v.empty())
        throw bad("holds " + v + " in tensor '" + expect.names[i] + "'" + kGroup[g] +
                  ", which no run writes: the file is damaged, or not a run's");
    }
  torch::NoGradGuard no_grad;
  const auto gs = groups(expect);
  for (size_t i = 0; i < expect.params.size(); ++i) {
    const std::size_t at = where.at(expect.names[i]).first;
    const std::size_t n = expect.params[i].numel() * sizeof(float);
    for (size_t g = 0; g < gs.size(); ++g)
      copy_in((*gs[g])[i], bytes.data() + p.data + g * total + at, n);
  }
  expect.step = static_cast<int>(p.header["step"].get<long long>());
  expect.checksum = p.checksum;
  if (p.header.contains("loss") && p.header["loss"].is_number())
    expect.loss = p.header["loss"].get<double>();
  if (const auto& run = p.header.value("run", nlohmann::json()); run.is_object())
    expect.run_written = run;
  return differences(p.header, expect);
}

}  // namespace

// By name, as a process of a job reads its part: the order of a checkpoint's tensors follows
// the chunks (and TP ranks within each), so at TP > 1 another pipeline layout ordered them
// otherwise, and resuming under it was refused ("parameter 14 is embed.tokens@tp1"), as was
// another TP size, counted in tensors where the shard missing is named now.
std::vector<std::string> load_checkpoint(const std::string& path, CheckpointState& expect) {
  return load_by_name(path, expect, bytes_of(expect), expect.names);
}

std::vector<std::string> load_checkpoint_part(const std::string& path, CheckpointState& expect,
                                              std::uint64_t max_bytes,
                                              const std::vector<std::string>& model) {
  return load_by_name(path, expect, max_bytes, model);
}

}  // namespace rrfp::train
