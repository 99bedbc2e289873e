#include "gpu/stall.hpp"

#include <ATen/cuda/Sleep.h>
#include <c10/cuda/CUDAFunctions.h>
#include <cuda_runtime_api.h>

#include <stdexcept>

namespace rrfp::gpu {

void stall_current_stream(std::int64_t ns) {
  // torch's sleep kernel counts the multiprocessor's clock cycles; the clock attribute is its
  // rate in kHz (cudaDeviceProp lost clockRate in CUDA 13).
  int khz = 0;
  if (cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, c10::cuda::current_device()) !=
          cudaSuccess ||
      khz <= 0)
    throw std::runtime_error("gpu: cannot read the device's clock rate");
  at::cuda::sleep(ns * khz / 1'000'000);
}

}  // namespace rrfp::gpu
