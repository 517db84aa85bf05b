#pragma once
// The one check of CUDA runtime status codes in the CUDA backend: a failure
// throws, naming the call, its file and line, and the runtime's message.

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace softwave::impl::cuda_support {

inline void check(cudaError_t status, const char* what, const char* file,
                  int line) {
  if (status == cudaSuccess) return;
  throw std::runtime_error(std::string("softwave: CUDA error in ") + what +
                           " (" + file + ":" + std::to_string(line) +
                           "): " + cudaGetErrorString(status));
}

}  // namespace softwave::impl::cuda_support

#define SOFTWAVE_CUDA_CHECK(call) \
  ::softwave::impl::cuda_support::check((call), #call, __FILE__, __LINE__)
