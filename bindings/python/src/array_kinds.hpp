#pragma once
// What an array handed to the core holds and where it lives: shared by the
// core's bridge (dispatch.hpp) and the torch operators' table
// (torch_bridge.hpp), so both sides name them alike. Plain enumerations,
// nothing from the standard library.

namespace softwave::python {

enum class DType : int {
  float32,
  float64,
  bfloat16,
  float16,
  int32,
  int64,
  other
};
enum class Device : int { cpu, cuda, other };

}  // namespace softwave::python
