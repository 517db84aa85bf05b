#pragma once
// The optimisers' vectors: flat double arrays of L·d entries in the
// execution space's memory, and the few operations on them. Reductions
// return to the host (and so fence the instance): the optimisers branch on
// them.

#include <Kokkos_Core.hpp>
#include <cstdint>
#include <limits>
#include <softwave/kokkos_compat.hpp>
#include <string>

namespace softwave::impl {

template <class Space>
using Vector = Kokkos::View<double*, typename Space::memory_space>;

template <class Space>
class VectorOps {
 public:
  VectorOps(const Space& space, std::int64_t size)
      : space_(space), size_(size) {}

  std::int64_t size() const { return size_; }

  // A zeroed vector labelled softwave::barycenter::<what>.
  Vector<Space> make(const char* what) const {
    return Vector<Space>(
        Kokkos::view_alloc(space_,
                           std::string("softwave::barycenter::") + what),
        size_);
  }

  // out = a·x + b·y; out may be x or y.
  void combine(const Vector<Space>& out, double a, const Vector<Space>& x,
               double b, const Vector<Space>& y) const {
    Kokkos::parallel_for(
        "softwave::barycenter::combine", policy(),
        KOKKOS_LAMBDA(std::int64_t q) { out(q) = a * x(q) + b * y(q); });
  }

  double dot(const Vector<Space>& x, const Vector<Space>& y) const {
    double sum = 0;
    Kokkos::parallel_reduce(
        "softwave::barycenter::dot", policy(),
        KOKKOS_LAMBDA(std::int64_t q, double& partial) {
          partial += x(q) * y(q);
        },
        sum);
    return sum;
  }

  // max_q |x_q|, NaN when any entry is not finite (Max's join would drop a
  // NaN, and a stopping rule must never read one as small).
  double max_abs(const Vector<Space>& x) const {
    double largest = 0;
    std::int64_t bad = 0;
    Kokkos::parallel_reduce(
        "softwave::barycenter::max_abs", policy(),
        KOKKOS_LAMBDA(std::int64_t q, double& partial, std::int64_t& count) {
          double const e = x(q) < 0 ? -x(q) : x(q);
          if (!compat::isfinite(e)) ++count;
          if (e > partial) partial = e;
        },
        Kokkos::Max<double>(largest), Kokkos::Sum<std::int64_t>(bad));
    return bad ? std::numeric_limits<double>::quiet_NaN() : largest;
  }

  Kokkos::RangePolicy<Space> policy() const {
    return Kokkos::RangePolicy<Space>(space_, 0, size_);
  }
  const Space& space() const { return space_; }

 private:
  Space space_;
  std::int64_t size_;
};

}  // namespace softwave::impl
