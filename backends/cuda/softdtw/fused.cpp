// The CUDA-specialised Soft-DTW path's host side: which kernel variant runs
// (launch heuristics), the workspace and its chunking, and the entry points
// of fused.hpp. The kernels are the parts included below (see fused.hpp for
// the design). Compiled only when Kokkos has its CUDA backend.

#include "fused.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "backward_kernel.hpp"
#include "common/check.hpp"
#include "common/stream_allocator.hpp"

namespace softwave::impl::cuda_fused {
namespace {

// A launch's workspace stays within what the memory pool keeps reserved
// (pairs are run in chunks; at least one pair a chunk).
constexpr std::size_t kChunkBytes = cuda_support::reserved_pool_bytes;

// Stream-ordered workspace: allocated and freed on the caller's stream, so
// nothing synchronises the device.
class StreamBuffer {
 public:
  StreamBuffer(const Kokkos::Cuda& space, std::size_t bytes)
      : space_(space), data_(cuda_support::stream_allocate(space, bytes)) {}
  ~StreamBuffer() { cuda_support::stream_free(space_, data_); }
  StreamBuffer(const StreamBuffer&) = delete;
  StreamBuffer& operator=(const StreamBuffer&) = delete;
  template <class U>
  U* at(std::size_t offset) const {
    return reinterpret_cast<U*>(static_cast<char*>(data_) + offset);
  }

 private:
  Kokkos::Cuda space_;
  void* data_ = nullptr;
};

struct Layout {
  std::size_t tickets, bottom, messages, checkpoints, total;
};

std::size_t aligned(std::size_t bytes) { return (bytes + 255) / 256 * 256; }

Layout layout(std::int64_t pairs, int strips, int blocks, std::int64_t m_max,
              bool backward) {
  Layout l{};
  std::size_t const slots = std::size_t(pairs) * strips;
  std::size_t at = 0;
  auto take = [&](std::size_t bytes) {
    std::size_t const here = at;
    at += aligned(bytes);
    return here;
  };
  l.tickets = take(2 * sizeof(unsigned long long));
  l.bottom = take(slots * m_max * sizeof(double));
  if (backward) {
    l.messages = take(slots * m_max * sizeof(float));
    l.checkpoints = take(slots * blocks * 2 * kLanes * sizeof(double));
  }
  l.total = at;
  return l;
}

template <class U>
struct TypeTag {
  using type = U;
};

// Calls f(TypeTag<In>{}) with the inputs' element type.
template <class F>
void with_storage(Storage storage, const F& f) {
  switch (storage) {
    case Storage::float32:
      return f(TypeTag<float>{});
    case Storage::bfloat16:
      return f(TypeTag<__nv_bfloat16>{});
    case Storage::float16:
      return f(TypeTag<__half>{});
  }
  throw std::logic_error("softwave::softdtw::fused: unknown storage");
}

// Calls f(std::integral_constant<int, kD>, std::bool_constant<kVec>).
// kVec reads the inputs four elements at a time and adds to the float
// gradient outputs two or four at a time (float2 and float4 atomics), so
// the rows of all four must be aligned to that.
template <class F>
void with_features(const Problem& q, const Outputs& o, const F& f) {
  // Four elements at a time: 16 bytes of float, 8 of a 16-bit type.
  std::uintptr_t const four = q.storage == Storage::float32 ? 16 : 8;
  auto aligned_to = [](const void* p, std::uintptr_t bytes) {
    return reinterpret_cast<std::uintptr_t>(p) % bytes == 0;
  };
  bool const vec = q.d % 4 == 0 && aligned_to(q.x, four) &&
                   aligned_to(q.y, four) && aligned_to(o.grad_x, 16) &&
                   aligned_to(o.grad_y, 16);
  auto pick = [&](auto kd) {
    if constexpr (decltype(kd)::value % 4 == 0) {
      if (vec) return f(kd, std::true_type{});
    }
    f(kd, std::false_type{});
  };
  if (q.d <= 4) return pick(std::integral_constant<int, 4>{});
  if (q.d <= 16) return pick(std::integral_constant<int, 16>{});
  if (q.d <= max_features) return pick(std::integral_constant<int, 64>{});
  throw std::logic_error("softwave::softdtw::fused: d > max_features");
}

// A kernel's shared memory and how many of its blocks an SM holds, set up
// once per device: beyond 48 KiB a kernel must opt in to its shared memory.
struct KernelFit {
  int blocks_per_sm = 0;
  int sms = 0;
};

KernelFit fit_kernel(void (*kernel)(Params), int threads, std::size_t smem,
                     int device) {
  static std::mutex mutex;
  static std::map<std::pair<const void*, int>, KernelFit> fits;
  std::lock_guard<std::mutex> lock(mutex);
  std::pair<const void*, int> const key{reinterpret_cast<const void*>(kernel),
                                        device};
  auto const found = fits.find(key);
  if (found != fits.end()) return found->second;
  if (smem > 48 * 1024)
    SOFTWAVE_CUDA_CHECK(cudaFuncSetAttribute(
        kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  KernelFit f;
  SOFTWAVE_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
      &f.blocks_per_sm, kernel, threads, smem));
  SOFTWAVE_CUDA_CHECK(
      cudaDeviceGetAttribute(&f.sms, cudaDevAttrMultiProcessorCount, device));
  return fits[key] = f;
}

// Whether a launch of `strips` strips takes at most two rounds of resident
// two-warp blocks: beyond that, the one-warp variant's residency can gain
// more than the overlap (two_warp_forward and two_warp_backward say where).
bool within_two_rounds(std::int64_t strips, KernelFit two) {
  return strips <= 2 * std::int64_t(two.blocks_per_sm) * two.sms;
}

// The two-warp backward overlaps a block's recompute with E's walk through
// the block before, but needs about twice the shared memory, so an SM holds
// about half as many strips (at d = 64, 4 instead of 8). Each variant forced
// in one run on an H100 (fwd+bwd; perf/RESULTS.md, "Measured choices"):
// - series: two warps are faster on every shape measured, also at 4 and 8
//   rounds of resident strips (32/2048/64 and 32/4096/64, 0.91 of the time);
// - cost tensors, whose E side writes each tile's 32 × 32 gradient to
//   memory: two warps take 7–11% less time while every strip fits at once
//   and 16% more at 3.1 times as many strips as fit (32/2048), so they run
//   only within two rounds.
bool two_warp_backward(const Problem& q, std::int64_t strips, KernelFit two) {
  return !q.cost || within_two_rounds(strips, two);
}

// The two-warp forward forms tile c + 1's costs while block c is walked;
// its ring is twice as large (8.25 KiB more per strip), so an SM holds
// fewer strips (at d = 1, 11 instead of 20). Measured against one warp on
// an H100 (perf/RESULTS.md, "Measured choices"), forward: 14–32% faster for
// series with d > 4, whose tiles are tensor-core or 16-wide FMA products, on
// every shape of the grid (up to about 5 rounds of resident strips,
// 32/4096/64; a launch that streams many more, as the all-pairs below, was
// not measured at d > 4); at d = 1, whose tiles are cheap, 8–17% faster
// (16/128/1: within 1%) up to 1.4 times as many strips as fit at once
// (32/2048/1), but 35% slower for the all-pairs 1000 × 1000 series of length
// 128 (4 strips per pair, ~60,000 pairs per launch), which stream through the
// SMs and gain more from residency than from overlap. So d ≤ 4 takes two warps
// while the launch fits in two rounds of resident strips. Cost tensors,
// whose tiles are 32 global row loads, follow the d ≤ 4 rule: up to 2,048
// strips (BM_CostForward, 32/2048) two warps took 3–13% less
// time; a streaming launch was not measured.
bool two_warp_forward(const Problem& q, std::int64_t strips, KernelFit two) {
  return (!q.cost && q.d > 4) || within_two_rounds(strips, two);
}

// γ = 0: the forward walks hard DTW (forward_kernel's kHard).
bool hard(const Problem& q) { return q.gamma == 0; }

// Warps per strip set by set_kernel_warps (0: the library chooses).
std::atomic<int> forced_forward_warps{0}, forced_backward_warps{0};

// Launches the one- or two-warp variant of a kernel: `forced` if it is set,
// else the two-warp one where prefer_two(its fit) says so.
template <class PreferTwo>
void launch_variant(cudaStream_t stream, int device, const Params& P,
                    void (*one)(Params), std::size_t one_smem,
                    void (*two)(Params), std::size_t two_smem, int forced,
                    const PreferTwo& prefer_two, const char* what) {
  unsigned const grid = unsigned(P.problem.pairs * P.strips);
  fit_kernel(one, kLanes, one_smem, device);  // sets up its shared memory
  KernelFit const fit_two = fit_kernel(two, 2 * kLanes, two_smem, device);
  if (forced ? forced == 2 : prefer_two(fit_two))
    two<<<grid, 2 * kLanes, two_smem, stream>>>(P);
  else
    one<<<grid, kLanes, one_smem, stream>>>(P);
  cuda_support::check(cudaGetLastError(), what, __FILE__, __LINE__);
}

template <int kD, bool kVec, bool kSeries, class In>
void launch(cudaStream_t stream, int device, const Params& P, bool backward) {
  std::int64_t const strips = P.problem.pairs * P.strips;
  using Layout = SharedLayout<kD, kSeries>;
  auto forward = [&](auto with_checkpoints, auto hard) {
    constexpr bool kCheckpoint = decltype(with_checkpoints)::value;
    constexpr bool kHard = decltype(hard)::value;
    launch_variant(
        stream, device, P,
        forward_kernel<kD, kVec, kSeries, In, kCheckpoint, 1, kHard>,
        Layout::bytes(false, 1),
        forward_kernel<kD, kVec, kSeries, In, kCheckpoint, 2, kHard>,
        Layout::bytes(false, 2),
        forced_forward_warps.load(std::memory_order_relaxed),
        [&](KernelFit two) { return two_warp_forward(P.problem, strips, two); },
        "forward kernel launch");
  };
  if (!backward && hard(P.problem))
    return forward(std::false_type{}, std::true_type{});
  if (!backward) return forward(std::false_type{}, std::false_type{});
  forward(std::true_type{}, std::false_type{});
  launch_variant(
      stream, device, P, backward_kernel<kD, kVec, kSeries, In, 1>,
      Layout::bytes(true, 1), backward_kernel<kD, kVec, kSeries, In, 2>,
      Layout::bytes(true, 2),
      forced_backward_warps.load(std::memory_order_relaxed),
      [&](KernelFit two) { return two_warp_backward(P.problem, strips, two); },
      "backward kernel launch");
}

void run(const Kokkos::Cuda& space, Problem problem, double* values,
         const Outputs& outputs, bool backward) {
  if (problem.pairs == 0) return;
  if (backward && hard(problem))
    throw std::invalid_argument(
        "softwave::softdtw::fused: hard DTW (gamma = 0) has values only here");
  cudaStream_t const stream = space.cuda_stream();
  int const device = space.cuda_device();
  int const strips = int((problem.n_max + kLanes - 1) / kLanes);
  int const blocks = int((problem.m_max + 2 * (kLanes - 1)) / kLanes);
  // Pairs per launch: the workspace stays under 256 MiB (at least one pair).
  std::size_t const per_pair =
      layout(1, strips, blocks, problem.m_max, backward).total;
  std::int64_t const chunk = std::max<std::int64_t>(
      1, std::min<std::int64_t>(problem.pairs, kChunkBytes / per_pair));
  Layout const l = layout(chunk, strips, blocks, problem.m_max, backward);
  StreamBuffer buffer(space, l.total);

  std::int64_t const all = problem.pairs, first = problem.map.begin;
  for (std::int64_t done = 0; done < all; done += chunk) {
    Params P;
    P.problem = problem;
    P.problem.map.begin = first + done;
    P.problem.pairs = std::min(chunk, all - done);
    P.outputs = outputs;
    P.values = values + done;
    // Hard DTW walks R in the cost's own units.
    P.walk_scale = hard(problem) ? 1.0 : 1.4426950408889634 / problem.gamma;
    P.gamma_ln2 = hard(problem) ? 1.0 : problem.gamma * 0.6931471805599453;
    P.strips = strips;
    P.blocks = blocks;
    P.tickets = buffer.at<unsigned long long>(l.tickets);
    P.bottom = buffer.at<double>(l.bottom);
    P.messages = backward ? buffer.at<float>(l.messages) : nullptr;
    P.checkpoints = backward ? buffer.at<double>(l.checkpoints) : nullptr;
    // The first chunk's forward zeroes the gradients for every chunk.
    bool const clear = backward && outputs.zero_gradients && done == 0;
    P.clear[0] = clear ? outputs.grad_x : nullptr;
    P.clear[1] = clear ? outputs.grad_y : nullptr;
    P.clear_size[0] = outputs.grad_x_size;
    P.clear_size[1] = outputs.grad_y_size;
    // Tickets and hand-over rows start at all-ones, for every launch, in one
    // memset (Params::tickets).
    std::size_t const rows_end = backward ? l.checkpoints : l.total;
    SOFTWAVE_CUDA_CHECK(
        cudaMemsetAsync(buffer.at<char>(0), 0xff, rows_end, stream));
    with_storage(problem.storage, [&](auto in) {
      using In = typename decltype(in)::type;
      if (problem.cost) {
        launch<1, false, false, In>(stream, device, P, backward);
      } else {
        with_features(problem, outputs, [&](auto kd, auto vec) {
          launch<decltype(kd)::value, decltype(vec)::value, true, In>(
              stream, device, P, backward);
        });
      }
    });
  }
}

}  // namespace

void set_kernel_warps(int forward, int backward) {
  auto valid = [](int warps) { return warps >= 0 && warps <= 2; };
  if (!valid(forward))
    throw std::invalid_argument(
        "softwave::softdtw::fused: forward warps must be 0, 1 or 2");
  if (!valid(backward))
    throw std::invalid_argument(
        "softwave::softdtw::fused: backward warps must be 0, 1 or 2");
  forced_forward_warps.store(forward, std::memory_order_relaxed);
  forced_backward_warps.store(backward, std::memory_order_relaxed);
}

void forward(const Kokkos::Cuda& space, const Problem& problem,
             double* values) {
  run(space, problem, values, Outputs{}, /*backward=*/false);
}

void forward_backward(const Kokkos::Cuda& space, const Problem& problem,
                      double* values, const Outputs& outputs) {
  run(space, problem, values, outputs, /*backward=*/true);
}

}  // namespace softwave::impl::cuda_fused
