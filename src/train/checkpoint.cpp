#include "train/checkpoint.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/input_file.hpp"
#include "core/json_input.hpp"
#include "core/output_file.hpp"

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
  std::uint64_t h = 1469598103934665603ULL;  // FNV-1a
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return h;
}

void save_checkpoint(const std::string& path, const CheckpointState& s) {
  nlohmann::json h;
  h["format"] = "rrfp-checkpoint";
  h["model"] = model_json(s.model);
  h["step"] = s.step;
  h["run"] = s.run;
  h["tensors"] = nlohmann::json::array();
  for (size_t i = 0; i < s.params.size(); ++i)
    h["tensors"].push_back({{"name", s.names[i]}, {"shape", s.params[i].sizes().vec()}});
  const std::string header = h.dump();
  std::string out(kMagic, sizeof kMagic);
  put(out, kVersion);
  put(out, static_cast<std::uint64_t>(header.size()));
  out += header;
  for (const auto* g : groups(s))
    for (const auto& t : *g) {
      const auto c = t.detach().cpu().contiguous();  // a GPU's tensors through host memory
      out.append(static_cast<const char*>(c.data_ptr()), c.numel() * c.element_size());
    }
  put(out, checkpoint_checksum(out));
  const std::string tmp = path + ".tmp";
  const int fd = open_output(tmp, "checkpoint '" + path + "': its temporary '" + tmp + "'",
                             OutputMode{.named_by_user = false});
  // A failed save (a full disk: "No space left on device") leaves the previous checkpoint as
  // it was and no partial file behind.
  try {
    write_all(fd, out, "checkpoint '" + path + "': writing failed");
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
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw InputError("checkpoint '" + path + "': cannot rename " + tmp +
                     " over it: " + std::strerror(err));
  }
  // Make the rename itself durable.
  const std::string dir =
      path.find('/') == std::string::npos ? "." : path.substr(0, path.rfind('/'));
  const int dfd = ::open(dir.empty() ? "/" : dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

std::vector<std::string> load_checkpoint(const std::string& path, CheckpointState& expect) {
  // A checkpoint of this model holds its tensors and a header: nothing larger is read.
  std::uint64_t tensor_bytes = 0;
  for (const auto* g : groups(expect))
    for (const auto& t : *g)
      tensor_bytes += static_cast<std::uint64_t>(t.numel() * t.element_size());
  const std::string bytes = read_input_file(path, InputKind{"resume", tensor_bytes + (16u << 20)});
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
  nlohmann::json h;
  try {
    h = parse_json(std::string_view(bytes).substr(fixed, hlen), "header");
  } catch (const InputError&) {
    throw bad("has an unreadable header");
  }
  // Every header field is checked for its type and range: a checksum only says the bytes are
  // the ones written, not that a writer wrote sense.
  auto field = [&](const char* name) -> const nlohmann::json& {
    if (!h.is_object() || !h.contains(name))
      throw bad(std::string("has no header field \"") + name + "\"");
    return h[name];
  };
  const auto& step = field("step");
  if (!step.is_number_integer() || step.get<long long>() < 0 ||
      step.get<long long>() > 1'000'000'000)
    throw bad("header field \"step\" must be a whole number in [0, 1e9], got " + brief(step));
  if (field("model") != model_json(expect.model))
    throw bad("holds a different model (" + h["model"].dump().substr(0, 200) + ", this run has " +
              model_json(expect.model).dump() + ")");
  const auto& ts = field("tensors");
  if (!ts.is_array() || ts.size() != expect.params.size())
    throw bad("holds " + brief(ts) + " parameter tensors, the model has " +
              std::to_string(expect.params.size()));
  for (size_t i = 0; i < ts.size(); ++i) {
    const auto& e = ts[i];
    const auto want = expect.params[i].sizes().vec();
    bool same = e.is_object() && e.contains("name") && e["name"] == expect.names[i] &&
                e.contains("shape") && e["shape"].is_array() && e["shape"].size() == want.size();
    for (size_t k = 0; same && k < want.size(); ++k)
      same = e["shape"][k].is_number_integer() && e["shape"][k].get<std::int64_t>() == want[k];
    if (!same)
      throw bad("parameter " + std::to_string(i) + " is " + e.dump().substr(0, 120) +
                "; the model's is " + expect.names[i]);
  }
  std::size_t at = fixed + hlen;
  torch::NoGradGuard no_grad;
  for (const auto* g : groups(expect))
    for (const auto& t : *g) {
      const std::size_t n = t.numel() * t.element_size();
      if (at + n > bytes.size() - sizeof stored) throw bad("is truncated (tensor data)");
      if (t.is_cpu()) {
        std::memcpy(t.data_ptr(), bytes.data() + at, n);
      } else {  // a GPU's tensor: through host memory
        auto host = torch::empty(t.sizes(), t.options().device(torch::kCPU));
        std::memcpy(host.data_ptr(), bytes.data() + at, n);
        t.copy_(host);
      }
      at += n;
    }
  if (at != bytes.size() - sizeof stored) throw bad("has trailing bytes");
  expect.step = static_cast<int>(step.get<long long>());
  std::vector<std::string> differences;
  if (h.contains("run") && h["run"].is_object())  // absent in checkpoints of older runs
    for (const auto& [name, mine] : expect.run.items()) {
      const auto& was = h["run"].value(name, nlohmann::json());
      if (!was.is_null() && was != mine)
        differences.push_back("`" + name + "` is " + brief(mine) + "; the checkpoint's run had " +
                              brief(was));
    }
  return differences;
}

}  // namespace rrfp::train
