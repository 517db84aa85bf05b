#pragma once
// The core's entry points as softwave._core hands them to
// softwave._torch_native, the operators registered with torch in C++
// (torch_native.cpp). That module is built against torch's headers with
// torch's C++ standard-library ABI (_GLIBCXX_USE_CXX11_ABI), which need not
// be the core's, and it does not link the core (one Kokkos a process): it
// calls through this table, which holds plain C types only, so no
// std::string, std::vector or exception crosses between the two.

#include <cstddef>
#include <cstdint>

#include "array_kinds.hpp"

namespace softwave::python::torch_bridge {

// The table's layout; attach() refuses a table of another version.
inline constexpr int version = 1;
// The name of the capsule that carries the table
// (softwave._core.torch_bridge()).
inline constexpr const char* capsule_name = "softwave.torch_bridge";

// A C-contiguous array of rank ≤ 3; data null: not given.
struct Array {
  const char* name = "";  // the argument's name, for errors
  void* data = nullptr;
  DType dtype = DType::other;
  Device device = Device::cpu;
  int device_id = 0;
  int rank = 0;
  std::int64_t shape[3] = {0, 0, 0};
};

// softwave::python::soft_dtw's arguments (dispatch.hpp): the values (B,)
// and, where given, the gradients of their sum.
struct SoftDtwCall {
  double gamma = 1.0;
  const char* cost = "sqeuclidean";
  std::int64_t band = -1;
  const char* kernel = "automatic";
  bool check_values = true;
  bool divergence = false;
  std::uintptr_t stream = 0;  // cudaStream_t as an integer
  Array x, y, values, grad_x, grad_y, lengths_x, lengths_y;
};

// What a call returned: the Python exception its error maps to.
enum class Status : int { ok, value_error, runtime_error };

struct Table {
  int version;
  // On an error, its message goes to message[0, capacity), cut to fit and
  // NUL-terminated.
  Status (*soft_dtw)(const SoftDtwCall* call, char* message,
                     std::size_t capacity);
};

// The core's table (defined in softwave._core).
const Table* table();

}  // namespace softwave::python::torch_bridge
