#pragma once
// Which implementation runs an algorithm's hot kernels. `automatic` takes
// the vendor-specialised path where it applies and the portable Kokkos
// kernels elsewhere; `specialised` insists (an argument error names
// `kernel` and the reason when it does not apply); `portable` never takes
// it. Each algorithm's header says where its specialised path applies.

namespace softwave {

enum class Kernel { automatic, portable, specialised };

}  // namespace softwave
