#include "gpu/notify.hpp"

#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include <memory>
#include <stdexcept>
#include <string>

namespace rrfp::gpu {

namespace {
void CUDART_CB run_once(void* arg) {
  // The driver calls this once: it owns the function from here on.
  std::unique_ptr<std::function<void()>> fn(static_cast<std::function<void()>*>(arg));
  (*fn)();
}
}  // namespace

void notify_when_done(const c10::Stream& stream, std::function<void()> done) {
  auto fn = std::make_unique<std::function<void()>>(std::move(done));
  const cudaError_t r =
      cudaLaunchHostFunc(c10::cuda::CUDAStream(stream).stream(), run_once, fn.get());
  if (r != cudaSuccess)
    throw std::runtime_error(std::string("gpu: cudaLaunchHostFunc failed: ") +
                             cudaGetErrorString(r));
  fn.release();  // now the driver's
}

}  // namespace rrfp::gpu
