#include "train/checkpoint_parts.hpp"

#include <cstring>
#include <map>
#include <nlohmann/json.hpp>

#include "core/error.hpp"

namespace rrfp::train {

namespace {

void append(std::string& out, const torch::Tensor& t) {
  const auto c = t.detach().cpu().contiguous();
  out.append(static_cast<const char*>(c.data_ptr()), c.numel() * c.element_size());
}

}  // namespace

// A u64 header length, a JSON header (per chunk: its index, TP rank, names and shapes), then
// per chunk its parameters, first moments and second moments, float32.
std::string pack_chunks(const std::vector<ChunkTensors>& chunks) {
  nlohmann::json h = nlohmann::json::array();
  for (const auto& c : chunks) {
    nlohmann::json shapes = nlohmann::json::array();
    for (const auto& p : c.params)
      shapes.push_back(p.sizes().vec());
    h.push_back({{"chunk", c.chunk}, {"rank", c.tp_rank}, {"names", c.names}, {"shapes", shapes}});
  }
  const std::string header = h.dump();
  std::size_t size = sizeof(std::uint64_t) + header.size();
  for (const auto& c : chunks)
    for (const auto* g : {&c.params, &c.exp_avg, &c.exp_avg_sq})
      for (const auto& t : *g)
        size += t.numel() * t.element_size();
  std::string out(sizeof(std::uint64_t), '\0');
  out.reserve(size);  // grown by doubling, it faulted in about twice its size of fresh pages
  const std::uint64_t n = header.size();
  std::memcpy(out.data(), &n, sizeof n);
  out += header;
  for (const auto& c : chunks)
    for (const auto* g : {&c.params, &c.exp_avg, &c.exp_avg_sq})
      for (const auto& t : *g)
        append(out, t);
  return out;
}

void unpack_chunks(const std::vector<std::vector<std::byte>>& packs, int chunks, int tp,
                   CheckpointState& s) {
  std::map<std::pair<int, int>, ChunkTensors> got;
  for (const auto& pack : packs) {
    if (pack.empty()) continue;  // a process of another replica
    const char* p = reinterpret_cast<const char*>(pack.data());
    std::uint64_t hlen = 0;
    std::memcpy(&hlen, p, sizeof hlen);
    const auto h = nlohmann::json::parse(std::string_view(p + sizeof hlen, hlen));
    std::size_t at = sizeof hlen + hlen;
    for (const auto& e : h) {
      ChunkTensors c;
      c.chunk = e["chunk"].get<int>();
      c.tp_rank = e["rank"].get<int>();
      c.names = e["names"].get<std::vector<std::string>>();
      for (auto* g : {&c.params, &c.exp_avg, &c.exp_avg_sq})
        for (const auto& shape : e["shapes"]) {
          auto t = torch::empty(shape.get<std::vector<std::int64_t>>(), torch::kFloat32);
          const std::size_t n = t.numel() * sizeof(float);
          if (at + n > pack.size()) throw Error("checkpoint: a process's part is truncated");
          std::memcpy(t.data_ptr(), p + at, n);
          at += n;
          g->push_back(t);
        }
      if (!got.emplace(std::make_pair(c.chunk, c.tp_rank), std::move(c)).second)
        throw Error("checkpoint: chunk " + e["chunk"].dump() + " came from two processes");
    }
  }
  s.names.clear();
  s.params.clear();
  s.exp_avg.clear();
  s.exp_avg_sq.clear();
  for (int c = 0; c < chunks; ++c)
    for (int r = 0; r < tp; ++r) {
      const auto it = got.find({c, r});
      if (it == got.end())
        throw Error("checkpoint: no process sent chunk " + std::to_string(c) + " of TP rank " +
                    std::to_string(r));
      const ChunkTensors& t = it->second;
      s.names.insert(s.names.end(), t.names.begin(), t.names.end());
      s.params.insert(s.params.end(), t.params.begin(), t.params.end());
      s.exp_avg.insert(s.exp_avg.end(), t.exp_avg.begin(), t.exp_avg.end());
      s.exp_avg_sq.insert(s.exp_avg_sq.end(), t.exp_avg_sq.begin(), t.exp_avg_sq.end());
    }
}

}  // namespace rrfp::train
