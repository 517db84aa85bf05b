// softwave/graph.hpp: kNN graphs, shortest paths (Dijkstra on the host and
// the device method, alike to the last bit) and landmark embeddings
// against plain float64 ones.
// softwave/gw.hpp: the GW objective and matching of the returned plan
// against float64 sums, one iteration against the float64 Sinkhorn of the
// sampled cost rebuilt from the reported anchors, TorchGW's spiral → Swiss
// roll task with precomputed geodesics and with a landmark embedding
// (signed Spearman ρ, repeatability by seed), fused GW against the Sinkhorn
// of the fused cost and on the same task, multiscale's start against its
// definition, the exact objective's tiled products against plain sums, and
// bad input.

#include <algorithm>
#include <array>
#include <set>
#include <softwave/graph.hpp>
#include <softwave/gw.hpp>
#include <tuple>

#include "gw/objective.hpp"    // tiled_product
#include "gw/specialised.hpp"  // mixture_row_argmax
#include "reference/gw_reference.hpp"
#include "reference/sinkhorn_reference.hpp"
#include "test_helpers.hpp"

namespace {

namespace ref = softwave_ref;
using swt::Rng;

template <class T, class Space>
using V2 = softwave::OTView2<T, Space>;
template <class T, class Space>
using V1 = softwave::OTView1<T, Space>;

using swt::to_device2;

template <class T>
std::vector<double> rounded(std::vector<double> v) {
  for (double& e : v) e = double(T(e));
  return v;
}

// One side as the library takes it (points' coordinates, or their
// distance matrix) and as the reference sees it (the distances of the
// rounded inputs, in float64).
template <class T, class Space>
struct Side {
  softwave::GwDistances<T, Space> distances;
  std::vector<double> matrix;  // n × n
  int n = 0;
};

template <class T, class Space>
Side<T, Space> coordinates_side(const std::vector<double>& x, int n, int dim) {
  Side<T, Space> s;
  s.n = n;
  auto const z = rounded<T>(x);
  s.distances.coordinates = to_device2<T, Space>(z, n, dim);
  s.matrix = ref::euclidean(z, n, dim);
  return s;
}

template <class T, class Space>
Side<T, Space> matrix_side(const std::vector<double>& d, int n) {
  Side<T, Space> s;
  s.n = n;
  s.matrix = rounded<T>(d);
  s.distances.matrix = to_device2<T, Space>(s.matrix, n, n);
  return s;
}

template <class T, class Space>
Side<T, Space> random_side(Rng& rng, int n) {
  int const dim = rng.integer(1, 4);
  std::vector<double> x(std::size_t(n) * dim);
  for (double& e : x) e = rng.uniform(-1, 1);
  if (rng.coin()) return coordinates_side<T, Space>(x, n, dim);
  return matrix_side<T, Space>(ref::euclidean(x, n, dim), n);
}

std::vector<double> random_weights(Rng& rng, int n) {
  std::vector<double> w(n);
  for (double& e : w) e = rng.uniform(0.2, 1.0);
  return w;
}

// A random problem: both sides, weights of equal mass (b scaled to a's),
// on the device and as the library sees them (rounded to T).
template <class T, class Space>
struct RandomProblem {
  Side<T, Space> source, target;
  std::vector<double> a, b;
  double mass = 0;
  softwave::GwMarginals<T, Space> marginals;
  RandomProblem(Rng& rng, int n, int k)
      : source(random_side<T, Space>(rng, n)),
        target(random_side<T, Space>(rng, k)),
        a(random_weights(rng, n)),
        b(random_weights(rng, k)) {
    mass = std::accumulate(a.begin(), a.end(), 0.0);
    double const mb = std::accumulate(b.begin(), b.end(), 0.0);
    for (double& e : b) e *= mass / mb;
    marginals = {swt::to_device<T>(Space(), a), swt::to_device<T>(Space(), b)};
    a = rounded<T>(a);
    b = rounded<T>(b);
  }
};

template <class T>
double tolerance(double for_double, double for_float) {
  return std::is_same_v<T, double> ? for_double : for_float;
}

// TorchGW's task at n × k points in landmark mode (5-NN graphs, 20
// landmarks) with its settings (M = 80, α = 0.8, ε = 0.005).
template <class T, class Space>
struct LandmarkTask {
  Space space;
  int n, k;
  softwave::GwSide<T, Space> source, target;
  softwave::GwOptions options;
  LandmarkTask(int n_, int k_)
      : n(n_),
        k(k_),
        source(space, to_device2<T, Space>(ref::spiral(n, 0, false), n, 2),
               softwave::GwDistanceMode::landmark, 5, 20),
        target(space, to_device2<T, Space>(ref::spiral(k, 1, true), k, 3),
               softwave::GwDistanceMode::landmark, 5, 20) {
    options.anchors = 80;
    options.alpha = 0.8;
    options.epsilon = 0.005;
  }
  // The signed Spearman ρ of the matching of a run (r's plan as given).
  double rho(const softwave::GwLinearCost<T, Space>& linear,
             softwave::GwResult<T, Space> r,
             const softwave::GwOptions& o) const {
    r.matching = V1<int, Space>("matching", n);
    r.compute_objective = false;
    softwave::sampled_gw(space, source.distances(), target.distances(), linear,
                         {}, r, o);
    auto const matching = swt::to_host(r.matching);
    return ref::spearman(std::vector<int>(matching.begin(), matching.end()));
  }
};

// tiled_product's factors and what it does with each entry, as functors
// (device lambdas may not sit in a test's body).
template <class T, class Space>
struct ReadEntry {
  V2<T, Space> m;
  KOKKOS_INLINE_FUNCTION T operator()(std::int64_t i, std::int64_t j) const {
    return m(i, j);
  }
};
template <class Space>
struct StoreAndWeigh {
  V2<double, Space> out;
  V2<double, Space> weights;
  KOKKOS_INLINE_FUNCTION double operator()(std::int64_t i, std::int64_t j,
                                           double value) const {
    out(i, j) = value;
    return weights(i, j) * value;
  }
};

}  // namespace

template <class P>
class SampledGw : public ::testing::Test {};
TYPED_TEST_SUITE(SampledGw, swt::ExecutionSpacesDoubleFloat);

// The objective of the returned plan is the quadruple sum over that plan;
// the matching is each row's argmax; the plan's marginals are a and b.
TYPED_TEST(SampledGw, ObjectiveMatchingAndMarginalsMatchFloat64) {
  using Space = typename TypeParam::space;
  using T = typename TypeParam::value;
  SWT_SEEDED_RNG(rng);
  Space space;
  for (int trial = 0; trial < 6; ++trial) {
    int const n = rng.integer(1, 9), k = rng.integer(1, 9);
    SCOPED_TRACE(::testing::Message() << "n " << n << " k " << k);
    RandomProblem<T, Space> const pr(rng, n, k);
    auto const &source = pr.source, &target = pr.target;
    softwave::GwOptions o;
    o.anchors = rng.integer(1, 6);
    o.max_iterations = rng.integer(1, 5);
    o.min_iterations = 0;
    o.epsilon = 0.5;  // annealed to 0.05, where float solves converge
    // Sinkhorn contracts slowly where the cost's range is many ε (up to
    // about 40 ε here): 2000 iterations left one instance in a few hundred
    // 1e-7 short of the tolerance. The solves stop on it, so a larger cap
    // costs only those instances time.
    o.sinkhorn_iterations = 200000;
    o.sinkhorn_tolerance = tolerance<T>(1e-10, 1e-6);
    o.seed = rng.integer(0, 1 << 30);
    // Odd trials: no room for the larger side's N² distances, so a side
    // given by coordinates is read from them, not formed once.
    if (trial % 2 == 1) o.exact_objective_entries = std::int64_t(n) * k;
    softwave::GwResult<T, Space> r;
    r.plan = V2<T, Space>("plan", n, k);
    r.matching = V1<int, Space>("matching", n);
    softwave::sampled_gw(space, source.distances, target.distances,
                         pr.marginals, r, o);
    auto const plan = swt::to_host(r.plan);
    auto const matching = swt::to_host(r.matching);
    double const want =
        ref::gw_objective(source.matrix, target.matrix, plan, n, k);
    EXPECT_NEAR(r.objective, want, 1e-10 * (std::fabs(want) + 1e-12));
    EXPECT_EQ(r.iterations, o.max_iterations);
    EXPECT_EQ(r.seed, o.seed);
    double row_error = 0, column_error = 0;
    auto const &ar = pr.a, &br = pr.b;
    double const ma = pr.mass;
    for (int i = 0; i < n; ++i) {
      double best = -1, sum = 0;
      for (int j = 0; j < k; ++j) {
        best = std::max(best, plan[std::size_t(i) * k + j]);
        sum += plan[std::size_t(i) * k + j];
        EXPECT_GE(plan[std::size_t(i) * k + j], 0);
      }
      EXPECT_EQ(plan[std::size_t(i) * k + int(matching[i])], best) << i;
      row_error += std::fabs(sum - ar[i]);
    }
    for (int j = 0; j < k; ++j) {
      double sum = 0;
      for (int i = 0; i < n; ++i) sum += plan[std::size_t(i) * k + j];
      column_error += std::fabs(sum - br[j]);
    }
    EXPECT_LE(row_error, tolerance<T>(1e-8, 2e-5) * ma);
    EXPECT_LE(column_error, tolerance<T>(1e-8, 2e-5) * ma);
  }
}

namespace {

// Options under which the plan is one Sinkhorn solve at ε (α = 1, one
// iteration), converged tightly.
template <class T>
softwave::GwOptions one_solve_options(Rng& rng) {
  softwave::GwOptions o;
  o.anchors = rng.integer(1, 8);
  o.alpha = 1;
  o.max_iterations = 1;
  o.min_iterations = 0;
  o.epsilon = rng.uniform(0.03, 0.2);
  o.sinkhorn_iterations = 200000;  // slow contraction at small ε (above)
  o.sinkhorn_tolerance = tolerance<T>(1e-12, 1e-6);
  o.seed = rng.integer(0, 1 << 30);
  o.polish_anchors = 0;  // the plan is that iteration's
  return o;
}

// The reference problem of that solve: the sampled cost rebuilt in float64
// from the reported anchors and scales, the cost given to it added (N×K,
// empty: none), b scaled to a's mass where balanced.
template <class T, class Space>
ref::OTProblem one_solve_problem(const RandomProblem<T, Space>& pr,
                                 const softwave::GwResult<T, Space>& r,
                                 const softwave::GwOptions& o,
                                 const std::vector<double>& added) {
  int const n = pr.source.n, k = pr.target.n;
  ref::OTProblem p;
  p.n = n;
  p.k = k;
  p.a = pr.a;
  p.b = pr.b;
  if (std::isinf(o.rho_a) && std::isinf(o.rho_b)) {
    double const ra = std::accumulate(p.a.begin(), p.a.end(), 0.0),
                 rb = std::accumulate(p.b.begin(), p.b.end(), 0.0);
    for (double& e : p.b) e *= ra / rb;
  }
  p.eps = o.epsilon;
  p.rho_a = o.rho_a;
  p.rho_b = o.rho_b;
  p.cost.assign(std::size_t(n) * k, 0);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < k; ++j) {
      double s = 0;
      for (int c = 0; c < o.anchors; ++c) {
        double const x =
            pr.source.matrix[std::size_t(i) * n + r.source_anchors[c]] /
            r.source_scale;
        double const y =
            pr.target.matrix[std::size_t(j) * k + r.target_anchors[c]] /
            r.target_scale;
        s += (x - y) * (x - y);
      }
      p.cost[std::size_t(i) * k + j] =
          added.empty() ? s / o.anchors
                        : (1 - o.fused_alpha) * s / o.anchors +
                              o.fused_alpha * added[std::size_t(i) * k + j];
    }
  return p;
}

// The largest difference of two plans relative to the largest entry of
// the second.
double relative_difference(const std::vector<double>& plan,
                           const std::vector<double>& want) {
  double largest = 0, worst = 0;
  for (std::size_t q = 0; q < plan.size(); ++q) {
    largest = std::max(largest, want[q]);
    worst = std::max(worst, std::fabs(plan[q] - want[q]));
  }
  return worst / largest;
}

}  // namespace

// The exact objective's and exact iterations' products, a tile at a time:
// every entry of A·B once, in float64, on shapes that fill tiles exactly,
// leave them ragged, or are smaller than one.
TYPED_TEST(SampledGw, TiledProductIsTheProduct) {
  using Space = typename TypeParam::space;
  using T = typename TypeParam::value;
  SWT_SEEDED_RNG(rng);
  Space space;
  std::vector<std::array<int, 3>> shapes = {
      {1, 1, 1}, {8, 8, 8}, {64, 64, 16}, {65, 63, 17}, {128, 9, 33}};
  for (int trial = 0; trial < 4; ++trial)
    shapes.push_back(
        {rng.integer(1, 150), rng.integer(1, 150), rng.integer(1, 100)});
  for (auto const [rows, columns, inner] : shapes) {
    SCOPED_TRACE(::testing::Message()
                 << rows << " x " << columns << " x " << inner);
    auto draw = [&](int count) {
      std::vector<double> v(count);
      for (double& e : v) e = rng.uniform(-1, 1);
      return rounded<T>(v);
    };
    auto const a = draw(rows * inner), b = draw(inner * columns),
               w = draw(rows * columns);
    ReadEntry<T, Space> const left{to_device2<T, Space>(a, rows, inner)};
    ReadEntry<T, Space> const right{to_device2<T, Space>(b, inner, columns)};
    auto const weights = to_device2<double, Space>(w, rows, columns);
    // Summed, and queued only (which returns 0).
    V2<double, Space> out("out", rows, columns),
        queued("queued", rows, columns);
    double const total = softwave::impl::tiled_product(
        space, "softwave::test::tiled_product", rows, columns, inner, left,
        right, StoreAndWeigh<Space>{out, weights}, true);
    EXPECT_EQ(softwave::impl::tiled_product(
                  space, "softwave::test::tiled_product", rows, columns, inner,
                  left, right, StoreAndWeigh<Space>{queued, weights}),
              0.0);
    auto const got = swt::to_host(out);
    EXPECT_EQ(swt::to_host(queued), got);
    double want_total = 0, scale = 0;
    for (int i = 0; i < rows; ++i)
      for (int j = 0; j < columns; ++j) {
        double want = 0;
        for (int l = 0; l < inner; ++l)
          want +=
              a[std::size_t(i) * inner + l] * b[std::size_t(l) * columns + j];
        std::size_t const at = std::size_t(i) * columns + j;
        ASSERT_NEAR(got[at], want, 1e-13 * inner) << i << ", " << j;
        want_total += w[at] * want;
        scale += std::fabs(w[at] * want);
      }
    EXPECT_NEAR(total, want_total, 1e-13 * (scale + 1));
  }
}

// A plan of `count` random Sinkhorn terms of rank `rank` (products of
// order 1, exponents within about ±40 in log₂ units), its factors kept on
// the host for a float64 reference.
template <class T, class Space>
struct RandomTerms {
  using Terms = softwave::impl::PlanTerms<T, Space>;
  using Host = decltype(Kokkos::create_mirror_view(
      std::declval<softwave::OTView3<T, Space>>()));
  using HostRows = decltype(Kokkos::create_mirror_view(
      std::declval<softwave::OTView2<T, Space>>()));
  Terms terms;
  int rank;
  Host p, q;
  HostRows f, u, g, v;

  RandomTerms(const Space& space, swt::Rng& rng, int n, int k, int rank_,
              int count)
      : terms(space, n, k, rank_, count), rank(rank_) {
    double const spread = 1 / std::sqrt(double(std::max(rank, 1)));
    p = fill(rng, terms.p, spread), q = fill(rng, terms.q, spread);
    f = fill(rng, terms.f, 1), u = fill(rng, terms.u, 1);
    g = fill(rng, terms.g, 1), v = fill(rng, terms.v, 1);
  }
  template <class View>
  static auto fill(swt::Rng& rng, const View& view, double spread) {
    auto host = Kokkos::create_mirror_view(view);
    T* const data = host.data();
    for (std::size_t e = 0; e < host.size(); ++e)
      data[e] = T(rng.uniform(-spread, spread));
    Kokkos::deep_copy(view, host);
    return host;
  }
  // Σ_t w_t exp((f_ti − u_ti + g_tj − v_tj + p_ti·q_tj) ε_t⁻¹) in float64.
  double mixture(const std::vector<softwave::impl::TermWeight>& list, int i,
                 int j) const {
    double out = 0;
    for (auto const& t : list) {
      std::size_t const s = t.slot;
      double dot = 0;
      for (int c = 0; c < rank; ++c)
        dot += double(p(s, i, c)) * double(q(s, j, c));
      out += t.weight *
             std::exp((double(f(s, i)) - u(s, i) + g(s, j) - v(s, j) + dot) *
                      t.inverse_epsilon);
    }
    return out;
  }
};

// Random marginal weights summing to 1 (empty on the device: uniform).
template <class T, class Space>
std::vector<double> random_weights(const Space& space, swt::Rng& rng, int n,
                                   bool given, V1<T, Space>& device) {
  std::vector<double> w(n, 1.0 / n);
  if (!given) return w;
  double mass = 0;
  for (double& e : w) mass += e = rng.uniform(0.2, 1);
  for (double& e : w) e /= mass;
  device = swt::to_device<T>(space, w);
  return w;
}

// Runs f(plan, n, k, count) on random plans of up to most_terms terms
// (each traced) in the plan kernels' tests' shapes: ragged and several-part
// shapes, ranks that are not a multiple of 16 (and 0), and random ones.
template <class T, class Space, class F>
void for_each_random_plan(const Space& space, swt::Rng& rng, int most_terms,
                          const F& f) {
  std::vector<std::array<int, 3>> shapes = {
      {1, 1, 0}, {17, 9, 5}, {64, 64, 16}, {200, 700, 82}, {70, 1100, 128}};
  for (int trial = 0; trial < 4; ++trial)
    shapes.push_back(
        {rng.integer(1, 150), rng.integer(1, 300), rng.integer(0, 100)});
  for (auto const [n, k, rank] : shapes) {
    int const count = rng.integer(1, most_terms);
    SCOPED_TRACE(::testing::Message() << n << " x " << k << ", rank " << rank
                                      << ", " << count << " terms");
    RandomTerms<T, Space> const plan(space, rng, n, k, rank, count);
    f(plan, n, k, count);
  }
}

// The CUDA plan kernels take what they are given exactly where the space is
// CUDA and the type float (the tests' terms are all Sinkhorn plans).
template <class Space, class T>
void expect_specialised_where_cuda_float(bool specialised) {
#ifdef KOKKOS_ENABLE_CUDA
  EXPECT_EQ(specialised,
            (std::is_same_v<Space, Kokkos::Cuda> && std::is_same_v<T, float>));
#else
  EXPECT_FALSE(specialised);
#endif
}

// The plan's row argmax, on the CUDA kernels for float (tensor-core
// products of split FP16 operands) and the portable ones otherwise, takes
// in every row a column whose float64 mixture value is the row's largest
// to 1e-4 (exponents here up to about 60 in log₂ units, whose float parts
// and products round to 2⁻²⁴–2⁻²² of their size): the plan shapes, up to 7
// terms, uniform and given column weights.
TYPED_TEST(SampledGw, MixtureArgmaxIsTheFloat64Argmax) {
  using Space = typename TypeParam::space;
  using T = typename TypeParam::value;
  using softwave::impl::TermWeight;
  SWT_SEEDED_RNG(rng);
  Space space;
  for_each_random_plan<T>(
      space, rng, 7,
      [&](const RandomTerms<T, Space>& plan, int n, int k, int count) {
        std::vector<TermWeight> list;
        double total = 0;
        for (int s = 0; s < count; ++s) {
          list.push_back({s, rng.uniform(0.01, 1), rng.uniform(1, 15)});
          total += list.back().weight;
        }
        for (auto& t : list) t.weight /= total;
        V1<T, Space> b_device;
        auto const b =
            random_weights(space, rng, k, rng.integer(0, 1) == 1, b_device);
        softwave::impl::TermSum<T, Space> const sum{
            plan.terms, softwave::impl::term_list<T, Space>(space, list),
            {},         b_device,
            1.0,        {}};
        // Where the CUDA kernels take it, they must (float, all kernel terms).
        expect_specialised_where_cuda_float<Space, T>(
            softwave::impl::SpecialisedPlanKernels<Space, T>::takes_row_argmax(
                sum, list));
        V1<int, Space> matching("matching", n), portable("portable", n);
        softwave::impl::mixture_row_argmax(space, sum, list, matching);
        softwave::impl::row_argmax(space, sum, portable);
        auto const got = swt::to_host(matching), plain = swt::to_host(portable);
        for (int i = 0; i < n; ++i) {
          std::vector<double> value(k);
          for (int j = 0; j < k; ++j)
            value[j] = b[j] * plan.mixture(list, i, j);
          double const best = *std::max_element(value.begin(), value.end());
          for (int chosen : {int(got[i]), int(plain[i])}) {
            ASSERT_GE(chosen, 0) << "row " << i;
            ASSERT_LT(chosen, k) << "row " << i;
            EXPECT_GE(value[chosen], best * (1 - 1e-4)) << "row " << i;
          }
        }
      });
}

// A change check's two norms over a list of rows, ‖Σ_t w_t π_t‖_F for the
// signed weights of a difference and the positive ones of a plan (the
// lists' slots partly shared), on the CUDA kernels for float and the
// portable ones otherwise, are the float64 norms to 1e-4: the plan shapes,
// row lists with repeats and all rows, uniform and given marginals.
TYPED_TEST(SampledGw, ChangeNormsAreTheFloat64Norms) {
  using Space = typename TypeParam::space;
  using T = typename TypeParam::value;
  using softwave::impl::TermWeight;
  SWT_SEEDED_RNG(rng);
  Space space;
  for_each_random_plan<T>(
      space, rng, 9,
      [&](const RandomTerms<T, Space>& plan, int n, int k, int count) {
        // Each slot in the plan, the difference or both; ε per slot.
        std::vector<TermWeight> difference, next;
        for (int s = 0; s < count; ++s) {
          double const inverse_epsilon = rng.uniform(1, 15);
          int const where = rng.integer(0, 2);
          if (where != 1)
            next.push_back({s, rng.uniform(0.01, 1), inverse_epsilon});
          if (where != 0 || next.empty())
            difference.push_back({s, rng.uniform(-1, 1), inverse_epsilon});
        }
        V1<T, Space> a_device, b_device;
        auto const a =
            random_weights(space, rng, n, rng.integer(0, 1) == 1, a_device);
        auto const b =
            random_weights(space, rng, k, rng.integer(0, 1) == 1, b_device);
        std::vector<int> rows;
        if (rng.integer(0, 2) > 0)
          for (int q = rng.integer(1, 2 * n); q > 0; --q)
            rows.push_back(rng.integer(0, n - 1));
        V1<int, Space> row_list;
        if (!rows.empty()) row_list = swt::to_device_int(space, rows, "rows");
        auto const sum_of = [&](const std::vector<TermWeight>& list) {
          softwave::impl::TermSum<T, Space> sum{
              plan.terms, softwave::impl::term_list<T, Space>(space, list),
              a_device,   b_device,
              1.0,        row_list};
          return sum;
        };
        auto const first = sum_of(difference), second = sum_of(next);
        expect_specialised_where_cuda_float<Space, T>(
            softwave::impl::SpecialisedPlanKernels<Space, T>::takes_norms(
                first, difference, next));
        auto const [got_first, got_second] =
            softwave::impl::mixture_frobenius_norms(space, first, second,
                                                    difference, next);
        auto const [plain_first, plain_second] =
            softwave::impl::frobenius_norms(space, first, second);
        double want_first = 0, want_second = 0;
        std::vector<int> all(n);
        for (int i = 0; i < n; ++i) all[i] = i;
        for (int i : rows.empty() ? all : rows)
          for (int j = 0; j < k; ++j) {
            double const ab = a[i] * b[j];
            want_first += std::pow(ab * plan.mixture(difference, i, j), 2);
            want_second += std::pow(ab * plan.mixture(next, i, j), 2);
          }
        want_first = std::sqrt(want_first),
        want_second = std::sqrt(want_second);
        for (auto const [got, want] : {std::pair(got_first, want_first),
                                       std::pair(got_second, want_second),
                                       std::pair(plain_first, want_first),
                                       std::pair(plain_second, want_second)})
          EXPECT_NEAR(got, want, 1e-4 * want);
      });
}

// With α = 1 and one iteration the plan is one Sinkhorn solve of the
// sampled cost: rebuilt in float64 from the reported anchors and scales,
// the reference's plan is the library's (balanced, semi-relaxed and
// unbalanced).
// dense_cost_entries: a count forms each solve's cost densely up to it; the
// default (−1) does so where the low-rank solves would run on the portable
// kernels (up to 2²⁴ entries), never where CUDA's specialised ones take them
// (float, both sides at least 512 points, or 200 with mixed precision).
TYPED_TEST(SampledGw, DenseSolvesWhereTheLowRankOnesArePortable) {
  using Space = typename TypeParam::space;
  using T = typename TypeParam::value;
  SWT_SEEDED_RNG(rng);
  Space space;
  auto dense_solves = [&](int n, int k, std::int64_t entries,
                          bool mixed_precision = true) {
    RandomProblem<T, Space> const pr(rng, n, k);
    softwave::GwOptions o = one_solve_options<T>(rng);
    o.max_iterations = 1;
    o.sinkhorn_iterations = 20;  // (the choice alone is checked)
    o.dense_cost_entries = entries;
    o.mixed_precision = mixed_precision;
    softwave::GwResult<T, Space> r;
    r.compute_objective = false;
    softwave::sampled_gw(space, pr.source.distances, pr.target.distances, {},
                         pr.marginals, r, o);
    return r.dense_solves;
  };
  EXPECT_TRUE(dense_solves(7, 9, -1));
  EXPECT_FALSE(dense_solves(7, 9, 0));
  EXPECT_TRUE(dense_solves(7, 9, 63));
  EXPECT_FALSE(dense_solves(7, 9, 62));
#if defined(KOKKOS_ENABLE_CUDA)
  if constexpr (std::is_same_v<Space, Kokkos::Cuda> &&
                std::is_same_v<T, float>) {
    EXPECT_FALSE(dense_solves(520, 530, -1));
    EXPECT_FALSE(dense_solves(520, 530, -1, false));
    // Tensor-core products (mixed precision) from 200 points a side.
    EXPECT_FALSE(dense_solves(200, 210, -1));
    EXPECT_TRUE(dense_solves(200, 210, -1, false));
    EXPECT_TRUE(dense_solves(199, 210, -1));
  }
#endif
}

TYPED_TEST(SampledGw, OneIterationIsTheSinkhornOfTheSampledCost) {
  using Space = typename TypeParam::space;
  using T = typename TypeParam::value;
  SWT_SEEDED_RNG(rng);
  Space space;
  double const inf = INFINITY;
  for (auto [rho_a, rho_b] : {std::pair(inf, inf), std::pair(inf, 0.7),
                              std::pair(0.5, inf), std::pair(0.6, 0.8)}) {
    int const n = rng.integer(2, 12), k = rng.integer(2, 12);
    SCOPED_TRACE(::testing::Message() << "n " << n << " k " << k << " rho_a "
                                      << rho_a << " rho_b " << rho_b);
    RandomProblem<T, Space> const pr(rng, n, k);
    auto const &source = pr.source, &target = pr.target;
    softwave::GwOptions o = one_solve_options<T>(rng);
    o.rho_a = rho_a;
    o.rho_b = rho_b;
    softwave::GwResult<T, Space> r;
    r.plan = V2<T, Space>("plan", n, k);
    softwave::sampled_gw(space, source.distances, target.distances,
                         pr.marginals, r, o);
    ASSERT_EQ(int(r.source_anchors.size()), o.anchors);
    ASSERT_EQ(int(r.target_anchors.size()), o.anchors);
    // The scales are the largest anchor distances.
    double sx = 0, sy = 0;
    for (int c = 0; c < o.anchors; ++c) {
      for (int i = 0; i < n; ++i)
        sx = std::max(sx,
                      source.matrix[std::size_t(i) * n + r.source_anchors[c]]);
      for (int j = 0; j < k; ++j)
        sy = std::max(sy,
                      target.matrix[std::size_t(j) * k + r.target_anchors[c]]);
    }
    if (sx == 0) sx = 1;
    if (sy == 0) sy = 1;
    EXPECT_NEAR(r.source_scale, sx, 1e-12 * sx);
    EXPECT_NEAR(r.target_scale, sy, 1e-12 * sy);
    auto const want = ref::solve_ot(one_solve_problem(pr, r, o, {}));
    EXPECT_LE(relative_difference(swt::to_host(r.plan), want.plan),
              tolerance<T>(1e-9, 2e-4));
  }
}

// The cost average (GwOptions::cost_ema_beta) with α = 1 and three
// iterations: the plan is the Sinkhorn solve of the weighted sum of the
// three iterations' sampled costs, each rebuilt in float64 from its
// anchors. The anchors of iteration t are those a run of t + 1 iterations
// reports: each is drawn from the solve before it, which runs at the first
// ε in every run (iteration 0's anchors come from the product plan and
// iteration 1's from the first solve), and the last run's own last ones.
// Weights (1 − β)², β(1 − β), β where the average keeps three iterations;
// the last two renormalised where it keeps two (the tolerance leaves the
// first out); β = 1 is the plain sampled cost.
TYPED_TEST(SampledGw, CostAverageIsTheSinkhornOfTheAveragedCost) {
  using Space = typename TypeParam::space;
  using T = typename TypeParam::value;
  SWT_SEEDED_RNG(rng);
  Space space;
  for (int trial = 0; trial < 4; ++trial) {
    int const n = rng.integer(2, 10), k = rng.integer(2, 10);
    RandomProblem<T, Space> const pr(rng, n, k);
    softwave::GwOptions o = one_solve_options<T>(rng);
    double const beta = trial == 3 ? 1.0 : rng.uniform(0.2, 0.8);
    bool const window_of_two = trial == 1;
    o.cost_ema_beta = beta;
    // W = ceil(log(tolerance) / log(1 − β)): 2, or 4 (all three kept).
    o.cost_ema_tolerance =
        beta < 1 ? std::pow(1 - beta, window_of_two ? 1.5 : 3.5) : 1e-3;
    SCOPED_TRACE(::testing::Message()
                 << "n " << n << " k " << k << " beta " << beta
                 << " window of two " << window_of_two);
    std::vector<softwave::GwResult<T, Space>> runs(3);
    for (int t = 0; t < 3; ++t) {
      o.max_iterations = t + 1;
      runs[t].plan = V2<T, Space>("plan", n, k);
      softwave::sampled_gw(space, pr.source.distances, pr.target.distances,
                           pr.marginals, runs[t], o);
    }
    auto const& last = runs[2];
    std::vector<double> weights{beta, beta * (1 - beta),
                                (1 - beta) * (1 - beta)};  // by age
    if (window_of_two) weights = {1 / (2 - beta), (1 - beta) / (2 - beta), 0};
    if (beta == 1) weights = {1, 0, 0};
    ref::OTProblem want_problem;
    for (int age = 0; age < 3; ++age) {
      auto const p = one_solve_problem(pr, runs[2 - age], o, {});
      if (age == 0) {
        want_problem = p;
        for (double& c : want_problem.cost) c = 0;
      }
      for (std::size_t q = 0; q < p.cost.size(); ++q)
        want_problem.cost[q] += weights[age] * p.cost[q];
    }
    want_problem.eps = last.final_epsilon;
    auto const want = ref::solve_ot(want_problem);
    EXPECT_LE(relative_difference(swt::to_host(last.plan), want.plan),
              tolerance<T>(1e-9, 2e-4));
  }
}

// GwOptions::exact_iterations after one sampled solve (α = 1): the plan is
// the Sinkhorn plan of the exact linearised cost of that solve's plan,
//   L_ik = (Σ_j X_ij² r_j + Σ_l Y_kl² c_l − 2 (X π Y)_ik) / Σπ,
// X, Y the distances over the reported scales, all rebuilt in float64; the
// matching is its row argmax and the objective its exact one. Balanced and
// with a relaxed target.
TYPED_TEST(SampledGw, ExactIterationIsTheSinkhornOfTheExactCost) {
  using Space = typename TypeParam::space;
  using T = typename TypeParam::value;
  SWT_SEEDED_RNG(rng);
  Space space;
  for (double rho_b : {double(INFINITY), 0.7}) {
    int const n = rng.integer(2, 10), k = rng.integer(2, 10);
    SCOPED_TRACE(::testing::Message()
                 << "n " << n << " k " << k << " rho_b " << rho_b);
    RandomProblem<T, Space> const pr(rng, n, k);
    softwave::GwOptions o = one_solve_options<T>(rng);
    o.rho_b = rho_b;
    o.exact_iterations = 1;
    softwave::GwResult<T, Space> r;
    r.plan = V2<T, Space>("plan", n, k);
    r.matching = V1<int, Space>("matching", n);
    softwave::sampled_gw(space, pr.source.distances, pr.target.distances,
                         pr.marginals, r, o);
    auto const sampled = ref::solve_ot(one_solve_problem(pr, r, o, {}));
    std::vector<double> rows(n, 0), columns(k, 0);
    double mass = 0;
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < k; ++j) {
        double const p = sampled.plan[std::size_t(i) * k + j];
        rows[i] += p;
        columns[j] += p;
        mass += p;
      }
    auto x = [&](int i, int j) {
      return pr.source.matrix[std::size_t(i) * n + j] / r.source_scale;
    };
    auto y = [&](int i, int j) {
      return pr.target.matrix[std::size_t(i) * k + j] / r.target_scale;
    };
    ref::OTProblem exact = one_solve_problem(pr, r, o, {});
    exact.eps = r.final_epsilon;
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < k; ++j) {
        double source = 0, target = 0, cross = 0;
        for (int l = 0; l < n; ++l) source += x(i, l) * x(i, l) * rows[l];
        for (int l = 0; l < k; ++l) target += y(j, l) * y(j, l) * columns[l];
        for (int l = 0; l < n; ++l)
          for (int m = 0; m < k; ++m)
            cross += x(i, l) * sampled.plan[std::size_t(l) * k + m] * y(m, j);
        exact.cost[std::size_t(i) * k + j] =
            (source + target - 2 * cross) / mass;
      }
    auto const want = ref::solve_ot(exact);
    auto const plan = swt::to_host(r.plan);
    EXPECT_LE(relative_difference(plan, want.plan), tolerance<T>(1e-9, 2e-4));
    auto const matching = swt::to_host(r.matching);
    for (int i = 0; i < n; ++i) {
      auto const row = plan.begin() + std::size_t(i) * k;
      EXPECT_EQ(matching[i], int(std::max_element(row, row + k) - row)) << i;
    }
    double const gw =
        ref::gw_objective(pr.source.matrix, pr.target.matrix, plan, n, k);
    EXPECT_NEAR(r.objective, gw, 1e-10 * (std::fabs(gw) + 1e-12));
    // Without the refinement the plan is the sampled solve's.
    softwave::GwResult<T, Space> plain;
    plain.plan = V2<T, Space>("plan", n, k);
    o.exact_iterations = 0;
    softwave::sampled_gw(space, pr.source.distances, pr.target.distances,
                         pr.marginals, plain, o);
    EXPECT_LE(relative_difference(swt::to_host(plain.plan), sampled.plan),
              tolerance<T>(1e-9, 2e-4));
  }
}

// Fused GW's linear cost as the library takes it (a matrix, or features
// on both sides) and as the reference sees it: C_ik (N×K, float64, from
// the rounded inputs).
template <class T, class Space>
struct Linear {
  softwave::GwLinearCost<T, Space> cost;
  std::vector<double> matrix;
};

template <class T, class Space>
Linear<T, Space> random_linear(Rng& rng, int n, int k, bool features) {
  Linear<T, Space> l;
  l.matrix.assign(std::size_t(n) * k, 0);
  if (features) {
    int const e = rng.integer(1, 3);
    std::vector<double> f(std::size_t(n) * e), g(std::size_t(k) * e);
    for (double& v : f) v = double(T(rng.uniform(-1, 1)));
    for (double& v : g) v = double(T(rng.uniform(-1, 1)));
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < k; ++j)
        for (int d = 0; d < e; ++d) {
          double const diff =
              f[std::size_t(i) * e + d] - g[std::size_t(j) * e + d];
          l.matrix[std::size_t(i) * k + j] += diff * diff;
        }
    l.cost.source_features = to_device2<T, Space>(f, n, e);
    l.cost.target_features = to_device2<T, Space>(g, k, e);
  } else {
    for (double& v : l.matrix) v = double(T(rng.uniform(0, 2)));
    l.cost.matrix = to_device2<T, Space>(l.matrix, n, k);
  }
  return l;
}

namespace {

// Points on each side given as squared Euclidean coordinates (both sides:
// the exact cost) and their distance matrices in float64.
template <class T, class Space>
Side<T, Space> squared_side(Rng& rng, int n, int dim) {
  std::vector<double> x(std::size_t(n) * dim);
  for (double& e : x) e = rng.uniform(-1, 1) + 3;  // off the origin
  Side<T, Space> s;
  s.n = n;
  auto const z = rounded<T>(x);
  s.distances.squared_coordinates = to_device2<T, Space>(z, n, dim);
  s.matrix = ref::euclidean(z, n, dim);
  for (double& d : s.matrix) d *= d;
  return s;
}

// The exact linearised cost L(P) of a plan P (n × k) on distances over
// their scales: (Σ_j X_ij² r_j + Σ_l Y_kl² c_l − 2 (X P Y)_ik) / ΣP.
std::vector<double> exact_cost(const std::vector<double>& dx,
                               const std::vector<double>& dy, double sx,
                               double sy, const std::vector<double>& plan,
                               int n, int k) {
  std::vector<double> rows(n, 0), columns(k, 0), plan_y(std::size_t(n) * k, 0);
  double mass = 0;
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < k; ++j) {
      double const p = plan[std::size_t(i) * k + j];
      rows[i] += p;
      columns[j] += p;
      mass += p;
    }
  for (int l = 0; l < n; ++l)
    for (int j = 0; j < k; ++j)
      for (int m = 0; m < k; ++m)
        plan_y[std::size_t(l) * k + j] +=
            plan[std::size_t(l) * k + m] * dy[std::size_t(m) * k + j] / sy;
  std::vector<double> cost(std::size_t(n) * k);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < k; ++j) {
      double source = 0, target = 0, cross = 0;
      for (int l = 0; l < n; ++l) {
        double const x = dx[std::size_t(i) * n + l] / sx;
        source += x * x * rows[l];
        cross += x * plan_y[std::size_t(l) * k + j];
      }
      for (int l = 0; l < k; ++l) {
        double const y = dy[std::size_t(j) * k + l] / sy;
        target += y * y * columns[l];
      }
      cost[std::size_t(i) * k + j] = (source + target - 2 * cross) / mass;
    }
  return cost;
}

}  // namespace

// Squared Euclidean coordinates on both sides make every solve's cost the
// exact linearised cost of the plan before it (no anchors): three
// iterations with momentum α, rebuilt in float64 from the product plan (ε
// annealed to its final value by the third iteration, the first check at
// min_iterations = 3, as gw.hpp says; each solve converged),
// give the library's plan: balanced, with a relaxed target, with the cost
// average (β = 0.4: each solve's cost 0.6 times the last one's plus 0.4
// L(T_t)), fused with features, and with low-rank solves.
TYPED_TEST(SampledGw, EmbeddingCostIsTheExactCostOfThePlan) {
  using Space = typename TypeParam::space;
  using T = typename TypeParam::value;
  SWT_SEEDED_RNG(rng);
  Space space;
  for (int trial = 0; trial < 5; ++trial) {
    int const n = rng.integer(2, 9), k = rng.integer(2, 9);
    bool const relaxed = trial == 1, average = trial == 2, fused = trial == 3;
    SCOPED_TRACE(::testing::Message()
                 << "n " << n << " k " << k << " trial " << trial);
    RandomProblem<T, Space> pr(rng, n, k);
    // The source's factors narrower than the target's in trial 0 (the cross
    // matrix applied on the target's side), wider in trial 1.
    int const source_dim = trial == 0 ? 1 : trial == 1 ? 3 : rng.integer(1, 4);
    int const target_dim = trial == 0 ? 3 : trial == 1 ? 1 : rng.integer(1, 4);
    pr.source = squared_side<T, Space>(rng, n, source_dim);
    pr.target = squared_side<T, Space>(rng, k, target_dim);
    softwave::GwOptions o = one_solve_options<T>(rng);
    o.max_iterations = 3;
    o.min_iterations = 3;  // ε: ε_0, ε_0 (ε_f/ε_0)^½, ε_f (gw.hpp)
    // ε_f = ε_0/10 as large as one_solve_options' ε, and the scales over
    // 64 anchors (nearly every point): the distances over them at most
    // about 1, so that the float64 solves converge in their iterations.
    o.epsilon = rng.uniform(0.3, 2.0);
    o.anchors = 64;
    o.term_tolerance = 0;  // no term dropped (α near 1 leaves T_0 below 1e-6)
    o.tolerance = 0;
    o.alpha = rng.uniform(0.3, 1.0);
    if (relaxed) o.rho_b = 0.7;
    if (average) o.cost_ema_beta = 0.4;
    // Solves on the low-rank cost, whose plans the Sinkhorn's queries apply
    // (else the cost is dense and so is each plan's product).
    if (trial == 4) o.dense_cost_entries = 0;
    std::vector<double> features_cost;
    softwave::GwLinearCost<T, Space> linear;
    if (fused) {
      auto const l = random_linear<T, Space>(rng, n, k, true);
      linear = l.cost;
      features_cost = l.matrix;
      o.fused_alpha = 0.3;
    }
    softwave::GwResult<T, Space> r;
    r.plan = V2<T, Space>("plan", n, k);
    softwave::sampled_gw(space, pr.source.distances, pr.target.distances,
                         linear, pr.marginals, r, o);
    // The scales: the largest distances to the first iteration's anchors.
    ASSERT_EQ(int(r.source_anchors.size()), o.anchors);
    double sx = 0, sy = 0;
    for (int c = 0; c < o.anchors; ++c) {
      for (int i = 0; i < n; ++i)
        sx = std::max(
            sx, pr.source.matrix[std::size_t(i) * n + r.source_anchors[c]]);
      for (int j = 0; j < k; ++j)
        sy = std::max(
            sy, pr.target.matrix[std::size_t(j) * k + r.target_anchors[c]]);
    }
    EXPECT_NEAR(r.source_scale, sx, 1e-12 * sx);
    EXPECT_NEAR(r.target_scale, sy, 1e-12 * sy);
    ref::OTProblem p = one_solve_problem(pr, r, o, {});
    std::vector<double> plan(std::size_t(n) * k);  // T_0 = a⊗b/Σb
    double const mb = std::accumulate(p.b.begin(), p.b.end(), 0.0);
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < k; ++j)
        plan[std::size_t(i) * k + j] = p.a[i] * p.b[j] / mb;
    double const final_eps =
        std::max(o.epsilon / 10, std::min(5e-4, o.epsilon));
    std::vector<double> previous_cost;
    for (int t = 0; t < 3; ++t) {
      auto cost =
          exact_cost(pr.source.matrix, pr.target.matrix, sx, sy, plan, n, k);
      if (average && t > 0)
        for (std::size_t q = 0; q < cost.size(); ++q)
          cost[q] = 0.6 * previous_cost[q] + 0.4 * cost[q];
      previous_cost = cost;
      for (std::size_t q = 0; q < cost.size(); ++q)
        p.cost[q] = fused ? 0.7 * cost[q] + 0.3 * features_cost[q] : cost[q];
      p.eps = o.epsilon * std::pow(final_eps / o.epsilon, std::min(t, 2) / 2.0);
      auto const solved = ref::solve_ot(p);
      for (std::size_t q = 0; q < plan.size(); ++q)
        plan[q] = (1 - o.alpha) * plan[q] + o.alpha * solved.plan[q];
    }
    EXPECT_LE(relative_difference(swt::to_host(r.plan), plan),
              tolerance<T>(1e-9, 5e-4));
    double const gw =
        ref::gw_objective(pr.source.matrix, pr.target.matrix, plan, n, k);
    EXPECT_NEAR(r.objective, gw, tolerance<T>(1e-9, 1e-3) * std::fabs(gw));
  }
}

// Cosine embeddings (GwSide's cosine mode) of a shuffled, rotated, noisy
// copy of the source: the exact cost finds every counterpart, where the
// distances are dense and concentrated near 1; the objective is that of
// the 1 − cos matrices.
TYPED_TEST(SampledGw, CosineEmbeddingsMatchTheirShuffledRotation) {
  using Space = typename TypeParam::space;
  using T = typename TypeParam::value;
  SWT_SEEDED_RNG(rng);
  Space space;
  auto normal = [&]() {
    return std::normal_distribution<double>()(rng.engine);
  };
  int const n = 120, dim = 24, rank = 8;
  std::vector<double> basis(std::size_t(rank) * dim), x(std::size_t(n) * dim);
  for (double& e : basis) e = normal();
  for (int i = 0; i < n; ++i) {
    std::vector<double> weights(rank);
    for (double& w : weights) w = normal();
    for (int c = 0; c < dim; ++c) {
      double s = 0.3 * normal();
      for (int r = 0; r < rank; ++r) s += weights[r] * basis[r * dim + c];
      x[std::size_t(i) * dim + c] = s;
    }
  }
  // A rotation (Gram–Schmidt of a random matrix), noise of standard
  // deviation 0.05 (the points' coordinates: about 2.9), shuffled rows.
  std::vector<double> q(std::size_t(dim) * dim);
  for (double& e : q) e = normal();
  ref::orthonormalise_rows(q, dim);
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  for (int i = n - 1; i > 0; --i) std::swap(order[i], order[rng.integer(0, i)]);
  std::vector<double> y(std::size_t(n) * dim);
  for (int row = 0; row < n; ++row)
    for (int c = 0; c < dim; ++c) {
      double s = 0.05 * normal();
      for (int r = 0; r < dim; ++r)
        s += x[std::size_t(order[row]) * dim + r] * q[r * dim + c];
      y[std::size_t(row) * dim + c] = s;
    }
  auto const xs = rounded<T>(x), ys = rounded<T>(y);
  auto const xd = to_device2<T, Space>(xs, n, dim);
  auto const yd = to_device2<T, Space>(ys, n, dim);
  using Mode = softwave::GwDistanceMode;
  softwave::GwSide<T, Space> const source(space, V2<const T, Space>(xd),
                                          Mode::cosine),
      target(space, V2<const T, Space>(yd), Mode::cosine);
  softwave::GwOptions o;
  o.seed = rng.integer(0, 1 << 30);
  softwave::GwResult<T, Space> r;
  r.plan = V2<T, Space>("plan", n, n);
  r.matching = V1<int, Space>("matching", n);
  softwave::sampled_gw(space, source.distances(), target.distances(), {}, r, o);
  auto const matching = swt::to_host(r.matching);
  int found = 0;
  for (int row = 0; row < n; ++row) found += matching[order[row]] == row;
  EXPECT_GE(found, n - 1) << "of " << n;
  auto cosine = [](const std::vector<double>& z, int count, int d) {
    std::vector<double> out(std::size_t(count) * count);
    for (int i = 0; i < count; ++i)
      for (int j = 0; j < count; ++j) {
        double dot = 0, ni = 0, nj = 0;
        for (int c = 0; c < d; ++c) {
          dot += z[std::size_t(i) * d + c] * z[std::size_t(j) * d + c];
          ni += z[std::size_t(i) * d + c] * z[std::size_t(i) * d + c];
          nj += z[std::size_t(j) * d + c] * z[std::size_t(j) * d + c];
        }
        out[std::size_t(i) * count + j] = 1 - dot / std::sqrt(ni * nj);
      }
    return out;
  };
  double const gw = ref::gw_objective_by_products(
      cosine(xs, n, dim), cosine(ys, n, dim), swt::to_host(r.plan), n, n);
  EXPECT_NEAR(r.objective, gw, tolerance<T>(1e-9, 1e-4) * gw + 1e-12);
  // Above exact_objective_entries the objective is still exact, from each
  // mixture term's plan applied to the distance factors (no N×K plan): the
  // returned plan's, and after one iteration with α = 0.5 that of half the
  // product plan and half the first solve.
  for (int iterations : {o.max_iterations, 1}) {
    SCOPED_TRACE(iterations);
    softwave::GwOptions dense = o, factored = o;
    dense.max_iterations = factored.max_iterations = iterations;
    if (iterations == 1) dense.alpha = factored.alpha = 0.5;
    factored.exact_objective_entries = 0;
    softwave::GwResult<T, Space> want, got;
    want.plan = V2<T, Space>("plan", n, n);
    softwave::sampled_gw(space, source.distances(), target.distances(), {},
                         want, dense);
    softwave::sampled_gw(space, source.distances(), target.distances(), {}, got,
                         factored);
    double const exact = ref::gw_objective_by_products(
        cosine(xs, n, dim), cosine(ys, n, dim), swt::to_host(want.plan), n, n);
    EXPECT_EQ(got.objective_error, 0);
    // The three sums cancel to about 1e-4 of their size.
    EXPECT_NEAR(got.objective, exact, tolerance<T>(1e-7, 5e-4) * exact);
  }
}

// Fused GW with α = 1 and one iteration is one Sinkhorn solve of
// (1 − β)·Λ + β·C, Λ the sampled cost of the reported anchors (β = 1:
// entropic OT with cost C), for a linear cost given as a matrix and as
// features; its linear objective is ⟨C, T⟩.
TYPED_TEST(SampledGw, FusedOneIterationIsTheSinkhornOfTheFusedCost) {
  using Space = typename TypeParam::space;
  using T = typename TypeParam::value;
  SWT_SEEDED_RNG(rng);
  Space space;
  for (int trial = 0; trial < 6; ++trial) {
    int const n = rng.integer(2, 12), k = rng.integer(2, 12);
    bool const features = trial % 2 == 1;
    RandomProblem<T, Space> const pr(rng, n, k);
    auto const linear = random_linear<T, Space>(rng, n, k, features);
    softwave::GwOptions o = one_solve_options<T>(rng);
    o.fused_alpha = trial < 2 ? 1.0 : rng.uniform(0.05, 0.95);
    SCOPED_TRACE(::testing::Message()
                 << "n " << n << " k " << k << " beta " << o.fused_alpha
                 << " features " << features);
    softwave::GwResult<T, Space> r;
    r.plan = V2<T, Space>("plan", n, k);
    softwave::sampled_gw(space, pr.source.distances, pr.target.distances,
                         linear.cost, pr.marginals, r, o);
    auto const plan = swt::to_host(r.plan);
    auto const want = ref::solve_ot(one_solve_problem(pr, r, o, linear.matrix));
    EXPECT_LE(relative_difference(plan, want.plan), tolerance<T>(1e-9, 2e-4));
    double inner = 0;
    for (std::size_t q = 0; q < plan.size(); ++q)
      inner += linear.matrix[q] * plan[q];
    EXPECT_NEAR(r.linear_objective, inner, 1e-10 * (std::fabs(inner) + 1e-12));
    double const gw =
        ref::gw_objective(pr.source.matrix, pr.target.matrix, plan, n, k);
    EXPECT_NEAR(r.objective, gw, 1e-10 * (std::fabs(gw) + 1e-12));
  }
}

// GwOptions::polish_anchors: after the sampled iterations (here 1 to 3,
// with momentum), one more with P anchors drawn from the plan, momentum 1
// and the last ε. The plan returned is that solve's alone: rebuilt in
// float64 from the P anchors reported and the run's scales, the reference
// plan is the library's (balanced, semi-relaxed, unbalanced, and fused with
// a linear cost), and it is its own last plan, of weight 1.
TYPED_TEST(SampledGw, PolishIsTheSinkhornOfItsSampledCost) {
  using Space = typename TypeParam::space;
  using T = typename TypeParam::value;
  SWT_SEEDED_RNG(rng);
  Space space;
  double const inf = INFINITY;
  for (auto [rho_a, rho_b, fused] :
       {std::tuple(inf, inf, false), std::tuple(inf, 0.7, false),
        std::tuple(0.5, inf, false), std::tuple(0.6, 0.8, false),
        std::tuple(inf, inf, true)}) {
    int const n = rng.integer(2, 12), k = rng.integer(2, 12);
    RandomProblem<T, Space> const pr(rng, n, k);
    softwave::GwOptions o = one_solve_options<T>(rng);
    o.rho_a = rho_a;
    o.rho_b = rho_b;
    o.alpha = rng.uniform(0.3, 1);
    o.max_iterations = rng.integer(1, 3);
    o.polish_anchors = rng.integer(1, 20);
    softwave::GwLinearCost<T, Space> cost;
    std::vector<double> linear;
    if (fused) {
      linear = random_linear<T, Space>(rng, n, k, false).matrix;
      cost.matrix = to_device2<T, Space>(linear, n, k);
      o.fused_alpha = rng.uniform(0.2, 0.8);
    }
    SCOPED_TRACE(::testing::Message()
                 << "n " << n << " k " << k << " rho_a " << rho_a << " rho_b "
                 << rho_b << " beta " << o.fused_alpha << " P "
                 << o.polish_anchors << " iterations " << o.max_iterations);
    softwave::GwResult<T, Space> r;
    r.plan = V2<T, Space>("plan", n, k);
    r.last_plan = V2<T, Space>("last_plan", n, k);
    softwave::sampled_gw(space, pr.source.distances, pr.target.distances, cost,
                         pr.marginals, r, o);
    EXPECT_EQ(r.polish_anchors, o.polish_anchors);
    EXPECT_EQ(r.iterations, o.max_iterations);
    ASSERT_EQ(int(r.source_anchors.size()), o.polish_anchors);
    ASSERT_EQ(int(r.target_anchors.size()), o.polish_anchors);
    softwave::GwOptions polish = o;
    polish.anchors = o.polish_anchors;
    auto problem = one_solve_problem(pr, r, polish, linear);
    problem.eps = r.final_epsilon;
    auto const want = ref::solve_ot(problem);
    auto const plan = swt::to_host(r.plan);
    EXPECT_LE(relative_difference(plan, want.plan), tolerance<T>(1e-9, 2e-4));
    EXPECT_EQ(swt::to_host(r.last_plan), plan);
    EXPECT_EQ(r.last_plan_weight, 1);
  }
  // 0: none, the run's last anchors reported.
  RandomProblem<T, Space> const pr(rng, 6, 7);
  softwave::GwOptions o = one_solve_options<T>(rng);
  softwave::GwResult<T, Space> r;
  softwave::sampled_gw(space, pr.source.distances, pr.target.distances,
                       pr.marginals, r, o);
  EXPECT_EQ(r.polish_anchors, 0);
  EXPECT_EQ(int(r.source_anchors.size()), o.anchors);
}

// The automatic polishing count: 8·M where the solves run on the portable
// passes or form their cost densely, none with exact iterations or
// low-rank couplings; where CUDA's specialised low-rank passes take the
// iterations, the most anchors they take too (rank 128), also when
// kernel = specialised insists on them, and a count given above that is
// then an error naming polish_anchors before the run.
TYPED_TEST(SampledGw, PolishAnchorsFollowTheSolvesKernels) {
  using Space = typename TypeParam::space;
  using T = typename TypeParam::value;
  SWT_SEEDED_RNG(rng);
  Space space;
  auto polished = [&](int n, int k, softwave::GwOptions o,
                      bool linear = false) {
    RandomProblem<T, Space> const pr(rng, n, k);
    o.max_iterations = 1;
    o.min_iterations = 0;
    o.sinkhorn_iterations = 5;
    softwave::GwLinearCost<T, Space> cost;
    if (linear) {
      cost.matrix = to_device2<T, Space>(
          random_linear<T, Space>(rng, n, k, false).matrix, n, k);
      o.fused_alpha = 0.5;
    }
    softwave::GwResult<T, Space> r;
    r.compute_objective = false;
    softwave::sampled_gw(space, pr.source.distances, pr.target.distances, cost,
                         pr.marginals, r, o);
    return r.polish_anchors;
  };
  softwave::GwOptions o;
  o.anchors = rng.integer(1, 6);
  EXPECT_EQ(polished(9, 11, o), 8 * o.anchors);
  EXPECT_EQ(polished(9, 11, o, true), 8 * o.anchors);
  softwave::GwOptions exact = o;
  exact.exact_iterations = 1;
  EXPECT_EQ(polished(9, 11, exact), 0);
  softwave::GwOptions low_rank = o;
  low_rank.coupling_rank = 2;
  EXPECT_EQ(polished(9, 11, low_rank), 0);
#if defined(KOKKOS_ENABLE_CUDA)
  if constexpr (std::is_same_v<Space, Kokkos::Cuda> &&
                std::is_same_v<T, float>) {
    o.anchors = 80;
    EXPECT_EQ(polished(200, 210, o), 128);
    EXPECT_EQ(polished(200, 210, o, true), 640);  // dense solves
    softwave::GwOptions dense = o;
    dense.dense_cost_entries = 200 * 210;
    EXPECT_EQ(polished(200, 210, dense), 640);
    softwave::GwOptions insisting = o;
    insisting.kernel = softwave::Kernel::specialised;
    EXPECT_EQ(polished(200, 210, insisting), 128);
    insisting.polish_anchors = 640;
    EXPECT_TRUE(swt::throws_naming("polish_anchors",
                                   [&] { polished(200, 210, insisting); }));
  }
#endif
}

// Low-rank couplings (GwOptions::coupling_rank): with α = 1 and one
// iteration the plan is the coupling of the sampled cost, rebuilt in
// float64 with dense products by the reference (the core's products are
// the factors'); its marginals are a and b.
TYPED_TEST(SampledGw, OneIterationIsTheLowRankCouplingOfTheSampledCost) {
  using Space = typename TypeParam::space;
  using T = typename TypeParam::value;
  SWT_SEEDED_RNG(rng);
  Space space;
  for (int trial = 0; trial < 6; ++trial) {
    int const n = rng.integer(3, 12), k = rng.integer(3, 12);
    RandomProblem<T, Space> const pr(rng, n, k);
    softwave::GwOptions o = one_solve_options<T>(rng);
    o.coupling_rank = rng.integer(1, 5);
    o.coupling_iterations = rng.integer(1, 4);
    o.coupling_step = rng.uniform(0.5, 5);
    o.dykstra_iterations = 2000;
    o.dykstra_tolerance = tolerance<T>(1e-13, 1e-6);
    Linear<T, Space> linear;
    if (trial >= 3) {  // fused: features, then a matrix
      linear = random_linear<T, Space>(rng, n, k, trial == 3);
      o.fused_alpha = rng.uniform(0.1, 0.9);
    }
    SCOPED_TRACE(::testing::Message()
                 << "n " << n << " k " << k << " rank " << o.coupling_rank
                 << " steps " << o.coupling_iterations << " eps " << o.epsilon
                 << " beta " << o.fused_alpha);
    softwave::GwResult<T, Space> r;
    r.plan = V2<T, Space>("plan", n, k);
    softwave::sampled_gw(space, pr.source.distances, pr.target.distances,
                         linear.cost, pr.marginals, r, o);
    auto const plan = swt::to_host(r.plan);
    auto const problem = one_solve_problem(
        pr, r, o, o.fused_alpha > 0 ? linear.matrix : std::vector<double>{});
    auto const want = ref::lowrank_coupling(
        problem.cost, problem.a, problem.b, o.epsilon, o.coupling_rank,
        o.coupling_step, o.coupling_iterations, o.dykstra_iterations,
        o.dykstra_tolerance);
    EXPECT_LE(relative_difference(plan, want), tolerance<T>(1e-8, 2e-3));
    std::vector<double> rows(n, 0), columns(k, 0);
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < k; ++j) {
        rows[i] += plan[std::size_t(i) * k + j];
        columns[j] += plan[std::size_t(i) * k + j];
      }
    EXPECT_TRUE(swt::near_arrays(rows, problem.a, tolerance<T>(1e-9, 1e-4),
                                 1e-3, "row sums"));
    EXPECT_TRUE(swt::near_arrays(columns, problem.b, tolerance<T>(1e-9, 1e-4),
                                 1e-3, "column sums"));
  }
}

// The last solve's plan (GwResult::last_plan): one iteration with α < 1
// returns (1 − α)·a⊗b/Σb + α·π_1, π_1 the reference's solve of the fused
// cost; the derivative of ⟨G, T⟩ with respect to C_linear, α·β times
// sinkhorn_plan_vjp of that plan, matches central differences of whole
// runs (the first anchors come from a⊗b, so they do not move with C);
// after exact iterations the last plan is the plan, with weight 1.
TYPED_TEST(SampledGw, LastPlanAndItsDerivative) {
  using Space = typename TypeParam::space;
  using T = typename TypeParam::value;
  SWT_SEEDED_RNG(rng);
  Space space;
  for (int trial = 0; trial < 4; ++trial) {
    int const n = rng.integer(2, 6), k = rng.integer(2, 6);
    RandomProblem<T, Space> const pr(rng, n, k);
    auto const linear = random_linear<T, Space>(rng, n, k, false);
    softwave::GwOptions o = one_solve_options<T>(rng);
    o.alpha = rng.uniform(0.3, 0.9);
    o.fused_alpha = rng.uniform(0.2, 0.8);
    if (trial == 3) o.rho_b = rng.uniform(0.5, 2);
    SCOPED_TRACE(::testing::Message()
                 << "n " << n << " k " << k << " alpha " << o.alpha << " beta "
                 << o.fused_alpha << " rho_b " << o.rho_b);
    auto run = [&](const std::vector<double>& matrix,
                   softwave::GwResult<T, Space>& r) {
      softwave::GwLinearCost<T, Space> cost;
      cost.matrix = to_device2<T, Space>(matrix, n, k);
      r.plan = V2<T, Space>("plan", n, k);
      r.last_plan = V2<T, Space>("last_plan", n, k);
      r.compute_objective = false;
      softwave::sampled_gw(space, pr.source.distances, pr.target.distances,
                           cost, pr.marginals, r, o);
    };
    softwave::GwResult<T, Space> r;
    run(linear.matrix, r);
    EXPECT_DOUBLE_EQ(r.last_plan_weight, o.alpha);
    auto const plan = swt::to_host(r.plan);
    auto const last = swt::to_host(r.last_plan);
    auto const want = ref::solve_ot(one_solve_problem(pr, r, o, linear.matrix));
    EXPECT_LE(relative_difference(last, want.plan), tolerance<T>(1e-9, 2e-4));
    double const mb = std::accumulate(pr.b.begin(), pr.b.end(), 0.0);
    std::vector<double> mixed(plan.size());
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < k; ++j)
        mixed[std::size_t(i) * k + j] = (1 - o.alpha) * pr.a[i] * pr.b[j] / mb +
                                        o.alpha * last[std::size_t(i) * k + j];
    EXPECT_LE(relative_difference(plan, mixed), tolerance<T>(1e-12, 1e-5));

    if (!std::is_same_v<T, double>) continue;  // differences: float64 only
    std::vector<double> weights(plan.size());
    for (double& g : weights) g = rng.uniform(-1, 1);
    auto const grad_plan = to_device2<T, Space>(weights, n, k);
    softwave::OTView3<T, Space> grad_cost("grad_cost", 1, n, k);
    softwave::SinkhornOptions so;
    so.epsilon = r.final_epsilon;
    so.rho_a = o.rho_a;
    so.rho_b = o.rho_b;
    softwave::PlanVjpOptions vjp;
    vjp.tolerance = 1e-13;
    softwave::sinkhorn_plan_vjp(
        space, softwave::OTView3<const T, Space>(r.last_plan.data(), 1, n, k),
        softwave::OTView3<const T, Space>(grad_plan.data(), 1, n, k), grad_cost,
        so, vjp);
    auto analytic = swt::to_host(grad_cost);
    for (double& e : analytic) e *= r.last_plan_weight * o.fused_alpha;
    std::vector<double> differences;
    double const h = 1e-5;
    for (std::size_t q = 0; q < plan.size(); ++q) {
      double value[2];
      for (int side = 0; side < 2; ++side) {
        auto matrix = linear.matrix;
        matrix[q] += side ? -h : h;
        softwave::GwResult<T, Space> moved;
        run(matrix, moved);
        auto const p = swt::to_host(moved.plan);
        value[side] = 0;
        for (std::size_t e = 0; e < p.size(); ++e)
          value[side] += weights[e] * p[e];
      }
      differences.push_back((value[0] - value[1]) / (2 * h));
    }
    EXPECT_TRUE(swt::near_arrays(analytic, differences, 1e-5, 1e-3,
                                 "d<G, T>/dC_linear"));
  }
  // Exact iterations: the refined plan is the last solve's.
  RandomProblem<T, Space> const pr(rng, 5, 4);
  auto const linear = random_linear<T, Space>(rng, 5, 4, false);
  softwave::GwOptions o = one_solve_options<T>(rng);
  o.alpha = 0.5;
  o.fused_alpha = 0.5;
  o.exact_iterations = 2;
  softwave::GwResult<T, Space> r;
  r.plan = V2<T, Space>("plan", 5, 4);
  r.last_plan = V2<T, Space>("last_plan", 5, 4);
  softwave::sampled_gw(space, pr.source.distances, pr.target.distances,
                       linear.cost, pr.marginals, r, o);
  EXPECT_EQ(r.last_plan_weight, 1.0);
  EXPECT_EQ(swt::to_host(r.plan), swt::to_host(r.last_plan));
}

// Features and the matrix of their squared distances are the same linear
// cost: the same seed gives the same plan through the low-rank factors and
// through the dense matrix, over many iterations.
TYPED_TEST(SampledGw, FusedFeaturesAndMatrixAgree) {
  using Space = typename TypeParam::space;
  using T = typename TypeParam::value;
  SWT_SEEDED_RNG(rng);
  Space space;
  int const n = rng.integer(10, 40), k = rng.integer(10, 40);
  RandomProblem<T, Space> const pr(rng, n, k);
  auto const linear = random_linear<T, Space>(rng, n, k, true);
  softwave::GwLinearCost<T, Space> dense;
  dense.matrix = to_device2<T, Space>(linear.matrix, n, k);
  softwave::GwOptions o;
  o.anchors = rng.integer(2, 8);
  o.max_iterations = 8;
  o.min_iterations = 0;
  o.epsilon = 0.05;
  o.fused_alpha = rng.uniform(0.2, 0.8);
  o.seed = rng.integer(0, 1 << 30);
  auto solve = [&](const softwave::GwLinearCost<T, Space>& c) {
    softwave::GwResult<T, Space> r;
    r.plan = V2<T, Space>("plan", n, k);
    softwave::sampled_gw(space, pr.source.distances, pr.target.distances, c,
                         pr.marginals, r, o);
    return std::make_pair(r, swt::to_host(r.plan));
  };
  auto const [by_features, features_plan] = solve(linear.cost);
  auto const [by_matrix, matrix_plan] = solve(dense);
  EXPECT_EQ(by_features.target_anchors, by_matrix.target_anchors);
  EXPECT_LE(relative_difference(features_plan, matrix_plan),
            tolerance<T>(1e-9, 1e-3));
  EXPECT_NEAR(by_features.linear_objective, by_matrix.linear_objective,
              tolerance<T>(1e-9, 1e-3) * by_matrix.linear_objective);
}

// A warm start: after one iteration the plan is (1 − α)·T_0 (scaled to a's
// mass) + α·π_1, and every anchor of that iteration was drawn from T_0 (a
// plan with one column a row: each target anchor is its row's column).
TYPED_TEST(SampledGw, WarmStartMixesAndSamplesTheGivenPlan) {
  using Space = typename TypeParam::space;
  using T = typename TypeParam::value;
  SWT_SEEDED_RNG(rng);
  Space space;
  for (int trial = 0; trial < 4; ++trial) {
    int const n = rng.integer(2, 12), k = rng.integer(2, 12);
    SCOPED_TRACE(::testing::Message() << "n " << n << " k " << k);
    RandomProblem<T, Space> const pr(rng, n, k);
    std::vector<int> column(n);
    std::vector<double> initial(std::size_t(n) * k, 0.0);
    double total = 0;
    for (int i = 0; i < n; ++i) {
      column[i] = rng.integer(0, k - 1);
      double const v = double(T(rng.uniform(0.1, 2)));
      initial[std::size_t(i) * k + column[i]] = v;
      total += v;
    }
    softwave::GwOptions o = one_solve_options<T>(rng);
    o.alpha = rng.uniform(0.3, 0.9);
    o.warm_start = true;
    softwave::GwResult<T, Space> r;
    r.plan = to_device2<T, Space>(initial, n, k);
    softwave::sampled_gw(space, pr.source.distances, pr.target.distances,
                         pr.marginals, r, o);
    for (int c = 0; c < o.anchors; ++c)
      EXPECT_EQ(r.target_anchors[c], column[r.source_anchors[c]]) << c;
    auto const pi = ref::solve_ot(one_solve_problem(pr, r, o, {})).plan;
    std::vector<double> want(pi.size());
    for (std::size_t q = 0; q < want.size(); ++q)
      want[q] = (1 - o.alpha) * initial[q] * pr.mass / total + o.alpha * pi[q];
    EXPECT_LE(relative_difference(swt::to_host(r.plan), want),
              tolerance<T>(1e-9, 2e-4));
  }
}

// On TorchGW's task, a warm start from the forward or the reversed matching
// keeps it: few iterations from a plan stay near it.
TYPED_TEST(SampledGw, WarmStartKeepsTheMatchingItStartsFrom) {
  using Space = typename TypeParam::space;
  using T = typename TypeParam::value;
  LandmarkTask<T, Space> const task(300, 360);
  int const n = task.n, k = task.k;
  softwave::GwOptions o = task.options;
  o.max_iterations = 10;
  o.warm_start = true;
  o.seed = 5;
  for (bool reversed : {false, true}) {
    std::vector<double> initial(std::size_t(n) * k, 0.0);
    for (int i = 0; i < n; ++i) {
      int const j = int(std::lround(double(i) * (k - 1) / (n - 1)));
      initial[std::size_t(i) * k + (reversed ? k - 1 - j : j)] = 1;
    }
    softwave::GwResult<T, Space> r;
    r.plan = to_device2<T, Space>(initial, n, k);
    double const rho = task.rho({}, r, o);
    if (reversed)
      EXPECT_LE(rho, -0.99);
    else
      EXPECT_GE(rho, 0.99);
  }
}

// Two random sides of 6 to 13 points, and options for short runs with a
// random anchor count and seed: the restart tests' problem, and what a
// call on it gives (with the iteration hook's calls counted).
template <class T, class Space>
struct RestartProblem {
  struct Outcome {
    double objective;
    std::uint64_t seed;
    std::vector<double> plan, restart_objectives;
    int calls;
  };
  int n, k;
  Side<T, Space> source, target;
  softwave::GwOptions o;
  explicit RestartProblem(Rng& rng)
      : n(rng.integer(6, 14)),
        k(rng.integer(6, 14)),
        source(random_side<T, Space>(rng, n)),
        target(random_side<T, Space>(rng, k)) {
    o.anchors = rng.integer(2, 6);
    o.min_iterations = 0;
    o.seed = rng.integer(0, 1 << 30);
  }
  // o with the given seed, restarts and race, and iterations (0: o's).
  Outcome solve(std::uint64_t seed, int restarts, int race = 0,
                int iterations = 0) const {
    softwave::GwOptions counted = o;
    counted.seed = seed;
    counted.restarts = restarts;
    counted.restart_iterations = race;
    if (iterations > 0) counted.max_iterations = iterations;
    int calls = 0;
    counted.on_iteration = [&](int, int) { ++calls; };
    softwave::GwResult<T, Space> r;
    r.plan = V2<T, Space>("plan", n, k);
    softwave::sampled_gw(Space(), source.distances, target.distances, {}, r,
                         counted);
    return Outcome{r.objective, r.seed, swt::to_host(r.plan),
                   r.restart_objectives, calls};
  }
};

// Restarts keep the lowest objective of their seeds and report each one's;
// a seed repeats its plan exactly.
TYPED_TEST(SampledGw, RestartsKeepTheBestSeedAndSeedsRepeat) {
  using Space = typename TypeParam::space;
  using T = typename TypeParam::value;
  SWT_SEEDED_RNG(rng);
  RestartProblem<T, Space> p(rng);
  p.o.max_iterations = 6;
  p.o.epsilon = 0.02;
  int const restarts = 4;
  auto const best = p.solve(p.o.seed, restarts);
  ASSERT_EQ(best.restart_objectives.size(), std::size_t(restarts));
  double lowest = INFINITY;
  std::vector<double> lowest_plan;
  for (int s = 0; s < restarts; ++s) {
    auto const one = p.solve(p.o.seed + s, 1);
    EXPECT_EQ(best.restart_objectives[s], one.objective) << "seed " << s;
    EXPECT_TRUE(one.restart_objectives.empty());
    if (one.objective < lowest) lowest = one.objective, lowest_plan = one.plan;
  }
  EXPECT_EQ(best.objective, lowest);
  EXPECT_EQ(best.plan, lowest_plan);
  EXPECT_EQ(p.solve(p.o.seed + 1, 1).plan, p.solve(p.o.seed + 1, 1).plan);
}

// A race (restart_iterations = s) runs each seed s iterations, reports
// their objectives then (the runs of max_iterations = s: ε at most 5e-4 is
// not annealed, so a shorter run is the longer one's prefix), and returns
// the whole run of the lowest: its plan, objective and seed exactly. The
// hook sees every iteration run, the race's and the winner's.
TYPED_TEST(SampledGw, RaceRunsTheLowestSeedToTheEnd) {
  using Space = typename TypeParam::space;
  using T = typename TypeParam::value;
  SWT_SEEDED_RNG(rng);
  RestartProblem<T, Space> p(rng);
  p.o.max_iterations = 8;
  p.o.tolerance = 0;
  p.o.epsilon = 5e-4;
  int const restarts = 4, s = rng.integer(1, 7);
  auto const race = p.solve(p.o.seed, restarts, s);
  ASSERT_EQ(race.restart_objectives.size(), std::size_t(restarts));
  // The race compares the seeds' plans as their first s iterations leave
  // them (not polished): a run of s iterations without the polishing one.
  RestartProblem<T, Space> unpolished = p;
  unpolished.o.polish_anchors = 0;
  int winner = 0;
  for (int r = 0; r < restarts; ++r) {
    EXPECT_EQ(race.restart_objectives[r],
              unpolished.solve(p.o.seed + r, 1, 0, s).objective)
        << "seed " << r;
    if (race.restart_objectives[r] < race.restart_objectives[winner])
      winner = r;
  }
  auto const whole = p.solve(p.o.seed + winner, 1);
  EXPECT_EQ(race.seed, p.o.seed + winner);
  EXPECT_EQ(race.objective, whole.objective);
  EXPECT_EQ(race.plan, whole.plan);
  EXPECT_EQ(race.calls, restarts * s + p.o.max_iterations);
}

// Above exact_objective_entries the objective is estimated from pairs
// drawn from the plan: within 5 standard errors of the exact objective of
// the same run (the estimate's draws leave the run alone), with matrices,
// coordinates and graphs, and the fused linear objective likewise; restarts
// keep the lowest estimate.
TYPED_TEST(SampledGw, SampledObjectiveEstimatesTheExactOne) {
  using Space = typename TypeParam::space;
  using T = typename TypeParam::value;
  SWT_SEEDED_RNG(rng);
  Space space;
  int const n = rng.integer(40, 80), k = rng.integer(40, 80);
  auto const x = ref::spiral(n, rng.integer(0, 1000), false);
  auto const y = ref::spiral(k, rng.integer(0, 1000), true);
  auto const gx = softwave::knn_graph(
      space, V2<const T, Space>(to_device2<T, Space>(x, n, 2)), 5);
  auto const gy = softwave::knn_graph(
      space, V2<const T, Space>(to_device2<T, Space>(y, k, 3)), 5);
  auto const dx = coordinates_side<T, Space>(x, n, 2);
  auto const dy = matrix_side<T, Space>(ref::euclidean(y, k, 3), k);
  softwave::GwDistances<T, Space> const graph_x{{}, {}, &gx},
      graph_y{{}, {}, &gy};
  auto const linear = random_linear<T, Space>(rng, n, k, true);
  // Weights of mass about n/2: the objective scales with its square.
  auto a = random_weights(rng, n), b = random_weights(rng, k);
  double const ma = std::accumulate(a.begin(), a.end(), 0.0),
               mb = std::accumulate(b.begin(), b.end(), 0.0);
  for (double& e : b) e *= ma / mb;
  softwave::GwMarginals<T, Space> const weights{swt::to_device<T>(space, a),
                                                swt::to_device<T>(space, b)};
  softwave::GwOptions o;
  o.anchors = 10;
  o.max_iterations = 6;
  o.epsilon = 0.05;
  o.fused_alpha = 0.2;
  o.objective_samples = 3000;
  o.seed = rng.integer(0, 1 << 20);
  // Coordinates and a matrix, graphs, and a relaxed source and target (a
  // plan whose mass is not a's, its rows not a).
  for (int config = 0; config < 3; ++config) {
    bool const graphs = config == 1;
    SCOPED_TRACE(config == 0   ? "coordinates and matrix"
                 : config == 1 ? "graphs"
                               : "relaxed");
    o.rho_a = o.rho_b = config == 2 ? 0.02 : double(INFINITY);
    auto const& source = graphs ? graph_x : dx.distances;
    auto const& target = graphs ? graph_y : dy.distances;
    auto run = [&](const softwave::GwOptions& oo) {
      softwave::GwResult<T, Space> r;
      softwave::sampled_gw(space, source, target, linear.cost, weights, r, oo);
      return r;
    };
    auto const exact = run(o);
    softwave::GwOptions sampled = o;
    sampled.exact_objective_entries = 0;
    auto const estimate = run(sampled);
    EXPECT_EQ(exact.target_anchors, estimate.target_anchors);
    EXPECT_EQ(exact.objective_error, 0);
    EXPECT_GT(estimate.objective_error, 0);
    EXPECT_LE(estimate.objective_error, 0.1 * exact.objective);
    EXPECT_LE(std::fabs(estimate.objective - exact.objective),
              5 * estimate.objective_error)
        << estimate.objective << " ± " << estimate.objective_error << " vs "
        << exact.objective;
    EXPECT_GT(estimate.linear_objective_error, 0);
    EXPECT_LE(std::fabs(estimate.linear_objective - exact.linear_objective),
              5 * estimate.linear_objective_error);
  }
  // Restarts keep the lowest estimate of their seeds.
  o.fused_alpha = 0;
  o.exact_objective_entries = 0;
  auto run = [&](int restarts, std::uint64_t seed) {
    softwave::GwOptions oo = o;
    oo.restarts = restarts;
    oo.seed = seed;
    softwave::GwResult<T, Space> r;
    softwave::sampled_gw(space, dx.distances, dy.distances, {}, r, oo);
    return r;
  };
  auto const best = run(3, o.seed);
  double lowest = INFINITY;
  std::uint64_t lowest_seed = 0;
  for (int r = 0; r < 3; ++r) {
    auto const one = run(1, o.seed + r);
    if (one.objective < lowest) lowest = one.objective, lowest_seed = one.seed;
  }
  EXPECT_EQ(best.objective, lowest);
  EXPECT_EQ(best.seed, lowest_seed);
}

// The iteration hook sees every iteration of every restart, in order.
TYPED_TEST(SampledGw, OnIterationSeesEveryIteration) {
  using Space = typename TypeParam::space;
  using T = typename TypeParam::value;
  SWT_SEEDED_RNG(rng);
  RandomProblem<T, Space> const pr(rng, rng.integer(4, 12), rng.integer(4, 12));
  softwave::GwOptions o;
  o.anchors = 3;
  o.max_iterations = rng.integer(2, 7);
  o.min_iterations = 0;
  o.tolerance = 0;
  o.restarts = 2;
  std::vector<std::pair<int, int>> calls;
  o.on_iteration = [&](int restart, int iterations) {
    calls.emplace_back(restart, iterations);
  };
  softwave::GwResult<T, Space> r;
  softwave::sampled_gw(Space(), pr.source.distances, pr.target.distances,
                       pr.marginals, r, o);
  std::vector<std::pair<int, int>> want;
  for (int restart = 0; restart < 2; ++restart)
    for (int t = 1; t <= o.max_iterations; ++t) want.emplace_back(restart, t);
  EXPECT_EQ(calls, want);
}

// The reported change is ‖T_t − T_{t−1}‖_F / ‖T_t‖_F: against the plans
// of the same seed stopped one iteration apart (ε at most 5e-4 is not
// annealed, so the shorter run is the longer one's prefix), exactly over
// all rows, and as an estimate over some of them.
TYPED_TEST(SampledGw, ChangeIsRelativeToThePlan) {
  using Space = typename TypeParam::space;
  using T = typename TypeParam::value;
  SWT_SEEDED_RNG(rng);
  Space space;
  int const n = rng.integer(8, 40), k = rng.integer(8, 40);
  RandomProblem<T, Space> const pr(rng, n, k);
  softwave::GwOptions o;
  o.anchors = rng.integer(2, 6);
  o.alpha = rng.uniform(0.5, 0.95);
  o.min_iterations = 0;
  o.tolerance = 0;
  o.epsilon = 4e-4;
  o.seed = rng.integer(0, 1 << 30);
  o.polish_anchors = 0;  // the plans returned are the mixtures checked
  auto solve = [&](int iterations, int check_rows) {
    softwave::GwOptions oo = o;
    oo.max_iterations = iterations;
    oo.check_rows = check_rows;
    softwave::GwResult<T, Space> r;
    r.plan = V2<T, Space>("plan", n, k);
    softwave::sampled_gw(space, pr.source.distances, pr.target.distances,
                         pr.marginals, r, oo);
    return std::make_pair(r.last_change, swt::to_host(r.plan));
  };
  int const t = rng.integer(2, 6);
  auto const before = solve(t - 1, 0), after = solve(t, 0);
  double change = 0, size = 0;
  for (std::size_t q = 0; q < after.second.size(); ++q) {
    double const d = after.second[q] - before.second[q];
    change += d * d;
    size += after.second[q] * after.second[q];
  }
  double const want = std::sqrt(change / size);
  EXPECT_NEAR(after.first, want, tolerance<T>(1e-9, 1e-3) * want);
  EXPECT_EQ(solve(t, n).first, after.first);  // n rows: all of them
  double const estimate = solve(t, n / 2).first;
  EXPECT_GT(estimate, 0.2 * want);
  EXPECT_LT(estimate, 5 * want);

  // The run stops at the first check (every check_every iterations from
  // min_iterations on) whose change is at most the tolerance.
  o.min_iterations = rng.integer(1, 4);
  o.check_every = rng.integer(1, 3);
  o.max_iterations = 20;
  o.epsilon = rng.uniform(0.01, 0.1);
  o.tolerance = 1e-300;  // checks every time, stops never
  softwave::GwResult<T, Space> all;
  softwave::sampled_gw(space, pr.source.distances, pr.target.distances,
                       pr.marginals, all, o);
  ASSERT_GE(all.changes.size(), 3u);
  EXPECT_FALSE(all.converged);
  std::size_t const q = rng.integer(1, int(all.changes.size()) - 2);
  o.tolerance = all.changes[q];
  std::size_t first = 0;
  while (all.changes[first] > o.tolerance) ++first;
  softwave::GwResult<T, Space> stopped;
  softwave::sampled_gw(space, pr.source.distances, pr.target.distances,
                       pr.marginals, stopped, o);
  EXPECT_TRUE(stopped.converged);
  EXPECT_EQ(stopped.iterations, o.min_iterations + int(first) * o.check_every);
  EXPECT_EQ(stopped.last_change, all.changes[first]);
}

// GwSide builds each of TorchGW's distance modes from one array as the
// library's own pieces do (the graph and embedding it keeps are those of
// knn_graph and landmark_embedding).
TYPED_TEST(SampledGw, SidesFromOneArrayInEveryMode) {
  using Space = typename TypeParam::space;
  using T = typename TypeParam::value;
  using Mode = softwave::GwDistanceMode;
  SWT_SEEDED_RNG(rng);
  Space space;
  int const n = rng.integer(20, 40), dim = 2, k = 4, landmarks = 6;
  std::vector<double> x(std::size_t(n) * dim);
  for (double& e : x) e = rng.uniform(-1, 1);
  auto const points = to_device2<T, Space>(rounded<T>(x), n, dim);
  V2<const T, Space> const data(points);
  softwave::GwSide<T, Space> const matrix(space, data, Mode::precomputed),
      euclidean(space, data, Mode::euclidean),
      landmark(space, data, Mode::landmark, k, landmarks),
      dijkstra(space, data, Mode::dijkstra, k),
      geodesic(space, data, Mode::geodesic, k);
  EXPECT_EQ(matrix.distances().matrix.data(), data.data());
  EXPECT_EQ(euclidean.distances().coordinates.data(), data.data());
  EXPECT_EQ(euclidean.distances().graph, nullptr);
  auto const graph = softwave::knn_graph(space, data, k);
  ASSERT_NE(dijkstra.distances().graph, nullptr);
  EXPECT_EQ(dijkstra.distances().graph->offsets, graph.offsets);
  EXPECT_EQ(dijkstra.distances().graph->targets, graph.targets);
  EXPECT_EQ(dijkstra.joined_components(), graph.joined_components);
  V2<T, Space> z("embedding", n, landmarks);
  softwave::landmark_embedding(space, graph, z);
  auto const got = landmark.distances().coordinates;
  ASSERT_EQ(int(got.extent(0)), n);
  ASSERT_EQ(int(got.extent(1)), landmarks);
  EXPECT_EQ(
      swt::to_host(V2<T, Space>(const_cast<T*>(got.data()), n, landmarks)),
      swt::to_host(z));
  // Geodesic: every shortest path of the same graph, as a matrix, against
  // the float64 reference.
  auto const all = geodesic.distances().matrix;
  ASSERT_EQ(int(all.extent(0)), n);
  ASSERT_EQ(int(all.extent(1)), n);
  EXPECT_EQ(geodesic.distances().graph, nullptr);
  EXPECT_EQ(geodesic.distances().coordinates.size(), 0u);
  auto const want = ref::knn_geodesics(rounded<T>(x), n, dim, k);
  auto const geodesics =
      swt::to_host(V2<T, Space>(const_cast<T*>(all.data()), n, n));
  double worst = 0;
  for (std::size_t q = 0; q < want.size(); ++q)
    worst = std::max(worst, std::fabs(geodesics[q] - want[q]) /
                                std::max(1.0, std::fabs(want[q])));
  EXPECT_LE(worst, tolerance<T>(1e-12, 1e-6));
}

namespace {

enum class Mode { matrices, landmarks, graphs };

// TorchGW's task at n × m points: geodesics on a 5-NN graph, given as
// matrices, as a 20-landmark embedding, or as the graphs themselves
// (shortest paths from each iteration's anchors).
struct SpiralAndRoll {
  static constexpr int n = 400, k = 500, neighbours = 5;
  std::vector<double> x = ref::spiral(n, 0, false);  // (n, 2)
  std::vector<double> y = ref::spiral(k, 1, true);   // (k, 3)
  std::vector<double> dx = ref::knn_geodesics(x, n, 2, neighbours);
  std::vector<double> dy = ref::knn_geodesics(y, k, 3, neighbours);
};

// TorchGW's test settings (M = 80, α = 0.8, ε = 0.005), shorter solves.
softwave::GwOptions spiral_options() {
  softwave::GwOptions o;
  o.anchors = 80;
  o.alpha = 0.8;
  o.epsilon = 0.005;
  o.max_iterations = 40;
  o.sinkhorn_iterations = 10;
  return o;
}

template <class T, class Space>
void spiral_to_swiss_roll(const Space& space, Mode mode,
                          int coupling_rank = 0) {
  bool const landmarks = mode == Mode::landmarks;
  SpiralAndRoll const task;
  int const n = task.n, k = task.k, neighbours = task.neighbours;
  auto const &x = task.x, &y = task.y, &dx = task.dx, &dy = task.dy;
  for (double e : dx) ASSERT_TRUE(std::isfinite(e));
  for (double e : dy) ASSERT_TRUE(std::isfinite(e));
  Side<T, Space> source, target;
  if (landmarks) {
    // TorchGW's landmark mode through the library: graph, landmarks,
    // embedding.
    int const count = 20;
    auto embed = [&](const std::vector<double>& points, int m, int dim) {
      auto const graph = softwave::knn_graph(
          space, V2<const T, Space>(to_device2<T, Space>(points, m, dim)),
          neighbours);
      V2<T, Space> z("embedding", m, count);
      softwave::landmark_embedding(space, graph, z);
      Side<T, Space> side;
      side.n = m;
      side.distances.coordinates = z;
      auto const zh = swt::to_host(z);
      side.matrix = ref::euclidean(zh, m, count);
      return side;
    };
    source = embed(x, n, 2);
    target = embed(y, k, 3);
  } else {
    source = matrix_side<T, Space>(dx, n);
    target = matrix_side<T, Space>(dy, k);
  }
  softwave::Graph gx, gy;
  if (mode == Mode::graphs) {
    gx = softwave::knn_graph(
        space, V2<const T, Space>(to_device2<T, Space>(x, n, 2)), neighbours);
    gy = softwave::knn_graph(
        space, V2<const T, Space>(to_device2<T, Space>(y, k, 3)), neighbours);
    source.distances = {{}, {}, &gx};
    target.distances = {{}, {}, &gy};
  }
  softwave::GwOptions o = spiral_options();
  o.seed = 7;
  o.coupling_rank = coupling_rank;
  softwave::GwResult<T, Space> r;
  r.matching = V1<int, Space>("matching", n);
  // (The objective with coordinates is O(N²K + NK²) distances of L
  // dimensions: checked on the matrices only.)
  r.compute_objective = !landmarks;
  softwave::sampled_gw(space, source.distances, target.distances, {}, r, o);
  auto const matching = swt::to_host(r.matching);
  double const rho =
      ref::spearman(std::vector<int>(matching.begin(), matching.end()));
  EXPECT_GE(rho, 0.99) << "seed " << r.seed << " objective " << r.objective;
  EXPECT_EQ(r.iterations, o.max_iterations);
  if (!landmarks) {
    // The objective of the plan with the geodesics, also from the graphs.
    softwave::GwResult<T, Space> same;
    same.plan = V2<T, Space>("plan", n, k);
    o.max_iterations = 2;
    softwave::sampled_gw(space, source.distances, target.distances, {}, same,
                         o);
    double const want = ref::gw_objective_by_products(
        rounded<T>(dx), rounded<T>(dy), swt::to_host(same.plan), n, k);
    EXPECT_NEAR(same.objective, want, tolerance<T>(1e-8, 2e-6) * want);
  }
}

}  // namespace

// Of seeds 8 to 11 on the spiral task (TorchGW's settings, 40
// iterations), 8 and 9 end in the reversed matching (objective 0.62 and
// 0.66 against 0.146 and 0.147, in float and double). A race over their
// first 10 iterations already tells them apart and runs a forward seed to
// the end.
TYPED_TEST(SampledGw, RaceAvoidsTheReversedMatching) {
  using Space = typename TypeParam::space;
  using T = typename TypeParam::value;
  SpiralAndRoll const task;
  auto const source = matrix_side<T, Space>(task.dx, task.n);
  auto const target = matrix_side<T, Space>(task.dy, task.k);
  softwave::GwOptions o = spiral_options();
  o.seed = 8;
  o.restarts = 4;
  o.restart_iterations = 10;
  softwave::GwResult<T, Space> r;
  r.matching = V1<int, Space>("matching", task.n);
  softwave::sampled_gw(Space(), source.distances, target.distances, {}, r, o);
  auto const matching = swt::to_host(r.matching);
  EXPECT_GE(ref::spearman(std::vector<int>(matching.begin(), matching.end())),
            0.99)
      << "seed " << r.seed;
  EXPECT_GE(r.seed, 10u);
  EXPECT_EQ(r.iterations, o.max_iterations);
  ASSERT_EQ(r.restart_objectives.size(), 4u);
  EXPECT_LT(r.restart_objectives[2], r.restart_objectives[0]);
  EXPECT_LT(r.restart_objectives[3], r.restart_objectives[1]);
}

// Shorter solves while the plan forms (early_sinkhorn_iterations): they
// change the run (five of ten iterations, the default's half, in the solves
// before the last check_every ahead of min(min_iterations,
// max_iterations)) and keep its matching and objective; at
// sinkhorn_iterations or above they are the plain run, and where
// min_iterations leaves no such solve nothing changes.
TYPED_TEST(SampledGw, EarlySolvesAreShorterAndKeepTheMatching) {
  using Space = typename TypeParam::space;
  using T = typename TypeParam::value;
  SpiralAndRoll const task;
  auto const source = matrix_side<T, Space>(task.dx, task.n);
  auto const target = matrix_side<T, Space>(task.dy, task.k);
  struct Outcome {
    std::vector<int> matching;
    double objective;
  };
  auto const run = [&](int early, int min_iterations, int max_iterations) {
    softwave::GwOptions o = spiral_options();
    o.early_sinkhorn_iterations = early;
    o.min_iterations = min_iterations;
    o.max_iterations = max_iterations;
    softwave::GwResult<T, Space> r;
    r.matching = V1<int, Space>("matching", task.n);
    softwave::sampled_gw(Space(), source.distances, target.distances, {}, r, o);
    auto const m = swt::to_host(r.matching);
    return Outcome{std::vector<int>(m.begin(), m.end()), r.objective};
  };
  // 35 of the 40 solves short.
  auto const full = run(0, 50, 40), early = run(-1, 50, 40);
  EXPECT_EQ(run(5, 50, 40).objective, early.objective);
  EXPECT_GE(ref::spearman(full.matching), 0.99);
  EXPECT_GE(ref::spearman(early.matching), 0.99);
  EXPECT_NE(early.objective, full.objective);
  EXPECT_NEAR(early.objective, full.objective, 0.05 * full.objective);
  auto const same = run(10, 50, 40);
  EXPECT_EQ(same.objective, full.objective);
  EXPECT_EQ(same.matching, full.matching);
  // min_iterations = check_every: no solve before the checks' window.
  auto const unchanged = run(1, 5, 8), plain = run(0, 5, 8);
  EXPECT_EQ(unchanged.objective, plain.objective);
  EXPECT_EQ(unchanged.matching, plain.matching);
  softwave::GwOptions o = spiral_options();
  o.early_sinkhorn_iterations = -2;
  softwave::GwResult<T, Space> r;
  EXPECT_TRUE(swt::throws_naming("early_sinkhorn_iterations", [&]() {
    softwave::sampled_gw(Space(), source.distances, target.distances, {}, r, o);
  }));
}

// Low-rank couplings of rank 20 (TorchGW's sampled_lowrank_gw default).
TYPED_TEST(SampledGw, SpiralToSwissRollWithLowRankCouplings) {
  using Space = typename TypeParam::space;
  using T = typename TypeParam::value;
  spiral_to_swiss_roll<T>(Space(), Mode::landmarks, 20);
}

TYPED_TEST(SampledGw, SpiralToSwissRollWithGeodesicMatrices) {
  using Space = typename TypeParam::space;
  using T = typename TypeParam::value;
  spiral_to_swiss_roll<T>(Space(), Mode::matrices);
}

TYPED_TEST(SampledGw, SpiralToSwissRollWithGraphs) {
  using Space = typename TypeParam::space;
  using T = typename TypeParam::value;
  spiral_to_swiss_roll<T>(Space(), Mode::graphs);
}

TYPED_TEST(SampledGw, SpiralToSwissRollWithLandmarkEmbedding) {
  using Space = typename TypeParam::space;
  using T = typename TypeParam::value;
  spiral_to_swiss_roll<T>(Space(), Mode::landmarks);
}

namespace {

// Farthest-point sampling in float64 from point 0 with distance(i, j):
// the chosen points and each point's nearest chosen one (first on ties).
template <class Distance>
std::pair<std::vector<int>, std::vector<int>> farthest_points(
    int n, int count, const Distance& distance) {
  std::vector<int> chosen, nearest_chosen(n, 0);
  std::vector<double> nearest(n, INFINITY);
  int next = 0;
  for (int c = 0; c < count; ++c) {
    chosen.push_back(next);
    for (int i = 0; i < n; ++i) {
      double const d = distance(next, i);
      if (d < nearest[i]) {
        nearest[i] = d;
        nearest_chosen[i] = c;
      }
    }
    next =
        int(std::max_element(nearest.begin(), nearest.end()) - nearest.begin());
  }
  return {chosen, nearest_chosen};
}

}  // namespace

// multiscale_start against its definition rebuilt here: farthest points
// (Euclidean between points, or a precomputed side's matrix rows), sampled
// GW between them with M capped and several restarts, its plan spread over each
// point's nearest chosen one and scaled to the marginals by 10 rounds; and bad
// input.
TYPED_TEST(SampledGw, MultiscaleStartIsTheSpreadCoarsePlan) {
  using Space = typename TypeParam::space;
  using T = typename TypeParam::value;
  using Mode = softwave::GwDistanceMode;
  SWT_SEEDED_RNG(rng);
  Space space;
  for (bool matrices : {false, true}) {
    int const n = rng.integer(40, 70), m = rng.integer(40, 70);
    int const count = rng.integer(6, 14);
    SCOPED_TRACE(::testing::Message() << "n " << n << " m " << m << " count "
                                      << count << " matrices " << matrices);
    auto uniform = [&](std::size_t size) {
      std::vector<double> v(size);
      for (double& e : v) e = rng.uniform(-1, 1);
      return rounded<T>(v);
    };
    auto const x = uniform(std::size_t(n) * 2);
    auto const y = uniform(std::size_t(m) * 3);
    auto const dx = rounded<T>(ref::euclidean(x, n, 2));
    auto const dy = rounded<T>(ref::euclidean(y, m, 3));
    auto const a = rounded<T>(random_weights(rng, n));
    Mode const mode = matrices ? Mode::precomputed : Mode::euclidean;
    auto const source = matrices ? to_device2<T, Space>(dx, n, n)
                                 : to_device2<T, Space>(x, n, 2);
    auto const target = matrices ? to_device2<T, Space>(dy, m, m)
                                 : to_device2<T, Space>(y, m, 3);
    auto const a_device = to_device2<T, Space>(a, n, 1);
    softwave::GwMarginals<T, Space> marginals;
    marginals.a = V1<const T, Space>(a_device.data(), n);
    softwave::GwOptions o;
    o.anchors = rng.integer(4, 30);
    o.max_iterations = 6;
    o.min_iterations = 0;
    o.epsilon = 0.01;
    o.seed = std::uint64_t(rng.integer(0, 1000));
    V2<T, Space> plan("plan", n, m);
    softwave::multiscale_start<Space, T>(space, source, target, mode, 5, 8, {},
                                         marginals, o, count, plan);

    auto euclidean_in = [](const std::vector<double>& z, int dim) {
      return [&z, dim](int i, int j) {
        double sum = 0;
        for (int f = 0; f < dim; ++f) {
          double const d =
              z[std::size_t(j) * dim + f] - z[std::size_t(i) * dim + f];
          sum += d * d;
        }
        return std::sqrt(sum);
      };
    };
    auto rows_of = [](const std::vector<double>& d, int size) {
      return [&d, size](int i, int j) { return d[std::size_t(i) * size + j]; };
    };
    auto const [sx, ax] = matrices
                              ? farthest_points(n, count, rows_of(dx, n))
                              : farthest_points(n, count, euclidean_in(x, 2));
    auto const [sy, ay] = matrices
                              ? farthest_points(m, count, rows_of(dy, m))
                              : farthest_points(m, count, euclidean_in(y, 3));
    auto pick = [](const std::vector<double>& data, int columns,
                   const std::vector<int>& rows, bool square) {
      std::vector<double> out;
      for (int r : rows)
        if (square)
          for (int c : rows) out.push_back(data[std::size_t(r) * columns + c]);
        else
          for (int f = 0; f < columns; ++f)
            out.push_back(data[std::size_t(r) * columns + f]);
      return out;
    };
    softwave::GwDistances<T, Space> cx, cy;
    if (matrices) {
      cx.matrix = to_device2<T, Space>(pick(dx, n, sx, true), count, count);
      cy.matrix = to_device2<T, Space>(pick(dy, m, sy, true), count, count);
    } else {
      cx.coordinates = to_device2<T, Space>(pick(x, 2, sx, false), count, 2);
      cy.coordinates = to_device2<T, Space>(pick(y, 3, sy, false), count, 3);
    }
    softwave::GwOptions coarse = o;
    coarse.anchors = std::min(o.anchors, std::max(count / 2, 10));
    coarse.restarts = softwave::kMultiscaleRestarts;
    softwave::GwResult<T, Space> solved;
    solved.plan = V2<T, Space>("coarse", count, count);
    solved.compute_objective = false;
    softwave::sampled_gw(space, cx, cy, {}, solved, coarse);
    auto const coarse_plan = swt::to_host(solved.plan);
    std::vector<double> want(std::size_t(n) * m);
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < m; ++j)
        want[std::size_t(i) * m + j] =
            std::max(coarse_plan[std::size_t(ax[i]) * count + ay[j]], 1e-30);
    for (int round = 0; round < 10; ++round) {
      for (int i = 0; i < n; ++i) {
        double sum = 0;
        for (int j = 0; j < m; ++j) sum += want[std::size_t(i) * m + j];
        for (int j = 0; j < m; ++j) want[std::size_t(i) * m + j] *= a[i] / sum;
      }
      for (int j = 0; j < m; ++j) {
        double sum = 0;
        for (int i = 0; i < n; ++i) sum += want[std::size_t(i) * m + j];
        for (int i = 0; i < n; ++i)
          want[std::size_t(i) * m + j] *= (1.0 / m) / sum;
      }
    }
    EXPECT_LE(relative_difference(swt::to_host(plan), want),
              tolerance<T>(1e-12, 1e-5));

    // Bad input: too many or too few coarse points, a plan of another shape.
    auto start = [&](int points, V2<T, Space> out) {
      return [=]() {
        softwave::multiscale_start<Space, T>(space, source, target, mode, 5, 8,
                                             {}, marginals, o, points, out);
      };
    };
    EXPECT_TRUE(
        swt::throws_naming("coarse points", start(std::min(n, m), plan)));
    EXPECT_TRUE(swt::throws_naming("coarse points", start(0, plan)));
    EXPECT_TRUE(
        swt::throws_naming("plan", start(count, V2<T, Space>("p", n, m + 1))));
  }
}

// Fused GW on TorchGW's task, with each point's position along its curve
// as its feature: the forward matching for every seed, in float and double,
// with the features kept low-rank and through landmark distances.
TYPED_TEST(SampledGw, FusedSpiralToSwissRollFollowsTheFeatures) {
  using Space = typename TypeParam::space;
  using T = typename TypeParam::value;
  LandmarkTask<T, Space> const task(400, 500);
  int const n = task.n, k = task.k;
  std::vector<double> f(n), g(k);
  for (int i = 0; i < n; ++i) f[i] = double(i) / (n - 1);
  for (int j = 0; j < k; ++j) g[j] = double(j) / (k - 1);
  softwave::GwLinearCost<T, Space> linear;
  linear.source_features = to_device2<T, Space>(f, n, 1);
  linear.target_features = to_device2<T, Space>(g, k, 1);
  softwave::GwOptions o = task.options;
  o.max_iterations = 30;
  o.fused_alpha = 0.3;
  for (std::uint64_t seed : {1, 2, 3}) {
    o.seed = seed;
    EXPECT_GE(task.rho(linear, {}, o), 0.99) << "seed " << seed;
  }
}

// A plan asked for is written whether or not the objective is computed
// (and with it, whether the dense plan is made for the objective).
TYPED_TEST(SampledGw, PlanIsWrittenWithoutTheObjective) {
  using Space = typename TypeParam::space;
  using T = typename TypeParam::value;
  SWT_SEEDED_RNG(rng);
  Space space;
  int const n = rng.integer(10, 30), k = rng.integer(10, 30);
  auto const source = random_side<T, Space>(rng, n);
  auto const target = random_side<T, Space>(rng, k);
  softwave::GwOptions o;
  o.anchors = 6;
  o.max_iterations = 5;
  o.min_iterations = 0;
  o.epsilon = 0.05;
  o.seed = rng.integer(0, 1 << 30);
  auto solve = [&](bool objective) {
    softwave::GwResult<T, Space> r;
    r.plan = V2<T, Space>("plan", n, k);
    Kokkos::deep_copy(r.plan, T(-7));  // what a forgotten plan would keep
    r.compute_objective = objective;
    softwave::sampled_gw(space, source.distances, target.distances, {}, r, o);
    return swt::to_host(r.plan);
  };
  auto const with = solve(true), without = solve(false);
  EXPECT_EQ(without, with);
  double total = 0;
  for (double v : without) {
    EXPECT_GE(v, 0);
    total += v;
  }
  EXPECT_NEAR(total, 1, 1e-4);
}

// The 4-NN graph of `count` points uniform in [-1, 1]², rounded to T.
template <class T, class Space>
softwave::Graph random_graph(const Space& space, Rng& rng, int count) {
  std::vector<double> x(std::size_t(count) * 2);
  for (double& e : x) e = rng.uniform(-1, 1);
  return softwave::knn_graph(
      space, V2<const T, Space>(to_device2<T, Space>(rounded<T>(x), count, 2)),
      4);
}

// Graph sides keep their anchors' shortest paths across iterations and
// restarts: the same plan and objective with nothing kept, with a store of
// exactly one iteration's anchors on the larger side (evicting every
// iteration), and with the default budget (everything kept); and the same
// again with the device method's shortest paths.
TYPED_TEST(SampledGw, KeptGraphRowsGiveTheSamePlan) {
  using Space = typename TypeParam::space;
  using T = typename TypeParam::value;
  SWT_SEEDED_RNG(rng);
  Space space;
  int const n = rng.integer(30, 60), k = rng.integer(61, 90), anchors = 12;
  softwave::Graph const gx = random_graph<T>(space, rng, n),
                        gy = random_graph<T>(space, rng, k);
  softwave::GwOptions o;
  o.anchors = anchors;
  o.max_iterations = 12;
  o.min_iterations = 0;
  o.epsilon = 0.05;
  o.restarts = 2;
  o.seed = rng.integer(0, 1 << 30);
  auto solve = [&](std::int64_t bytes, softwave::ShortestPaths method =
                                           softwave::ShortestPaths::automatic) {
    softwave::GwOptions oo = o;
    oo.graph_cache_bytes = bytes;
    oo.shortest_paths = method;
    softwave::GwResult<T, Space> r;
    r.plan = V2<T, Space>("plan", n, k);
    softwave::sampled_gw(space, softwave::GwDistances<T, Space>{{}, {}, &gx},
                         softwave::GwDistances<T, Space>{{}, {}, &gy}, {}, r,
                         oo);
    return std::make_pair(r.objective, swt::to_host(r.plan));
  };
  std::int64_t const one_iteration = std::int64_t(k) * sizeof(T) * anchors;
  auto const none = solve(0);
  auto const evicting = solve(one_iteration);
  // The source's N² distances fit, the target's do not: a matrix beside
  // kept columns. With the default budget both sides are matrices (the
  // objective's all-pairs runs).
  auto const mixed = solve(std::int64_t(n) * k * sizeof(T));
  auto const all = solve(softwave::GwOptions{}.graph_cache_bytes);
  EXPECT_EQ(evicting.second, none.second);
  EXPECT_EQ(mixed.second, none.second);
  EXPECT_EQ(all.second, none.second);
  EXPECT_EQ(evicting.first, none.first);
  EXPECT_EQ(mixed.first, none.first);
  EXPECT_EQ(all.first, none.first);
  for (std::int64_t bytes : {std::int64_t(0), one_iteration,
                             softwave::GwOptions{}.graph_cache_bytes}) {
    auto const device = solve(bytes, softwave::ShortestPaths::device);
    EXPECT_EQ(device.second, none.second) << bytes << " bytes";
    EXPECT_EQ(device.first, none.first) << bytes << " bytes";
  }
  // The objective estimated from drawn pairs (no N×K plan): the sampled
  // points' shortest paths by either method.
  auto estimate = [&](softwave::ShortestPaths method) {
    softwave::GwOptions oo = o;
    oo.exact_objective_entries = 1;
    oo.objective_samples = 96;
    oo.shortest_paths = method;
    softwave::GwResult<T, Space> r;
    softwave::sampled_gw(space, softwave::GwDistances<T, Space>{{}, {}, &gx},
                         softwave::GwDistances<T, Space>{{}, {}, &gy}, {}, r,
                         oo);
    return std::make_pair(r.objective, r.objective_error);
  };
  auto const drawn = estimate(softwave::ShortestPaths::host_dijkstra);
  EXPECT_TRUE(std::isfinite(drawn.first) && drawn.second > 0);
  EXPECT_EQ(estimate(softwave::ShortestPaths::device), drawn);
  EXPECT_TRUE(swt::throws_naming("graph_cache_bytes", [&] { solve(-1); }));
}

// Without the objective's all-pairs runs, a graph side runs every node once
// up front where its N² distances fit the kept-columns budget and N is at
// most half of min_iterations · anchors (here 12 · 12): no kept columns,
// and the plan of the runs from each iteration's anchors. With the source
// alone fitting, the target keeps its columns as before.
TYPED_TEST(SampledGw, SmallGraphSidesRunOnceUpFront) {
  using Space = typename TypeParam::space;
  using T = typename TypeParam::value;
  SWT_SEEDED_RNG(rng);
  Space space;
  int const n = rng.integer(30, 60), k = rng.integer(61, 72), anchors = 12;
  softwave::Graph const gx = random_graph<T>(space, rng, n),
                        gy = random_graph<T>(space, rng, k);
  softwave::GwOptions o;
  o.anchors = anchors;
  o.max_iterations = o.min_iterations = 12;
  o.epsilon = 0.05;
  o.seed = rng.integer(0, 1 << 30);
  std::vector<double> plan;
  auto solve = [&](std::int64_t bytes) {
    softwave::GwOptions oo = o;
    oo.graph_cache_bytes = bytes;
    softwave::GwResult<T, Space> r;
    r.plan = V2<T, Space>("plan", n, k);
    r.compute_objective = false;
    auto const labels = swt::allocation_labels([&] {
      softwave::sampled_gw(space, softwave::GwDistances<T, Space>{{}, {}, &gx},
                           softwave::GwDistances<T, Space>{{}, {}, &gy}, {}, r,
                           oo);
    });
    plan = swt::to_host(r.plan);
    return labels;
  };
  auto const runs = solve(0);
  auto const each_iteration = plan;
  EXPECT_EQ(runs.count("softwave::gw::source_all_pairs"), 0u);
  EXPECT_EQ(runs.count("softwave::gw::graph_rows"), 0u);
  auto const whole = solve(softwave::GwOptions{}.graph_cache_bytes);
  EXPECT_EQ(plan, each_iteration);
  EXPECT_EQ(whole.count("softwave::gw::source_all_pairs"), 1u);
  EXPECT_EQ(whole.count("softwave::gw::target_all_pairs"), 1u);
  EXPECT_EQ(whole.count("softwave::gw::graph_rows"), 0u);
  auto const source_only = solve(std::int64_t(n) * k * sizeof(T));
  EXPECT_EQ(plan, each_iteration);
  EXPECT_EQ(source_only.count("softwave::gw::source_all_pairs"), 1u);
  EXPECT_EQ(source_only.count("softwave::gw::target_all_pairs"), 0u);
  EXPECT_EQ(source_only.count("softwave::gw::graph_rows"), 1u);
}

// The library's kNN graph, shortest paths and landmarks are the reference's
// (on points rounded to T; components joined alike).
// knn_graph's edges are each point's k nearest by (length, index), in that
// order, as a scan of every other point in order finds them: on random
// points and on a grid, whose equal lengths the index decides, at every
// capacity of its neighbour lists (k up to 4, 8, 16, 32, 64) and with
// enough points that a GPU splits each search into parts. Each node's list
// starts with its own neighbours and the edges of the points that chose
// it, in the order of the points; joined components' edges come last.
TYPED_TEST(SampledGw, KnnGraphIsTheNearestByLengthThenIndex) {
  using Space = typename TypeParam::space;
  using T = typename TypeParam::value;
  SWT_SEEDED_RNG(rng);
  Space space;
  struct Case {
    bool grid;
    int n, k;
  };
  for (Case const c :
       {Case{false, 300, 1}, Case{false, 1000, 5}, Case{false, 700, 9},
        Case{true, 400, 4}, Case{true, 400, 17}, Case{false, 200, 33},
        Case{true, 144, 60}}) {
    SCOPED_TRACE(::testing::Message()
                 << "grid " << c.grid << " n " << c.n << " k " << c.k);
    int const n = c.n, dim = 2, side = 20;
    std::vector<double> x(std::size_t(n) * dim);
    for (int i = 0; i < n; ++i)
      for (int e = 0; e < dim; ++e)
        x[std::size_t(i) * dim + e] =
            c.grid ? double(e == 0 ? i % side : i / side) : rng.uniform(-1, 1);
    x = rounded<T>(x);
    auto const graph = softwave::knn_graph(
        space, V2<const T, Space>(to_device2<T, Space>(x, n, dim)), c.k);
    ASSERT_EQ(graph.nodes(), n);
    std::vector<std::vector<std::pair<int, double>>> want(n);
    for (int i = 0; i < n; ++i) {
      std::vector<std::pair<double, int>> order;
      for (int j = 0; j < n; ++j) {
        if (j == i) continue;
        double sum = 0;
        for (int e = 0; e < dim; ++e) {
          double const diff =
              x[std::size_t(i) * dim + e] - x[std::size_t(j) * dim + e];
          sum += diff * diff;
        }
        order.push_back({std::sqrt(sum), j});
      }
      std::sort(order.begin(), order.end());
      for (int r = 0; r < c.k; ++r) {
        want[i].push_back({order[r].second, order[r].first});
        want[order[r].second].push_back({i, order[r].first});
      }
    }
    std::size_t edges = 0;
    for (int i = 0; i < n; ++i) {
      edges += want[i].size();
      ASSERT_GE(graph.offsets[i + 1] - graph.offsets[i],
                std::int64_t(want[i].size()));
      for (std::size_t e = 0; e < want[i].size(); ++e) {
        std::size_t const at = std::size_t(graph.offsets[i]) + e;
        ASSERT_EQ(graph.targets[at], want[i][e].first) << "node " << i;
        // (A GPU may fuse the sums' multiplies and adds.)
        ASSERT_NEAR(graph.lengths[at], want[i][e].second,
                    1e-12 * want[i][e].second)
            << "node " << i;
      }
    }
    EXPECT_EQ(graph.targets.size(), edges + 2 * graph.joined_components);
  }
}

TYPED_TEST(SampledGw, GraphDistancesAndLandmarksMatchFloat64) {
  using Space = typename TypeParam::space;
  using T = typename TypeParam::value;
  SWT_SEEDED_RNG(rng);
  Space space;
  for (int trial = 0; trial < 4; ++trial) {
    int const n = rng.integer(2, 60), dim = rng.integer(1, 3);
    int const k = rng.integer(1, std::min(n - 1, 6));
    SCOPED_TRACE(::testing::Message()
                 << "n " << n << " dim " << dim << " k " << k);
    std::vector<double> x(std::size_t(n) * dim);
    // Clusters far apart, so that small k leaves components to join.
    for (int i = 0; i < n; ++i)
      for (int e = 0; e < dim; ++e)
        x[std::size_t(i) * dim + e] = rng.uniform(0, 1) + 10.0 * (i % 3);
    x = rounded<T>(x);
    auto const graph = softwave::knn_graph(
        space, V2<const T, Space>(to_device2<T, Space>(x, n, dim)), k);
    ASSERT_EQ(graph.nodes(), n);
    auto const want = ref::knn_geodesics(x, n, dim, k);
    std::vector<int> sources(n);
    for (int i = 0; i < n; ++i) sources[i] = i;
    int const count = rng.integer(1, n);
    auto const want_z = ref::landmark_embedding(want, n, count);
    for (auto const method : {softwave::ShortestPaths::automatic,
                              softwave::ShortestPaths::host_dijkstra,
                              softwave::ShortestPaths::device}) {
      SCOPED_TRACE(::testing::Message() << "method " << int(method));
      V2<T, Space> d("distances", n, n);
      softwave::graph_distances(space, graph, sources, d, method);
      auto const got = swt::to_host(d);
      double worst = 0;
      for (std::size_t q = 0; q < got.size(); ++q) {
        ASSERT_TRUE(std::isfinite(got[q]));
        // d(i, s) is column s: the matrix is symmetric.
        worst = std::max(worst, std::fabs(got[q] - want[q]) /
                                    std::max(1.0, std::fabs(want[q])));
      }
      EXPECT_LE(worst, tolerance<T>(1e-12, 1e-6));
      V2<T, Space> z("embedding", n, count);
      auto const landmarks =
          softwave::landmark_embedding(space, graph, z, method);
      auto const zh = swt::to_host(z);
      ASSERT_EQ(int(landmarks.size()), count);
      EXPECT_EQ(landmarks[0], 0);
      worst = 0;
      for (std::size_t q = 0; q < zh.size(); ++q)
        worst = std::max(worst, std::fabs(zh[q] - want_z[q]) /
                                    std::max(1.0, std::fabs(want_z[q])));
      EXPECT_LE(worst, tolerance<T>(1e-12, 1e-6));
    }
  }
  // Bad input.
  auto const pts = to_device2<T, Space>(std::vector<double>{0, 1, 2, 3}, 4, 1);
  EXPECT_TRUE(swt::throws_naming(
      "k", [&]() { softwave::knn_graph(space, V2<const T, Space>(pts), 4); }));
  EXPECT_TRUE(swt::throws_naming(
      "k", [&]() { softwave::knn_graph(space, V2<const T, Space>(pts), 0); }));
  auto const bad =
      to_device2<T, Space>(std::vector<double>{0, 1, double(NAN), 3}, 4, 1);
  EXPECT_TRUE(swt::throws_naming("points", [&]() {
    softwave::knn_graph(space, V2<const T, Space>(bad), 2);
  }));
  auto const graph = softwave::knn_graph(space, V2<const T, Space>(pts), 2);
  V2<T, Space> d("d", 4, 1);
  EXPECT_TRUE(swt::throws_naming("sources", [&]() {
    softwave::graph_distances(space, graph, std::vector<int>{4}, d);
  }));
  EXPECT_TRUE(swt::throws_naming("distances", [&]() {
    softwave::graph_distances(space, graph, std::vector<int>{0, 1}, d);
  }));
  V2<T, Space> z("z", 4, 5);
  EXPECT_TRUE(swt::throws_naming(
      "embedding", [&]() { softwave::landmark_embedding(space, graph, z); }));
  // Graphs without shortest paths, or not graphs at all.
  V2<T, Space> one("one", 4, 1);
  for (auto const method : {softwave::ShortestPaths::host_dijkstra,
                            softwave::ShortestPaths::device}) {
    auto broken = graph;
    broken.lengths[1] = -0.5;
    EXPECT_TRUE(swt::throws_naming("lengths", [&]() {
      softwave::graph_distances(space, broken, std::vector<int>{0}, one,
                                method);
    }));
    broken.lengths[1] = NAN;
    EXPECT_TRUE(swt::throws_naming("lengths", [&]() {
      softwave::landmark_embedding(space, broken, one, method);
    }));
    broken = graph;
    broken.targets[2] = 4;
    EXPECT_TRUE(swt::throws_naming("targets", [&]() {
      softwave::graph_distances(space, broken, std::vector<int>{0}, one,
                                method);
    }));
    broken = graph;
    broken.offsets.pop_back();
    EXPECT_TRUE(swt::throws_naming("graph", [&]() {
      softwave::graph_distances(space, broken, std::vector<int>{0}, one,
                                method);
    }));
  }
}

// The device method gives Dijkstra's distances to the last bit, on k-NN
// graphs of TorchGW's spiral deep enough for many rounds, with sources
// repeated and runs concurrent in each launch, and the same landmarks.
TYPED_TEST(SampledGw, DeviceShortestPathsAreDijkstras) {
  using Space = typename TypeParam::space;
  using T = typename TypeParam::value;
  SWT_SEEDED_RNG(rng);
  Space space;
  for (int trial = 0; trial < 2; ++trial) {
    int const n = rng.integer(300, 2500), k = rng.integer(2, 8);
    bool const roll = rng.integer(0, 1) == 1;
    int const dim = roll ? 3 : 2;
    SCOPED_TRACE(::testing::Message()
                 << "n " << n << " k " << k << " roll " << roll);
    auto const x = ref::spiral(n, rng.integer(0, 1 << 30), roll);
    auto const graph = softwave::knn_graph(
        space, V2<const T, Space>(to_device2<T, Space>(x, n, dim)), k);
    int const count = rng.integer(1, 40);
    std::vector<int> sources(count);
    for (int& s : sources) s = rng.integer(0, n - 1);
    sources[count - 1] = sources[0];
    V2<T, Space> host("host", n, count), device("device", n, count);
    softwave::graph_distances(space, graph, sources, host,
                              softwave::ShortestPaths::host_dijkstra);
    softwave::graph_distances(space, graph, sources, device,
                              softwave::ShortestPaths::device);
    EXPECT_EQ(swt::to_host(device), swt::to_host(host));
    int const landmarks = rng.integer(1, 12);
    V2<T, Space> zh("zh", n, landmarks), zd("zd", n, landmarks);
    EXPECT_EQ(softwave::landmark_embedding(space, graph, zd,
                                           softwave::ShortestPaths::device),
              softwave::landmark_embedding(
                  space, graph, zh, softwave::ShortestPaths::host_dijkstra));
    EXPECT_EQ(swt::to_host(zd), swt::to_host(zh));
  }
  // Graphs made by hand: zero-length edges, two components (infinite
  // distances across), and only zero-length edges (no threshold to move).
  auto graph_of = [](int n,
                     std::vector<std::tuple<int, int, double>> const& edges) {
    std::vector<std::vector<std::pair<int, double>>> adjacent(n);
    for (auto const& [i, j, length] : edges) {
      adjacent[i].push_back({j, length});
      adjacent[j].push_back({i, length});
    }
    softwave::Graph g;
    g.offsets.push_back(0);
    for (auto const& list : adjacent) {
      for (auto const& [j, length] : list) {
        g.targets.push_back(j);
        g.lengths.push_back(length);
      }
      g.offsets.push_back(std::int64_t(g.targets.size()));
    }
    return g;
  };
  for (auto const& g : {graph_of(7, {{0, 1, 0.0},
                                     {1, 2, 0.5},
                                     {2, 3, 0.0},
                                     {0, 3, 1.0},
                                     {4, 5, 0.25},
                                     {5, 6, 0.0}}),
                        graph_of(3, {{0, 1, 0.0}, {1, 2, 0.0}})}) {
    int const n = int(g.nodes());
    std::vector<int> sources(n);
    for (int i = 0; i < n; ++i) sources[i] = i;
    V2<T, Space> host("host", n, n), device("device", n, n);
    softwave::graph_distances(space, g, sources, host,
                              softwave::ShortestPaths::host_dijkstra);
    softwave::graph_distances(space, g, sources, device,
                              softwave::ShortestPaths::device);
    auto const want = swt::to_host(host);
    EXPECT_EQ(swt::to_host(device), want);
    if (n == 7) {
      EXPECT_EQ(want[0 * 7 + 3], T(0.5));  // 3 from 0: by 1 and 2
      EXPECT_TRUE(std::isinf(want[4 * 7 + 0]));
    }
    // Every node a landmark: ties at zero, and (n = 7) a landmark in the
    // other component, farther than any.
    V2<T, Space> zh("zh", n, n), zd("zd", n, n);
    auto const landmarks = softwave::landmark_embedding(
        space, g, zh, softwave::ShortestPaths::host_dijkstra);
    EXPECT_EQ(softwave::landmark_embedding(space, g, zd,
                                           softwave::ShortestPaths::device),
              landmarks);
    EXPECT_EQ(swt::to_host(zd), swt::to_host(zh));
    if (n == 7) EXPECT_EQ(landmarks[1], 4);
  }
}

TYPED_TEST(SampledGw, BadInputNamesTheArgument) {
  using Space = typename TypeParam::space;
  using T = typename TypeParam::value;
  SWT_SEEDED_RNG(rng);
  Space space;
  int const n = 5, k = 4;
  auto const source =
      coordinates_side<T, Space>(std::vector<double>{0, 1, 2, 3, 4}, n, 1);
  auto const target = matrix_side<T, Space>(
      ref::euclidean(std::vector<double>{0, 1, 3, 6}, k, 1), k);
  softwave::GwResult<T, Space> r;
  r.compute_objective = false;
  auto call = [&](softwave::GwDistances<T, Space> s,
                  softwave::GwDistances<T, Space> t,
                  softwave::GwMarginals<T, Space> m, softwave::GwOptions o) {
    o.max_iterations = 2;
    return [=]() mutable {
      softwave::GwResult<T, Space> out = r;
      softwave::sampled_gw(space, s, t, m, out, o);
    };
  };
  auto const sd = source.distances, td = target.distances;
  softwave::GwMarginals<T, Space> none;
  softwave::GwOptions o;
  {  // Squared coordinates: non-finite, or given beside another form;
     // cosine distances of a zero vector.
    auto squared = sd;
    squared.coordinates = {};
    squared.squared_coordinates = to_device2<T, Space>(
        std::vector<double>{0, 1, double(NAN), 3, 4}, n, 1);
    EXPECT_TRUE(swt::throws_naming("source.squared_coordinates",
                                   call(squared, td, none, o)));
    auto both = sd;
    both.squared_coordinates = sd.coordinates;
    EXPECT_TRUE(swt::throws_naming("source.squared_coordinates",
                                   call(both, td, none, o)));
    auto const zero =
        to_device2<T, Space>(std::vector<double>{1, 0, 0, 0, 2, 1}, 3, 2);
    EXPECT_TRUE(swt::throws_naming("zero vectors", [&]() {
      softwave::GwSide<T, Space> const side(space, V2<const T, Space>(zero),
                                            softwave::GwDistanceMode::cosine);
    }));
  }
  for (double eps : {0.0, -1.0, double(NAN), double(INFINITY)}) {
    o.epsilon = eps;
    EXPECT_TRUE(swt::throws_naming("epsilon", call(sd, td, none, o)));
  }
  o = {};
  o.anchors = 0;
  EXPECT_TRUE(swt::throws_naming("anchors", call(sd, td, none, o)));
  o = {};
  for (double alpha : {0.0, 1.5, double(NAN)}) {
    o.alpha = alpha;
    EXPECT_TRUE(swt::throws_naming("alpha", call(sd, td, none, o)));
  }
  o = {};
  o.rho_b = 0;
  EXPECT_TRUE(swt::throws_naming("rho_b", call(sd, td, none, o)));
  o = {};
  o.restarts = 0;
  EXPECT_TRUE(swt::throws_naming("restarts", call(sd, td, none, o)));
  o = {};
  o.restart_iterations = -1;
  EXPECT_TRUE(swt::throws_naming("restart_iterations", call(sd, td, none, o)));
  {  // Low-rank couplings: their settings, balanced, sampled costs.
    o = {};
    o.coupling_rank = -1;
    EXPECT_TRUE(swt::throws_naming("coupling_rank", call(sd, td, none, o)));
    o.coupling_rank = 2;
    for (double step : {0.0, double(NAN), double(INFINITY)}) {
      o.coupling_step = step;
      EXPECT_TRUE(swt::throws_naming("coupling_step", call(sd, td, none, o)));
    }
    o.coupling_step = 1;
    o.coupling_iterations = 0;
    EXPECT_TRUE(
        swt::throws_naming("coupling_iterations", call(sd, td, none, o)));
    o.coupling_iterations = 1;
    o.dykstra_iterations = 0;
    EXPECT_TRUE(
        swt::throws_naming("dykstra_iterations", call(sd, td, none, o)));
    o.dykstra_iterations = 1;
    o.rho_b = 1;
    EXPECT_TRUE(swt::throws_naming("rho_a and rho_b", call(sd, td, none, o)));
    o.rho_b = INFINITY;
    auto squared = sd;
    squared.coordinates = {};
    squared.squared_coordinates = sd.coordinates;
    auto squared_target = squared;
    EXPECT_TRUE(swt::throws_naming("exact costs",
                                   call(squared, squared_target, none, o)));
  }
  o = {};
  o.objective_samples = 1;
  EXPECT_TRUE(swt::throws_naming("objective_samples", call(sd, td, none, o)));
  o = {};
  o.exact_objective_entries = -1;
  EXPECT_TRUE(
      swt::throws_naming("exact_objective_entries", call(sd, td, none, o)));
  o = {};
  o.dense_cost_entries = -2;
  EXPECT_TRUE(swt::throws_naming("dense_cost_entries", call(sd, td, none, o)));
  o = {};
  o.kernel = softwave::Kernel::pairs;
  EXPECT_TRUE(swt::throws_naming("kernel", call(sd, td, none, o)));
  o = {};
  for (double beta : {-0.1, 1.5, double(NAN)}) {
    o.cost_ema_beta = beta;
    EXPECT_TRUE(swt::throws_naming("cost_ema_beta", call(sd, td, none, o)));
  }
  o = {};
  o.exact_iterations = -1;
  EXPECT_TRUE(swt::throws_naming("exact_iterations", call(sd, td, none, o)));
  o = {};
  o.exact_iterations = 1;
  o.exact_objective_entries = n * k - 1;
  EXPECT_TRUE(swt::throws_naming("exact_iterations", call(sd, td, none, o)));
  o = {};
  o.cost_ema_beta = 0.5;
  for (double tolerance : {0.0, 1.0, double(NAN)}) {
    o.cost_ema_tolerance = tolerance;
    EXPECT_TRUE(
        swt::throws_naming("cost_ema_tolerance", call(sd, td, none, o)));
  }
  o = {};
  // Fused GW: β out of range, β without a linear cost and a cost without
  // β, both forms, wrong shapes, non-finite values.
  auto fused = [&](softwave::GwLinearCost<T, Space> c, double beta) {
    softwave::GwOptions oo;
    oo.max_iterations = 2;
    oo.fused_alpha = beta;
    return [=]() mutable {
      softwave::GwResult<T, Space> out = r;
      softwave::sampled_gw(space, sd, td, c, none, out, oo);
    };
  };
  softwave::GwLinearCost<T, Space> matrix_cost{
      to_device2<T, Space>(std::vector<double>(n * k, 0.5), n, k), {}, {}};
  softwave::GwLinearCost<T, Space> feature_cost{
      {},
      to_device2<T, Space>(std::vector<double>(n * 2, 0.5), n, 2),
      to_device2<T, Space>(std::vector<double>(k * 2, 0.5), k, 2)};
  EXPECT_NO_THROW(fused(matrix_cost, 0.5)());
  EXPECT_NO_THROW(fused(feature_cost, 1.0)());
  for (double beta : {-0.5, 1.5, double(NAN)})
    EXPECT_TRUE(swt::throws_naming("fused_alpha", fused(matrix_cost, beta)));
  EXPECT_TRUE(swt::throws_naming("fused_alpha", fused({}, 0.5)));
  EXPECT_TRUE(swt::throws_naming("fused_alpha", fused(matrix_cost, 0.0)));
  auto both_costs = feature_cost;
  both_costs.matrix = matrix_cost.matrix;
  EXPECT_TRUE(swt::throws_naming("not both", fused(both_costs, 0.5)));
  softwave::GwLinearCost<T, Space> transposed{
      to_device2<T, Space>(std::vector<double>(n * k, 0.5), k, n), {}, {}};
  EXPECT_TRUE(swt::throws_naming("linear.matrix", fused(transposed, 0.5)));
  auto one_side = feature_cost;
  one_side.target_features = {};
  EXPECT_TRUE(
      swt::throws_naming("linear.source_features", fused(one_side, 0.5)));
  auto widths = feature_cost;
  widths.target_features =
      to_device2<T, Space>(std::vector<double>(k * 3, 0.5), k, 3);
  EXPECT_TRUE(swt::throws_naming("linear.source_features", fused(widths, 0.5)));
  std::vector<double> nan_cost(n * k, 0.5);
  nan_cost[std::size_t(rng.integer(0, n * k - 1))] = double(NAN);
  EXPECT_TRUE(swt::throws_naming(
      "linear_matrix",
      fused({to_device2<T, Space>(nan_cost, n, k), {}, {}}, 0.5)));
  std::vector<double> inf_features(k * 2, 0.5);
  inf_features[std::size_t(rng.integer(0, 2 * k - 1))] = double(INFINITY);
  auto bad_features = feature_cost;
  bad_features.target_features = to_device2<T, Space>(inf_features, k, 2);
  EXPECT_TRUE(
      swt::throws_naming("linear_target_features", fused(bad_features, 0.5)));
  // A warm start without a plan, or from a bad one.
  o.warm_start = true;
  EXPECT_TRUE(swt::throws_naming("result.plan", call(sd, td, none, o)));
  for (double bad_entry : {-1.0, double(NAN), 0.0}) {
    std::vector<double> initial(n * k, bad_entry == 0.0 ? 0.0 : 1.0);
    initial[std::size_t(rng.integer(0, n * k - 1))] = bad_entry;
    EXPECT_TRUE(swt::throws_naming("result.plan", [&]() {
      auto out = r;
      out.plan = to_device2<T, Space>(initial, n, k);
      softwave::GwOptions oo = o;
      oo.max_iterations = 2;
      softwave::sampled_gw(space, sd, td, none, out, oo);
    })) << bad_entry;
  }
  o = {};
  // Distances: neither or both forms, a non-square matrix, bad values.
  EXPECT_TRUE(swt::throws_naming(
      "source.matrix", call(softwave::GwDistances<T, Space>{}, td, none, o)));
  auto both = td;
  both.coordinates = V2<T, Space>("z", k, 2);
  EXPECT_TRUE(
      swt::throws_naming("target.coordinates", call(sd, both, none, o)));
  softwave::GwDistances<T, Space> oblong{
      to_device2<T, Space>(std::vector<double>(12, 1.0), 4, 3), {}};
  EXPECT_TRUE(swt::throws_naming("target.matrix", call(sd, oblong, none, o)));
  auto bad = target.matrix;
  bad[std::size_t(rng.integer(0, k * k - 1))] = rng.coin() ? double(NAN) : -1.0;
  softwave::GwDistances<T, Space> bad_matrix{to_device2<T, Space>(bad, k, k),
                                             {}};
  EXPECT_TRUE(
      swt::throws_naming("target.matrix", call(sd, bad_matrix, none, o)));
  softwave::GwDistances<T, Space> bad_points{
      {},
      to_device2<T, Space>(std::vector<double>{0, 1, double(INFINITY), 3, 4}, n,
                           1)};
  EXPECT_TRUE(
      swt::throws_naming("source.coordinates", call(bad_points, td, none, o)));
  softwave::Graph bad_graph;
  bad_graph.offsets = {0, 1, 2, 2, 2};
  bad_graph.targets = {1, 0};
  bad_graph.lengths = {1.0, -1.0};
  EXPECT_TRUE(swt::throws_naming("target.graph",
                                 call(sd, {{}, {}, &bad_graph}, none, o)));
  auto with_graph = td;
  with_graph.graph = &bad_graph;
  EXPECT_TRUE(
      swt::throws_naming("target.matrix", call(sd, with_graph, none, o)));
  // Marginals: wrong length, negative, no mass, unequal masses.
  softwave::GwMarginals<T, Space> short_a{
      swt::to_device<T>(Space(), std::vector<double>(n - 1, 1.0)), {}};
  EXPECT_TRUE(swt::throws_naming("a", call(sd, td, short_a, o)));
  softwave::GwMarginals<T, Space> negative_b{
      {},
      swt::to_device<T>(Space(), std::vector<double>{0.5, 0.5, -0.25, 0.25})};
  EXPECT_TRUE(swt::throws_naming("b", call(sd, td, negative_b, o)));
  softwave::GwMarginals<T, Space> empty_a{
      swt::to_device<T>(Space(), std::vector<double>(n, 0.0)), {}};
  EXPECT_TRUE(swt::throws_naming("a", call(sd, td, empty_a, o)));
  softwave::GwMarginals<T, Space> unequal{
      swt::to_device<T>(Space(), std::vector<double>(n, 1.0)), {}};
  EXPECT_TRUE(swt::throws_naming("a and b", call(sd, td, unequal, o)));
  o.rho_b = 1.0;  // semi-relaxed: any target mass
  EXPECT_NO_THROW(call(sd, td, unequal, o)());
  o = {};
  // Output shapes.
  auto wrong_plan = r;
  wrong_plan.plan = V2<T, Space>("plan", n, k + 1);
  EXPECT_TRUE(swt::throws_naming("plan", [&]() {
    auto out = wrong_plan;
    softwave::sampled_gw(space, sd, td, none, out, o);
  }));
  auto wrong_matching = r;
  wrong_matching.matching = V1<int, Space>("matching", k);
  EXPECT_TRUE(swt::throws_naming("matching", [&]() {
    auto out = wrong_matching;
    softwave::sampled_gw(space, sd, td, none, out, o);
  }));
}
