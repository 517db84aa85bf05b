#pragma once
// Peak bytes of the "softwave::*" allocations made while tracking, through the
// Kokkos Tools allocation callbacks. Shared by the memory tests
// (test_softdtw_memory.cpp) and the benchmarks' peak workspace counter
// (perf/).

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>

#if defined(KOKKOS_ENABLE_CUDA)
#include <cuda_runtime.h>
#endif

namespace softwave_tools {

// Allocation tracking through the Kokkos Tools callbacks (Kokkos 3.4.1:
// Kokkos::Tools::Experimental::set_allocate_data_callback and friends). Only
// installed around the un-timed call, then the previous callbacks (a tool
// loaded via KOKKOS_PROFILE_LIBRARY, or none) are restored, so the timed loop
// runs with the callbacks the user asked for.

struct AllocationPeaks {
  std::uint64_t workspace = 0;  // "softwave::*" labels
  std::uint64_t all = 0;        // every label
};

class AllocationTracker {
 public:
  using Peaks = AllocationPeaks;

  static void start() {
    std::lock_guard<std::mutex> lock(mutex_);
    live_.clear();
    current_ = {};
    peak_ = {};
    const char* trace = std::getenv("SOFTWAVE_BENCH_TRACE_ALLOCATIONS");
    trace_ = trace && *trace && std::strcmp(trace, "0") != 0;
    saved_ = Kokkos::Tools::Experimental::get_callbacks();
    Kokkos::Tools::Experimental::set_allocate_data_callback(&on_allocate);
    Kokkos::Tools::Experimental::set_deallocate_data_callback(&on_deallocate);
  }

  static Peaks stop() {
    Kokkos::Tools::Experimental::set_callbacks(saved_);
    std::lock_guard<std::mutex> lock(mutex_);
    live_.clear();
    return peak_;
  }

  // Labels of allocations outside "softwave::*" seen while tracking.
  static const std::set<std::string>& other_labels() { return other_labels_; }

 private:
  struct Live {
    std::uint64_t bytes;
    bool workspace;
  };

  static bool is_workspace(const char* label) {
    return label && std::strncmp(label, "softwave::", 10) == 0;
  }

  static void on_allocate(Kokkos::Tools::SpaceHandle handle, const char* label,
                          const void* ptr, std::uint64_t size) {
    std::lock_guard<std::mutex> lock(mutex_);
    bool const workspace = is_workspace(label);
    live_[ptr] = Live{size, workspace};
    if (trace_)
      std::cerr << "[alloc]   " << handle.name << " '" << (label ? label : "")
                << "' " << size << " B\n";
    current_.all += size;
    peak_.all = std::max(peak_.all, current_.all);
    if (workspace) {
      current_.workspace += size;
      peak_.workspace = std::max(peak_.workspace, current_.workspace);
    } else {
      other_labels_.insert(label ? label : "(null)");
    }
  }

  static void on_deallocate(Kokkos::Tools::SpaceHandle handle,
                            const char* label, const void* ptr,
                            std::uint64_t size) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (trace_)
      std::cerr << "[dealloc] " << handle.name << " '" << (label ? label : "")
                << "' " << size << " B\n";
    auto const it = live_.find(ptr);
    if (it == live_.end()) return;  // allocated before tracking started
    current_.all -= it->second.bytes;
    if (it->second.workspace) current_.workspace -= it->second.bytes;
    live_.erase(it);
  }

  static inline std::mutex mutex_;
  static inline std::unordered_map<const void*, Live> live_;
  static inline Peaks current_, peak_;
  static inline std::set<std::string> other_labels_;
  static inline bool trace_ = false;
  static inline Kokkos::Tools::Experimental::EventSet saved_;
};

// Peak bytes of the stream-ordered allocations (every call's workspace on
// Kokkos::Cuda, which Kokkos Tools does not see) between start() and stop().
struct StreamOrderedPeak {
#if defined(KOKKOS_ENABLE_CUDA)
  static cudaMemPool_t pool() {
    int device = 0;
    cudaGetDevice(&device);
    cudaMemPool_t p;
    cudaDeviceGetDefaultMemPool(&p, device);
    return p;
  }
  static void start() {
    std::uint64_t zero = 0;
    cudaMemPoolSetAttribute(pool(), cudaMemPoolAttrUsedMemHigh, &zero);
  }
  static std::size_t stop() {
    std::uint64_t high = 0;
    cudaMemPoolGetAttribute(pool(), cudaMemPoolAttrUsedMemHigh, &high);
    return std::size_t(high);
  }
#else
  static void start() {}
  static std::size_t stop() { return 0; }
#endif
};

}  // namespace softwave_tools
