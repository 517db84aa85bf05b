#pragma once
// The exact GW cost of sampled GW where both sides' distances are squared
// Euclidean distances of points (softwave/gw.hpp, "Embeddings"): each side's
// distance matrix as the product D = F Gᵀ of rank e + 2, the small matrices
// R, C, H each plan term contributes, and the low-rank factors of the cost
// made from a mixture's.

#include <Kokkos_Core.hpp>
#include <cmath>
#include <cstdint>
#include <softwave/gw.hpp>
#include <softwave/sinkhorn.hpp>
#include <vector>

#include "objective.hpp"
#include "plan_terms.hpp"

namespace softwave::impl {

// One side's D(i, j) = ‖z_i − z_j‖² as f_i·g_j with f_i = (‖z̄_i‖², 1, z̄_i)
// and g_j = (1, ‖z̄_j‖², −2 z̄_j), z̄ the points less their mean: the same
// distances, with smaller norms to cancel in the product's rounding.
// Entries of f (g_side false) or g in float64 from the points, for the
// objective, whose three sums cancel to far below their size.
template <class T, class Space>
struct ExactFactor {
  OTView2<const T, Space> z;
  Kokkos::View<double*, typename Space::memory_space> mean, norms;
  bool g_side = false;
  KOKKOS_INLINE_FUNCTION double operator()(std::int64_t i,
                                           std::int64_t c) const {
    if (c == 0) return g_side ? 1.0 : norms(i);
    if (c == 1) return g_side ? norms(i) : 1.0;
    double const x = double(z(i, c - 2)) - mean(c - 2);
    return g_side ? -2 * x : x;
  }
};

template <class T, class Space>
struct DistanceFactors {
  OTView2<T, Space> f, g;  // (N, e + 2)
  ExactFactor<T, Space> f64, g64;
  std::int64_t width() const { return std::int64_t(f.extent(1)); }
};

// One side's factors of the points z (a free function: nvcc takes no device
// lambda in a constructor).
template <class T, class Space>
DistanceFactors<T, Space> distance_factors(const Space& space,
                                           const OTView2<const T, Space>& z,
                                           bool source) {
  DistanceFactors<T, Space> out;
  std::int64_t const n = z.extent(0), e = z.extent(1), m = e + 2;
  out.f = uninitialised<T**>(
      space, source ? "softwave::gw::source_f" : "softwave::gw::target_f", n,
      m);
  out.g = uninitialised<T**>(
      space, source ? "softwave::gw::source_g" : "softwave::gw::target_g", n,
      m);
  auto const mean = uninitialised<double*>(
      space, "softwave::gw::embedding_mean", std::max<std::int64_t>(e, 1));
  Kokkos::parallel_for(
      "softwave::gw::embedding_mean", Kokkos::RangePolicy<Space>(space, 0, e),
      KOKKOS_LAMBDA(std::int64_t c) {
        double s = 0;
        for (std::int64_t i = 0; i < n; ++i) s += double(z(i, c));
        mean(c) = s / double(n);
      });
  auto const norms =
      uninitialised<double*>(space, "softwave::gw::embedding_norms", n);
  auto const f = out.f, g = out.g;
  Kokkos::parallel_for(
      "softwave::gw::distance_factors", Kokkos::RangePolicy<Space>(space, 0, n),
      KOKKOS_LAMBDA(std::int64_t i) {
        double norm = 0;
        for (std::int64_t c = 0; c < e; ++c) {
          double const x = double(z(i, c)) - mean(c);
          norm += x * x;
          f(i, 2 + c) = T(x);
          g(i, 2 + c) = T(-2 * x);
        }
        norms(i) = norm;
        f(i, 0) = T(norm);
        f(i, 1) = T(1);
        g(i, 0) = T(1);
        g(i, 1) = T(norm);
      });
  out.f64 = {z, mean, norms, false};
  out.g64 = {z, mean, norms, true};
  return out;
}

// What one plan term π contributes to the exact cost, in float64 on the
// host: cross = G_Xᵀ π G_Y (m_X × m_Y), source = G_Xᵀ diag(π1) G_X
// (m_X × m_X), target = G_Yᵀ diag(πᵀ1) G_Y (m_Y × m_Y), mass = Σπ; all
// linear in π, so a mixture's are its terms' weighted sums.
struct TermStatistics {
  std::vector<double> cross, source, target;
  double mass = 0;

  void add(const TermStatistics& other, double weight) {
    auto axpy = [&](std::vector<double>& to, const std::vector<double>& from) {
      if (to.empty()) to.assign(from.size(), 0.0);
      for (std::size_t q = 0; q < from.size(); ++q) to[q] += weight * from[q];
    };
    axpy(cross, other.cross);
    axpy(source, other.source);
    axpy(target, other.target);
    mass += weight * other.mass;
  }
};

// out(p, q) = Σ_i left(i, p) weight(i) right(i, q) in float64, a team an
// entry.
template <class Space, class Left, class Weight, class Right>
std::vector<double> weighted_products(const Space& space, const char* label,
                                      std::int64_t count, std::int64_t rows,
                                      std::int64_t columns, const Left& left,
                                      const Weight& weight,
                                      const Right& right) {
  using Policy = Kokkos::TeamPolicy<Space>;
  using Member = typename Policy::member_type;
  auto const out = uninitialised<double*>(space, label, rows * columns);
  Kokkos::parallel_for(
      label, Policy(space, int(rows * columns), Kokkos::AUTO),
      KOKKOS_LAMBDA(const Member& team) {
        std::int64_t const p = team.league_rank() / columns,
                           q = team.league_rank() % columns;
        double sum = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, count),
            [&](std::int64_t i, double& s) {
              s += double(left(i, p)) * weight(i) * double(right(i, q));
            },
            sum);
        Kokkos::single(Kokkos::PerTeam(team),
                       [&]() { out(team.league_rank()) = sum; });
      });
  auto const host = compat::host_mirror(std::string(label) + "_host", out);
  Kokkos::deep_copy(space, host, out);
  space.fence();
  return std::vector<double>(host.data(), host.data() + rows * columns);
}

// The statistics of a term from its plan applied to G_Y (`applied`, (N,
// m_Y): its first column, G_Y's column of ones, is π1) and its column sums
// πᵀ1 (`column_sums`, K).
template <class T, class Space, class ColumnSums>
TermStatistics term_statistics(const Space& space,
                               const DistanceFactors<T, Space>& x,
                               const DistanceFactors<T, Space>& y,
                               const OTView2<const T, Space>& applied,
                               const ColumnSums& column_sums) {
  std::int64_t const n = x.g.extent(0), k = y.g.extent(0);
  auto const gx = x.g, gy = y.g;
  TermStatistics s;
  s.cross = weighted_products(
      space, "softwave::gw::exact_cross", n, x.width(), y.width(), gx,
      KOKKOS_LAMBDA(std::int64_t) { return 1.0; }, applied);
  s.source = weighted_products(
      space, "softwave::gw::exact_source", n, x.width(), x.width(), gx,
      KOKKOS_LAMBDA(std::int64_t i) { return double(applied(i, 0)); }, gx);
  s.target = weighted_products(
      space, "softwave::gw::exact_target", k, y.width(), y.width(), gy,
      KOKKOS_LAMBDA(std::int64_t j) { return double(column_sums(j)); }, gy);
  double mass = 0;
  Kokkos::parallel_reduce(
      "softwave::gw::exact_mass", Kokkos::RangePolicy<Space>(space, 0, n),
      KOKKOS_LAMBDA(std::int64_t i, double& out) { out += applied(i, 0); },
      mass);
  s.mass = mass;
  return s;
}

// One side's share of the cost: own_i = coefficient·f_iᵀ Q f_i (Q: m × m,
// row-major), and its factor's first columns: f_i as it is, or where
// `apply`, scale·Σ_a f_ia M(a, c) with M(a, c) = matrix[a·row_stride +
// c·column_stride] (c < columns).
template <class T, class Space, class Matrix>
void side_factors(const Space& space, const char* label,
                  const OTView2<T, Space>& f, const Matrix& quadratic,
                  double coefficient, const Matrix& matrix, bool apply,
                  std::int64_t columns, std::int64_t row_stride,
                  std::int64_t column_stride, double scale,
                  const OTView2<T, Space>& own,
                  const OTView3<T, Space>& factor) {
  std::int64_t const m = f.extent(1), width = apply ? columns : m;
  Kokkos::parallel_for(
      label, Kokkos::RangePolicy<Space>(space, 0, f.extent(0)),
      KOKKOS_LAMBDA(std::int64_t i) {
        double sum = 0;
        for (std::int64_t a = 0; a < m; ++a) {
          double row = 0;
          for (std::int64_t b = 0; b < m; ++b)
            row += quadratic(a * m + b) * double(f(i, b));
          sum += double(f(i, a)) * row;
        }
        own(0, i) = T(coefficient * sum);
        for (std::int64_t c = 0; c < width; ++c) {
          if (!apply) {
            factor(0, i, c) = f(i, c);
            continue;
          }
          double product = 0;
          for (std::int64_t a = 0; a < m; ++a)
            product +=
                double(f(i, a)) * matrix(a * row_stride + c * column_stride);
          factor(0, i, c) = T(scale * product);
        }
      });
}

// The cost of the normalised statistics S (a mixture's over its mass) as
// low-rank factors, with share = 1 − β of fused GW:
//   u_i = share f_iᵀ R f_i / s_X²,  v_k = share f'_kᵀ C f'_k / s_Y²,
//   P_i·Q_k = 2 share f_iᵀ H f'_k / (s_X s_Y),
// H applied on the wider side so that the rank is min(m_X, m_Y) (columns
// 0 .. rank − 1 of the factors; fused GW's features follow).
template <class T, class Space>
void exact_factors(const Space& space, const DistanceFactors<T, Space>& x,
                   const DistanceFactors<T, Space>& y, const TermStatistics& s,
                   double source_scale, double target_scale, double share,
                   const OTView2<T, Space>& u, const OTView3<T, Space>& p,
                   const OTView2<T, Space>& v, const OTView3<T, Space>& q) {
  std::int64_t const mx = x.width(), my = y.width();
  auto const cross =
      on_device(space, s.cross, "softwave::gw::exact_cross_matrix");
  auto const source =
      on_device(space, s.source, "softwave::gw::exact_source_matrix");
  auto const target =
      on_device(space, s.target, "softwave::gw::exact_target_matrix");
  double const cu = share / (source_scale * source_scale),
               cv = share / (target_scale * target_scale),
               cp = 2 * share / (source_scale * target_scale);
  bool const cross_on_source = mx >= my;  // rank my: P_i = cp Hᵀ f_i
  // H (m_X × m_Y, row-major) read as Hᵀ on the source side, H on the
  // target side.
  side_factors(space, "softwave::gw::exact_source_factors", x.f, source, cu,
               cross, cross_on_source, my, my, std::int64_t(1), cp, u, p);
  side_factors(space, "softwave::gw::exact_target_factors", y.f, target, cv,
               cross, !cross_on_source, mx, std::int64_t(1), my, cp, v, q);
}

// The exact cost's state for one sampled_gw call: both sides' factors, the
// statistics of the initial coupling and of each slot's plan, and the
// average of the costs (cost_ema_beta).
template <class T, class Space>
struct ExactCost {
  DistanceFactors<T, Space> x, y;
  OTView3<T, Space> applied;      // (1, N, m_Y): a plan times G_Y
  OTView3<T, Space> column_sums;  // (1, K, 1): its πᵀ1
  OTView3<T, Space> ones;         // (1, N, 1)
  TermStatistics initial;
  std::vector<TermStatistics> slots;
  TermStatistics average;

  ExactCost(const Space& space, const OTView2<const T, Space>& source,
            const OTView2<const T, Space>& target, int slot_count)
      : x(distance_factors(space, source, true)),
        y(distance_factors(space, target, false)),
        applied(uninitialised<T***>(space, "softwave::gw::exact_applied", 1,
                                    source.extent(0), y.width())),
        column_sums(uninitialised<T***>(
            space, "softwave::gw::exact_column_sums", 1, target.extent(0), 1)),
        ones(uninitialised<T***>(space, "softwave::gw::exact_ones", 1,
                                 source.extent(0), 1)),
        slots(slot_count) {
    Kokkos::deep_copy(space, ones, T(1));
  }
  std::int64_t rank() const { return std::min(x.width(), y.width()); }

  TermStatistics statistics(const Space& space) const {
    std::int64_t const n = applied.extent(1), m = applied.extent(2);
    OTView2<const T, Space> const plan_g(applied.data(), n, m);
    auto const sums = column_sums;
    return term_statistics(
        space, x, y, plan_g,
        KOKKOS_LAMBDA(std::int64_t j) { return double(sums(0, j, 0)); });
  }

  // The statistics of slot `slot`'s plan, its Sinkhorn solve (form,
  // potentials) just done.
  template <class Form>
  void record(const Space& space, int slot, const Form& form,
              const Marginals<T, Space>& marginals,
              const SinkhornResult<T, Space>& solved,
              const SinkhornOptions& options) {
    PlanQueries<T, Space> queries;
    queries.v =
        OTView3<const T, Space>(y.g.data(), 1, y.g.extent(0), y.width());
    queries.plan_v = applied;
    queries.u = ones;
    queries.plan_t_u = column_sums;
    sinkhorn_plan_queries(space, form, marginals,
                          OTView2<const T, Space>(solved.f),
                          OTView2<const T, Space>(solved.g), queries, options);
    slots[slot] = statistics(space);
  }

  // The same from a dense solve: its plan, a_i b_j exp((f_i + g_j −
  // C_ij)/ε), written over the cost C (formed again for each solve), then
  // multiplied by G_Y: one exp an entry, where the plan queries take a pass
  // over N×K for every 8 columns of G_Y.
  void record_dense(const Space& space, int slot, const OTView3<T, Space>& cost,
                    const OTView1<const T, Space>& a,
                    const OTView1<const T, Space>& b,
                    const SinkhornResult<T, Space>& solved, double epsilon) {
    using Range = Kokkos::RangePolicy<Space>;
    std::int64_t const n = cost.extent(1), k = cost.extent(2),
                       m = applied.extent(2);
    auto const f = solved.f, g = solved.g;
    auto const out = applied, sums = column_sums;
    auto const gy = y.g;
    bool const a_given = a.extent(0) > 0, b_given = b.extent(0) > 0;
    double const inv = 1.0 / epsilon;
    Kokkos::parallel_for(
        "softwave::gw::exact_dense_plan", Range(space, 0, n * k),
        KOKKOS_LAMBDA(std::int64_t q) {
          std::int64_t const i = q / k, j = q % k;
          double const ai = a_given ? double(a(i)) : 1.0 / double(n),
                       bj = b_given ? double(b(j)) : 1.0 / double(k);
          cost(0, i, j) = T(ai * bj *
                            compat::exp((double(f(0, i)) + double(g(0, j)) -
                                         double(cost(0, i, j))) *
                                        inv));
        });
    // A thread a row and 8 columns of G_Y: each plan entry read once for
    // all 8.
    constexpr std::int64_t chunk = 8;
    std::int64_t const chunks = (m + chunk - 1) / chunk;
    Kokkos::parallel_for(
        "softwave::gw::exact_dense_applied", Range(space, 0, n * chunks),
        KOKKOS_LAMBDA(std::int64_t q) {
          std::int64_t const i = q / chunks, c0 = (q % chunks) * chunk,
                             width = m - c0 < chunk ? m - c0 : chunk;
          double s[chunk] = {};
          for (std::int64_t j = 0; j < k; ++j) {
            double const p = cost(0, i, j);
            for (std::int64_t c = 0; c < width; ++c)
              s[c] += p * double(gy(j, c0 + c));
          }
          for (std::int64_t c = 0; c < width; ++c) out(0, i, c0 + c) = T(s[c]);
        });
    Kokkos::parallel_for(
        "softwave::gw::exact_dense_columns", Range(space, 0, k),
        KOKKOS_LAMBDA(std::int64_t j) {
          double s = 0;
          for (std::int64_t i = 0; i < n; ++i) s += double(cost(0, i, j));
          sums(0, j, 0) = T(s);
        });
    slots[slot] = statistics(space);
  }

  // The initial coupling: scale·T0 for a plan T0 (N, K) given, else the
  // product plan a⊗b·product_scale (a, b empty: uniform). Kept for the
  // objective, and its statistics recorded.
  OTView2<const T, Space> initial_plan;
  double initial_scale = 1, product_scale = 1;
  OTView1<const T, Space> a, b;

  void record_initial(const Space& space, const OTView2<const T, Space>& plan,
                      double scale, const OTView1<const T, Space>& a_,
                      const OTView1<const T, Space>& b_, double product) {
    initial_plan = plan;
    initial_scale = scale;
    product_scale = product;
    a = a_;
    b = b_;
    apply_initial(space, y.g, applied, column_sums);
    initial = statistics(space);
  }

  // The initial coupling times v (K, m) into out (1, N, m), and its column
  // sums into sums (1, K, 1).
  void apply_initial(const Space& space, const OTView2<T, Space>& v,
                     const OTView3<T, Space>& out,
                     const OTView3<T, Space>& sums) const {
    std::int64_t const n = out.extent(1), k = sums.extent(1), m = out.extent(2);
    using Range = Kokkos::RangePolicy<Space>;
    auto const plan = initial_plan;
    double const scale = initial_scale, product = product_scale;
    if (plan.size() > 0) {
      Kokkos::parallel_for(
          "softwave::gw::exact_initial_applied", Range(space, 0, n * m),
          KOKKOS_LAMBDA(std::int64_t q) {
            std::int64_t const i = q / m, c = q % m;
            double s = 0;
            for (std::int64_t j = 0; j < k; ++j)
              s += double(plan(i, j)) * double(v(j, c));
            out(0, i, c) = T(scale * s);
          });
      Kokkos::parallel_for(
          "softwave::gw::exact_initial_columns", Range(space, 0, k),
          KOKKOS_LAMBDA(std::int64_t j) {
            double s = 0;
            for (std::int64_t i = 0; i < n; ++i) s += double(plan(i, j));
            sums(0, j, 0) = T(scale * s);
          });
      return;
    }
    auto const a_ = a, b_ = b;
    bool const a_given = a_.extent(0) > 0, b_given = b_.extent(0) > 0;
    auto const b_at = KOKKOS_LAMBDA(std::int64_t j) {
      return b_given ? double(b_(j)) : 1.0 / double(k);
    };
    // Σ_j b_j v_j, the product plan's rows but for a_i.
    auto const b_v = weighted_products(
        space, "softwave::gw::exact_initial_b_v", k, 1, m,
        KOKKOS_LAMBDA(std::int64_t, std::int64_t) { return 1.0; }, b_at, v);
    auto const b_v_device =
        on_device(space, b_v, "softwave::gw::exact_initial_b_v");
    Kokkos::parallel_for(
        "softwave::gw::exact_initial_applied", Range(space, 0, n * m),
        KOKKOS_LAMBDA(std::int64_t q) {
          std::int64_t const i = q / m, c = q % m;
          double const ai = a_given ? double(a_(i)) : 1.0 / double(n);
          out(0, i, c) = T(ai * product * b_v_device(c));
        });
    double mass = 0;
    Kokkos::parallel_reduce(
        "softwave::gw::exact_initial_mass", Range(space, 0, n),
        KOKKOS_LAMBDA(std::int64_t i, double& s) {
          s += a_given ? double(a_(i)) : 1.0 / double(n);
        },
        mass);
    Kokkos::parallel_for(
        "softwave::gw::exact_initial_columns", Range(space, 0, k),
        KOKKOS_LAMBDA(std::int64_t j) {
          sums(0, j, 0) = T(b_at(j) * mass * product);
        });
  }

  // The GW objective's three sums (objective.hpp) of a dense plan P (N, K)
  // from the factors, O(NK·m) instead of O(N²K·e): with r = P1, c = Pᵀ1,
  //   Σ_ij D_X² r_i r_j = ⟨F_Xᵀ diag(r) F_X, G_Xᵀ diag(r) G_X⟩ (and Y's),
  //   Σ_ik P_ik (D_X P D_Y)_ik = ⟨G_Xᵀ P G_Y, F_Xᵀ P F_Y⟩.
  GwObjectiveParts objective(const Space& space,
                             const OTView2<const T, Space>& plan) const {
    using Range = Kokkos::RangePolicy<Space>;
    std::int64_t const n = plan.extent(0), k = plan.extent(1), m = y.width();
    auto const plan_g = uninitialised<double**>(
        space, "softwave::gw::exact_objective_plan_g", n, m);
    auto const plan_f = uninitialised<double**>(
        space, "softwave::gw::exact_objective_plan_f", n, m);
    auto const columns = uninitialised<double*>(
        space, "softwave::gw::exact_objective_columns", k);
    auto const gy = y.g64, fy = y.f64;
    Kokkos::parallel_for(
        "softwave::gw::exact_objective_products", Range(space, 0, n * m),
        KOKKOS_LAMBDA(std::int64_t q) {
          std::int64_t const i = q / m, c = q % m;
          double sg = 0, sf = 0;
          for (std::int64_t j = 0; j < k; ++j) {
            double const p = plan(i, j);
            sg += p * double(gy(j, c));
            sf += p * double(fy(j, c));
          }
          plan_g(i, c) = sg;
          plan_f(i, c) = sf;
        });
    auto const rows =
        uninitialised<double*>(space, "softwave::gw::exact_objective_rows", n);
    plan_marginals(space, plan, rows, columns);
    return objective_parts(space, plan_g, plan_f, columns);
  }

  // The three sums from P G_Y, P F_Y (N, m) and Pᵀ1 (K), float64.
  template <class Products, class Columns>
  GwObjectiveParts objective_parts(const Space& space, const Products& plan_g,
                                   const Products& plan_f,
                                   const Columns& columns) const {
    std::int64_t const n = plan_g.extent(0), k = columns.extent(0),
                       m = y.width();
    auto const gy = y.g64, fy = y.f64;
    auto const one = KOKKOS_LAMBDA(std::int64_t) { return 1.0; };
    auto const row = KOKKOS_LAMBDA(std::int64_t i) { return plan_g(i, 0); };
    auto const column = KOKKOS_LAMBDA(std::int64_t j) { return columns(j); };
    auto inner = [](const std::vector<double>& u,
                    const std::vector<double>& v) {
      double s = 0;
      for (std::size_t q = 0; q < u.size(); ++q) s += u[q] * v[q];
      return s;
    };
    auto const fx = x.f64, gx = x.g64;
    std::int64_t const mx = x.width();
    GwObjectiveParts parts;
    parts.source =
        inner(weighted_products(space, "softwave::gw::exact_objective_source_f",
                                n, mx, mx, fx, row, fx),
              weighted_products(space, "softwave::gw::exact_objective_source_g",
                                n, mx, mx, gx, row, gx));
    parts.target =
        inner(weighted_products(space, "softwave::gw::exact_objective_target_f",
                                k, m, m, fy, column, fy),
              weighted_products(space, "softwave::gw::exact_objective_target_g",
                                k, m, m, gy, column, gy));
    parts.cross =
        inner(weighted_products(space, "softwave::gw::exact_objective_cross_g",
                                n, mx, m, gx, one, plan_g),
              weighted_products(space, "softwave::gw::exact_objective_cross_f",
                                n, mx, m, fx, one, plan_f));
    return parts;
  }

  // The three sums of the mixture `sum` (its terms' plans, the initial
  // coupling's included; no dense linear cost) with no N×K array: the plan
  // evaluated a block of rows and a column at a time (TermSum::block) and
  // multiplied by G_Y and F_Y in float64, 8 of their 2m columns a thread.
  GwObjectiveParts mixture_objective(const Space& space,
                                     const TermSum<T, Space>& sum) const {
    constexpr int R = TermSum<T, Space>::rows, chunk = 8;
    std::int64_t const n = sum.row_count(), k = y.g.extent(0), m = y.width(),
                       blocks = (n + R - 1) / R,
                       chunks = (2 * m + chunk - 1) / chunk;
    auto const plan_g =
        uninitialised<double**>(space, "softwave::gw::exact_mixture_g", n, m);
    auto const plan_f =
        uninitialised<double**>(space, "softwave::gw::exact_mixture_f", n, m);
    auto const columns =
        uninitialised<double*>(space, "softwave::gw::exact_mixture_columns", k);
    auto const gy = y.g64, fy = y.f64;
    Kokkos::parallel_for(
        "softwave::gw::exact_mixture_products",
        Kokkos::RangePolicy<Space>(space, 0, blocks * chunks),
        KOKKOS_LAMBDA(std::int64_t q) {
          std::int64_t const q0 = (q / chunks) * R, c0 = (q % chunks) * chunk,
                             width = 2 * m - c0 < chunk ? 2 * m - c0 : chunk;
          int const count = sum.rows_from(q0);
          double acc[R][chunk] = {};
          double out[R];
          for (std::int64_t j = 0; j < k; ++j) {
            sum.block(q0, count, j, out);
            for (std::int64_t c = 0; c < width; ++c) {
              std::int64_t const col = c0 + c;
              double const v = col < m ? gy(j, col) : fy(j, col - m);
              for (int r = 0; r < count; ++r) acc[r][c] += out[r] * v;
            }
          }
          for (int r = 0; r < count; ++r)
            for (std::int64_t c = 0; c < width; ++c) {
              std::int64_t const col = c0 + c;
              if (col < m)
                plan_g(q0 + r, col) = acc[r][c];
              else
                plan_f(q0 + r, col - m) = acc[r][c];
            }
        });
    Kokkos::parallel_for(
        "softwave::gw::exact_mixture_columns",
        Kokkos::RangePolicy<Space>(space, 0, k), KOKKOS_LAMBDA(std::int64_t j) {
          double out[R];
          double total = 0;
          for (std::int64_t q0 = 0; q0 < n; q0 += R) {
            int const count = sum.rows_from(q0);
            sum.block(q0, count, j, out);
            for (int r = 0; r < count; ++r) total += out[r];
          }
          columns(j) = total;
        });
    return objective_parts(space, plan_g, plan_f, columns);
  }

  // The mixture's statistics over its mass (the cost of T_{t−1}), averaged
  // over the iterations with weight β on the newest where 0 < β < 1.
  TermStatistics cost_of(const std::vector<TermWeight>& terms, int iteration,
                         double beta) {
    TermStatistics mixture;
    for (auto const& w : terms)
      mixture.add(w.slot < 0 ? initial : slots[w.slot], w.weight);
    TermStatistics normalised;
    normalised.add(mixture, 1.0 / mixture.mass);
    if (!(beta > 0 && beta < 1) || iteration == 0) {
      average = normalised;
    } else {
      TermStatistics next;
      next.add(average, 1 - beta);
      next.add(normalised, beta);
      average = next;
    }
    return average;
  }
};

}  // namespace softwave::impl
