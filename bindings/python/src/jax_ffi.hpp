#pragma once
// The XLA FFI handlers of jax_ffi.cpp, for module.cpp to hand to JAX as
// capsules (jax.ffi.register_ffi_target). Nothing here includes XLA's
// headers, so the glue compiles without them.

#include <vector>

namespace softwave::python {

struct FfiTarget {
  const char* name;      // the target's name in jax.ffi.ffi_call
  const char* platform;  // "cpu" or "CUDA"
  void* handler;         // XLA_FFI_Error* (*)(XLA_FFI_CallFrame*)
};

// Every handler this build has: the CPU ones, and the CUDA ones in a CUDA
// build.
std::vector<FfiTarget> ffi_targets();

}  // namespace softwave::python
