// Drivers of the barycenter entry points: argument checks, the default
// weights, the double iterate, the optimiser, and the explicit
// instantiations.

#include <cmath>
#include <cstdint>
#include <limits>
#include <softwave/barycenter.hpp>
#include <string>

#include "common/data_checks.hpp"
#include "device_vectors.hpp"
#include "objective.hpp"
#include "optimisers.hpp"

namespace softwave::impl {
namespace {

// γ = 0 (hard DTW) is allowed elsewhere, but f is not smooth there, so
// gradient-based optimisers have nothing sound to follow. The other Soft-DTW
// options are checked by the Soft-DTW entry points, at the first evaluation
// of f, before anything is changed.
void check_smooth(const SoftDTWOptions& options) {
  if (!(options.gamma > 0) || !std::isfinite(options.gamma))
    throw_invalid_argument(
        "gamma must be finite and > 0 for a barycenter (got ", options.gamma,
        "): f is not smooth at gamma = 0");
}

void check_optimiser(const BarycenterOptions& options) {
  check_smooth(options.softdtw);
  if (options.method != BarycenterMethod::lbfgs &&
      options.method != BarycenterMethod::adam)
    throw_invalid_argument("method must be lbfgs or adam (got ",
                           static_cast<int>(options.method), ")");
  if (options.max_iter < 1)
    throw_invalid_argument("max_iter must be >= 1 (got ", options.max_iter,
                           ")");
  if (!(options.tol > 0) || !std::isfinite(options.tol))
    throw_invalid_argument("tol must be finite and > 0 (got ", options.tol,
                           ")");
  if (options.history < 1)
    throw_invalid_argument("history must be >= 1 (got ", options.history, ")");
  if (!(options.learning_rate > 0) || !std::isfinite(options.learning_rate))
    throw_invalid_argument("learning_rate must be finite and > 0 (got ",
                           options.learning_rate, ")");
}

// Counts the entries of a rank-2 view that fail `bad`.
template <class Space, class View, class Bad>
std::int64_t count_entries(const Space& space, const View& v, const char* label,
                           Bad bad) {
  std::int64_t const cols = v.extent(1);
  std::int64_t count = 0;
  Kokkos::parallel_reduce(
      label, Kokkos::RangePolicy<Space>(space, 0, v.extent(0) * cols),
      KOKKOS_LAMBDA(std::int64_t q, std::int64_t & n) {
        if (bad(v(q / cols, q % cols))) ++n;
      },
      count);
  return count;
}

struct NotFinite {
  template <class U>
  KOKKOS_INLINE_FUNCTION bool operator()(U e) const {
    return !compat::isfinite(e);
  }
};

template <class Space, class T, class ZView>
void check_point(const Space& space, ConstSeriesView<T, Space> X,
                 const ZView& z, const char* name) {
  if (z.extent(0) == 0 || z.extent(1) != X.extent(2))
    throw_invalid_argument(name, " has shape (", z.extent(0), ", ", z.extent(1),
                           "), expected (L, ", X.extent(2),
                           ") with L >= 1 and the feature count of X");
  std::int64_t const bad = count_entries(
      space, z, "softwave::barycenter::check_finite", NotFinite{});
  if (bad)
    throw_invalid_argument(name, " has ", bad,
                           " non-finite value(s) (NaN or inf)");
}

// X, lengths and weights; returns the weights to use (1/B when none given).
template <class Space, class T>
WeightsView<T, Space> checked_weights(const Space& space,
                                      ConstSeriesView<T, Space> X,
                                      WeightsView<T, Space> weights,
                                      LengthsView<Space> lengths) {
  check_sequences(X, "X");
  std::size_t const B = X.extent(0);
  if (B == 0)
    throw_invalid_argument(
        "X has no series (X.extent(0) = 0): a barycenter needs at least one");
  DataChecks<Space> checks(space, /*enabled=*/true, "barycenter");
  checks.finite_series(X, checks.lengths(lengths, "lengths", B, X.extent(1)),
                       "X");
  checks.finish();
  if (weights.extent(0) == 0 && weights.data() == nullptr) {
    ArrayView1<T, Space> uniform(
        Kokkos::view_alloc(space, Kokkos::WithoutInitializing,
                           std::string("softwave::barycenter::weights")),
        B);
    Kokkos::deep_copy(space, uniform, T(1.0 / double(B)));
    return uniform;
  }
  check_extent(weights, "weights", {B}, "(one per series of X)");
  std::int64_t bad = 0;
  double sum = 0;
  Kokkos::parallel_reduce(
      "softwave::barycenter::check_weights",
      Kokkos::RangePolicy<Space>(space, 0, B),
      KOKKOS_LAMBDA(std::int64_t b, std::int64_t & n, double& total) {
        double const w = weights(b);
        if (!compat::isfinite(w) || w < 0) ++n;
        total += w;
      },
      Kokkos::Sum<std::int64_t>(bad), Kokkos::Sum<double>(sum));
  if (bad)
    throw_invalid_argument("weights has ", bad,
                           " negative or non-finite value(s): weights must be "
                           "finite and >= 0");
  if (!(sum > 0))
    throw_invalid_argument("weights are all zero: at least one must be > 0");
  if (!compat::isfinite(sum))
    throw_invalid_argument("weights sum to more than the largest double (",
                           std::numeric_limits<double>::max(),
                           "): scale them down");
  // Only the weights' ratios matter: normalised, the objective and its
  // gradient keep the scale that the optimiser's tolerances assume, whatever
  // the caller's scale (1e-6 each would otherwise look converged at once).
  ArrayView1<T, Space> normalised(
      Kokkos::view_alloc(space, Kokkos::WithoutInitializing,
                         std::string("softwave::barycenter::weights")),
      B);
  Kokkos::parallel_for(
      "softwave::barycenter::normalise_weights",
      Kokkos::RangePolicy<Space>(space, 0, B), KOKKOS_LAMBDA(std::int64_t b) {
        normalised(b) = T(double(weights(b)) / sum);
      });
  return normalised;
}

// Between the caller's (L, d) view of T and the optimiser's flat doubles.
template <class Space, class From>
void load(const Space& space, const From& from, const Vector<Space>& to) {
  std::int64_t const d = from.extent(1);
  Kokkos::parallel_for(
      "softwave::barycenter::load",
      Kokkos::RangePolicy<Space>(space, 0, to.extent(0)),
      KOKKOS_LAMBDA(std::int64_t q) { to(q) = double(from(q / d, q % d)); });
}

template <class Space, class To>
void store(const Space& space, const Vector<Space>& from, const To& to) {
  using T = typename To::non_const_value_type;
  std::int64_t const d = to.extent(1);
  Kokkos::parallel_for(
      "softwave::barycenter::store",
      Kokkos::RangePolicy<Space>(space, 0, from.extent(0)),
      KOKKOS_LAMBDA(std::int64_t q) { to(q / d, q % d) = T(from(q)); });
}

}  // namespace

template <class Space, class T>
BarycenterReport barycenter(const Space& space, ConstSeriesView<T, Space> X,
                            ArrayView2<T, Space> z,
                            const BarycenterOptions& options,
                            WeightsView<T, Space> weights,
                            LengthsView<Space> lengths) {
  check_optimiser(options);
  auto const w = checked_weights<Space, T>(space, X, weights, lengths);
  check_point<Space, T>(space, X, z, "barycenter");

  VectorOps<Space> const ops(space, std::int64_t(z.extent(0)) * z.extent(1));
  Objective<Space, T> objective(space, X, z.extent(0), options.softdtw, w,
                                lengths);
  Vector<Space> x = ops.make("iterate");
  load(space, z, x);
  BarycenterReport const report = options.method == BarycenterMethod::lbfgs
                                      ? lbfgs(ops, objective, x, options)
                                      : adam(ops, objective, x, options);
  if (!std::isfinite(report.objective))
    throw_invalid_argument(
        "X gives a barycenter objective of ", report.objective,
        ": the Soft-DTW values overflow at gamma = ", options.softdtw.gamma,
        " (rescale X or lower gamma)");
  store(space, x, z);
  space.fence();
  return report;
}

template <class Space, class T>
double barycenter_objective(const Space& space, ConstSeriesView<T, Space> X,
                            ArrayView2<const T, Space> z,
                            ArrayView2<T, Space> gradient,
                            const SoftDTWOptions& options,
                            WeightsView<T, Space> weights,
                            LengthsView<Space> lengths) {
  check_smooth(options);
  auto const w = checked_weights<Space, T>(space, X, weights, lengths);
  check_point<Space, T>(space, X, z, "z");
  bool const wants_gradient = gradient.extent(0) || gradient.data();
  if (wants_gradient)
    check_extent(gradient, "gradient", {z.extent(0), z.extent(1)},
                 "(the shape of z)");

  VectorOps<Space> const ops(space, std::int64_t(z.extent(0)) * z.extent(1));
  Objective<Space, T> objective(space, X, z.extent(0), options, w, lengths);
  Vector<Space> const x = ops.make("iterate"), g = ops.make("gradient");
  load(space, z, x);
  double const f = objective(x, g);
  if (wants_gradient) store(space, g, gradient);
  space.fence();
  return f;
}

#define SOFTWAVE_INSTANTIATE_BARYCENTER(SPACE, T)                           \
  template BarycenterReport barycenter<SPACE, T>(                           \
      const SPACE&, ConstSeriesView<T, SPACE>, ArrayView2<T, SPACE>,        \
      const BarycenterOptions&, WeightsView<T, SPACE>, LengthsView<SPACE>); \
  template double barycenter_objective<SPACE, T>(                           \
      const SPACE&, ConstSeriesView<T, SPACE>, ArrayView2<const T, SPACE>,  \
      ArrayView2<T, SPACE>, const SoftDTWOptions&, WeightsView<T, SPACE>,   \
      LengthsView<SPACE>);

SOFTWAVE_INSTANTIATE_BARYCENTER(Kokkos::DefaultExecutionSpace, float)
SOFTWAVE_INSTANTIATE_BARYCENTER(Kokkos::DefaultExecutionSpace, double)
#if defined(KOKKOS_ENABLE_CUDA) || defined(KOKKOS_ENABLE_HIP) || \
    defined(KOKKOS_ENABLE_SYCL)
SOFTWAVE_INSTANTIATE_BARYCENTER(Kokkos::DefaultHostExecutionSpace, float)
SOFTWAVE_INSTANTIATE_BARYCENTER(Kokkos::DefaultHostExecutionSpace, double)
#endif

}  // namespace softwave::impl
