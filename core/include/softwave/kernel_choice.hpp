#pragma once
// Which implementation runs an algorithm's hot kernels. `automatic` takes
// the vendor-specialised path where it applies and the portable Kokkos
// kernels elsewhere; `specialised` insists (an argument error names
// `kernel` and the reason when it does not apply); `portable` never takes
// it. `pairs` (Soft-DTW values only) runs the portable pair-parallel
// kernel, in which each thread owns whole pairs; `automatic` takes it on
// host backends for many pairs. Each algorithm's header says where its
// kernels apply.

namespace softwave {

enum class Kernel { automatic, portable, specialised, pairs };

}  // namespace softwave
