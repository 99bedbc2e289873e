#include "gpu/partition.hpp"

#include <c10/cuda/CUDAStream.h>
#include <cuda.h>

#include <stdexcept>
#include <string>

namespace rrfp::gpu {

namespace {

void check(CUresult r, const char* call) {
  if (r == CUDA_SUCCESS) return;
  const char* msg = nullptr;
  cuGetErrorString(r, &msg);
  throw std::runtime_error(std::string("SM partitions: ") + call +
                           " failed: " + (msg ? msg : "unknown error"));
}

CUdevResource device_sms(int device, CUdevice* dev) {
  check(cuInit(0), "cuInit");
  check(cuDeviceGet(dev, device), "cuDeviceGet");
  CUdevResource all{};
  check(cuDeviceGetDevResource(*dev, &all, CU_DEV_RESOURCE_TYPE_SM), "cuDeviceGetDevResource");
  return all;
}

}  // namespace

int partition_sms(int device, int parts) {
  if (parts < 1) throw std::runtime_error("SM partitions: " + std::to_string(parts) + " parts");
  CUdevice dev{};
  const CUdevResource all = device_sms(device, &dev);
  return static_cast<int>(all.sm.smCount / static_cast<unsigned>(parts) / 8 * 8);
}

std::vector<c10::Stream> partition_streams(int device, int parts) {
  CUdevice dev{};
  CUdevResource all = device_sms(device, &dev);
  // Checked before the division: 0 parts divided by zero.
  const unsigned each = parts < 1 ? 0 : all.sm.smCount / static_cast<unsigned>(parts) / 8 * 8;
  if (parts < 1 || each < 8)
    throw std::runtime_error("SM partitions: " + std::to_string(all.sm.smCount) +
                             " SMs do not split into " + std::to_string(parts) +
                             " partitions of at least 8");
  std::vector<CUdevResource> groups(static_cast<size_t>(parts));
  unsigned made = static_cast<unsigned>(parts);
  CUdevResource rest{};
  check(cuDevSmResourceSplitByCount(groups.data(), &made, &all, &rest, 0, each),
        "cuDevSmResourceSplitByCount");
  if (made < static_cast<unsigned>(parts))
    throw std::runtime_error("SM partitions: the driver made " + std::to_string(made) + " of " +
                             std::to_string(parts) + " partitions");
  std::vector<c10::Stream> out;
  for (auto& g : groups) {
    CUdevResourceDesc desc{};
    check(cuDevResourceGenerateDesc(&desc, &g, 1), "cuDevResourceGenerateDesc");
    CUgreenCtx ctx{};
    check(cuGreenCtxCreate(&ctx, desc, dev, CU_GREEN_CTX_DEFAULT_STREAM), "cuGreenCtxCreate");
    CUstream s{};
    check(cuGreenCtxStreamCreate(&s, ctx, CU_STREAM_NON_BLOCKING, 0), "cuGreenCtxStreamCreate");
    // Kernels launched on this stream (torch's, cuBLAS's) run on the context's SMs only.
    out.push_back(c10::cuda::getStreamFromExternal(s, static_cast<c10::DeviceIndex>(device)));
  }
  return out;
}

}  // namespace rrfp::gpu
