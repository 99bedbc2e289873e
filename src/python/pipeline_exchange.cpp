// PipelineCore's exchanges over the job, for the Python side: the gathers of numbers and of
// bytes (every process's, the replica's, the data-parallel peers', or named peers'), and the
// sum of gradients over the replicas. Each releases the GIL while it waits on the others.
#include <algorithm>
#include <functional>
#include <memory>
#include <span>

#include "core/error.hpp"
#include "dist/replica_sum.hpp"
#include "python/byte_tensors.hpp"
#include "python/pipeline_core.hpp"

namespace rrfp::py {
namespace pyb = pybind11;

std::vector<std::vector<double>> PipelineCore::all_gather(const std::vector<double>& mine,
                                                          bool arrival) {
  if (!job_) return {mine};
  pyb::gil_scoped_release nogil;
  return arrival ? job_->arrival_gather(mine, arrival_ms_) : job_->all_gather(mine);
}

std::span<const std::byte> byte_span(const at::Tensor& t, const std::string& what) {
  if (t.scalar_type() != at::kByte || !t.is_contiguous() || !t.device().is_cpu() || t.dim() != 1)
    throw InputError(what + ": must be a contiguous one-dimensional uint8 CPU tensor");
  return {static_cast<const std::byte*>(t.data_ptr()), static_cast<std::size_t>(t.numel())};
}

std::vector<at::Tensor> byte_tensors(std::vector<std::vector<std::byte>> all) {
  std::vector<at::Tensor> out;
  for (auto& b : all) {
    if (b.empty()) {
      out.push_back(at::empty({0}, at::kByte));
      continue;
    }
    auto held = std::make_unique<std::vector<std::byte>>(std::move(b));
    std::vector<std::byte>* raw = held.get();
    out.push_back(at::from_blob(
        raw->data(), {static_cast<std::int64_t>(raw->size())}, [raw](void*) { delete raw; },
        at::TensorOptions().dtype(at::kByte)));
    held.release();  // the tensor owns it now
  }
  return out;
}

namespace {

// `gather` (one of the job's byte all-gathers) over `mine`, a contiguous one-dimensional uint8
// CPU tensor, the GIL released: each member's bytes as a uint8 tensor.
std::vector<at::Tensor> gather_tensors(
    const at::Tensor& mine,
    const std::function<std::vector<std::vector<std::byte>>(std::span<const std::byte>)>& gather) {
  const std::span<const std::byte> bytes = byte_span(mine, "`mine`");
  std::vector<std::vector<std::byte>> all;
  {
    pyb::gil_scoped_release nogil;
    all = gather(bytes);
  }
  return byte_tensors(std::move(all));
}

}  // namespace

std::vector<at::Tensor> PipelineCore::all_gather_bytes(const at::Tensor& mine) {
  if (!job_) return {mine};
  return gather_tensors(mine, [&](auto bytes) { return job_->all_gather_bytes(bytes); });
}

std::vector<at::Tensor> PipelineCore::replica_all_gather(const at::Tensor& mine) {
  if (!job_) return {mine};
  return gather_tensors(mine, [&](auto bytes) { return job_->replica_all_gather(bytes); });
}

std::vector<at::Tensor> PipelineCore::dp_all_gather(const at::Tensor& mine) {
  if (!job_ || opt_.dp == 1) return {mine};
  return gather_tensors(mine, [&](auto bytes) { return job_->dp_all_gather(bytes); });
}

std::vector<at::Tensor> PipelineCore::exchange(const at::Tensor& mine,
                                               const std::vector<int>& peers) {
  if (!job_) return {mine};
  return gather_tensors(mine, [&](auto bytes) { return job_->exchange(bytes, peers); });
}

void PipelineCore::dp_sum(const std::vector<at::Tensor>& parts) {
  std::vector<NumSpan> spans;
  for (const auto& t : parts) {
    static const std::vector<std::pair<at::ScalarType, NumKind>> kinds = {
        {at::kFloat, NumKind::f32},
        {at::kDouble, NumKind::f64},
        {at::kHalf, NumKind::f16},
        {at::kBFloat16, NumKind::bf16}};
    const auto k = std::find_if(kinds.begin(), kinds.end(),
                                [&](const auto& e) { return e.first == t.scalar_type(); });
    if (k == kinds.end() || !t.is_contiguous() || !t.device().is_cpu() || t.dim() != 1)
      throw InputError(
          "`parts`: each must be a contiguous one-dimensional CPU tensor of "
          "float32, float64, float16 or bfloat16");
    spans.push_back({k->second, std::span<std::byte>(static_cast<std::byte*>(t.data_ptr()),
                                                     static_cast<std::size_t>(t.nbytes()))});
  }
  if (!job_ || opt_.dp == 1) return;
  pyb::gil_scoped_release nogil;
  rrfp::dp_sum(*job_, spans);
}

}  // namespace rrfp::py
