#pragma once
// The CUDA specialisations of core's SpecialisedPasses (core/src/sinkhorn/
// specialised.hpp, which includes this file in CUDA builds): the updates,
// the exact measurements and the plan's weighted row sums (updates.hpp has
// the kernels' design) for
// float point clouds with d <= 64 and float low-rank costs of rank <= 128.
// An instance holds, for the whole solve, the kernels' workspace and each
// side's points: the clouds centred on their common mean (the cost is
// translation invariant, and the kernels' expanded cost loses no digits to
// an offset), a low-rank cost's factors as given.

#include <algorithm>
#include <softwave/kokkos_compat.hpp>
#include <string>
#include <utility>

#include "updates.hpp"

namespace softwave::impl {

namespace cuda_sinkhorn {

using Points = Kokkos::View<float***, Kokkos::LayoutRight, Kokkos::CudaSpace>;

// `points` as a contiguous (B, n, d) array: itself, or a copy.
inline CallArray<Points> contiguous(
    const Kokkos::Cuda& space, const OTView3<const float, Kokkos::Cuda>& points,
    const char* label) {
  if (points.span_is_contiguous())
    return {Points(const_cast<float*>(points.data()), points.extent(0),
                   points.extent(1), points.extent(2))};
  auto copy = call_array<Points>(space, label, false, points.extent(0),
                                 points.extent(1), points.extent(2));
  Kokkos::deep_copy(space, copy.view, points);
  return copy;
}

// xc, yc ← x − μ_b, y − μ_b, μ_b the mean of problem b's points of both
// clouds (in double).
inline void centre_clouds(
    const Kokkos::Cuda& space, const PointsForm<float, Kokkos::Cuda>& form,
    const Kokkos::View<float***, Kokkos::LayoutRight, Kokkos::CudaSpace>& xc,
    const Kokkos::View<float***, Kokkos::LayoutRight, Kokkos::CudaSpace>& yc) {
  using Space = Kokkos::Cuda;
  std::int64_t const B = form.batch(), N = form.rows(), K = form.columns();
  int const d = int(form.x.extent(2));
  auto mean = call_array<Kokkos::View<double**, Space::memory_space>>(
      space, "softwave::sinkhorn::cloud_mean", false, B, d);
  auto const x = form.x, y = form.y;
  auto const mu = mean.view;
  using Policy = Kokkos::TeamPolicy<Space>;
  Kokkos::parallel_for(
      "softwave::sinkhorn::cloud_mean", Policy(space, B * d, Kokkos::AUTO),
      KOKKOS_LAMBDA(const Policy::member_type& team) {
        std::int64_t const b = team.league_rank() / d;
        int const k = team.league_rank() % d;
        double total = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, N + K),
            [&](std::int64_t i, double& sum) {
              sum += i < N ? double(x(b, i, k)) : double(y(b, i - N, k));
            },
            total);
        Kokkos::single(Kokkos::PerTeam(team),
                       [&]() { mu(b, k) = total / double(N + K); });
      });
  Kokkos::parallel_for(
      "softwave::sinkhorn::centre",
      Kokkos::RangePolicy<Space>(space, 0, B * (N + K)),
      KOKKOS_LAMBDA(std::int64_t q) {
        std::int64_t const b = q / (N + K), i = q % (N + K);
        for (int k = 0; k < d; ++k) {
          if (i < N)
            xc(b, i, k) = float(double(x(b, i, k)) - mu(b, k));
          else
            yc(b, i - N, k) = float(double(y(b, i - N, k)) - mu(b, k));
        }
      });
}

// How a cost form's two sides reach the kernels: each side's points (or
// factor), its own term, and how the kernels form C.
template <class Form>
struct FormSides;

template <>
struct FormSides<PointsForm<float, Kokkos::Cuda>> {
  using Form = PointsForm<float, Kokkos::Cuda>;
  static constexpr bool low_rank = false;
  static int features(const Form& form) { return int(form.x.extent(2)); }
  static std::string unavailable(const Form& form) {
    if (features(form) > max_features)
      return "they take point clouds with d <= " +
             std::to_string(max_features) +
             " (got d = " + std::to_string(features(form)) + ")";
    return {};
  }
  static float cost_scale(const Form& form) { return form.scale; }
  static OTView3<const float, Kokkos::Cuda> points(const Form& form,
                                                   bool rows) {
    return rows ? form.x : form.y;
  }
  static OTView2<const float, Kokkos::Cuda> own_term(const Form&, bool) {
    return {};
  }
  // The iterations' points: both clouds centred on their common mean.
  static std::pair<CallArray<Points>, CallArray<Points>> prepare(
      const Kokkos::Cuda& space, const Form& form) {
    auto x = call_array<Points>(space, "softwave::sinkhorn::centred_x", false,
                                form.x.extent(0), form.x.extent(1),
                                form.x.extent(2));
    auto y = call_array<Points>(space, "softwave::sinkhorn::centred_y", false,
                                form.y.extent(0), form.y.extent(1),
                                form.y.extent(2));
    centre_clouds(space, form, x.view, y.view);
    return {std::move(x), std::move(y)};
  }
};

template <>
struct FormSides<LowRankForm<float, Kokkos::Cuda>> {
  using Form = LowRankForm<float, Kokkos::Cuda>;
  static constexpr bool low_rank = true;
  static int features(const Form& form) { return int(form.p.extent(2)); }
  static std::string unavailable(const Form& form) {
    if (features(form) > max_rank)
      return "they take low-rank costs of rank <= " + std::to_string(max_rank) +
             " (got " + std::to_string(features(form)) + ")";
    return {};
  }
  static float cost_scale(const Form&) { return 1.f; }
  static OTView3<const float, Kokkos::Cuda> points(const Form& form,
                                                   bool rows) {
    return rows ? form.p : form.q;
  }
  static OTView2<const float, Kokkos::Cuda> own_term(const Form& form,
                                                     bool rows) {
    return rows ? form.u : form.v;
  }
  static std::pair<CallArray<Points>, CallArray<Points>> prepare(
      const Kokkos::Cuda& space, const Form& form) {
    return {contiguous(space, form.p, "softwave::sinkhorn::p"),
            contiguous(space, form.q, "softwave::sinkhorn::q")};
  }
};

// What both forms' specialisations do, through FormSides<Form>.
template <class Form>
struct Passes {
  using Space = Kokkos::Cuda;
  using Sides = FormSides<Form>;

  static std::string unavailable(const Form& form) {
    return Sides::unavailable(form);
  }
  // From 512 points a side; low-rank costs with their products on tensor
  // cores from kLeastTensorLowRank, where their passes already beat the
  // portable ones and the dense solves sampled GW would take instead
  // (TorchGW's 400 × 500 landmark task, 50 iterations on an H100: 0.031
  // against 0.057 s; 200 × 250, 200 iterations: 0.127 against 0.235 s).
  static bool pays_off(const Form& form, const SinkhornOptions& options) {
    std::int64_t const least =
        Sides::low_rank && options.tf32_low_rank ? kLeastTensorLowRank : 512;
    return form.rows() >= least && form.columns() >= least;
  }
  static constexpr std::int64_t kLeastTensorLowRank = 200;

  // options.warm_start: the potentials start from given values (not
  // zeros); options.tf32_low_rank: a low-rank cost's products on tensor
  // cores.
  Passes(const Space& space, const Form& form, const SinkhornOptions& options)
      : form_(form),
        warm_(options.warm_start),
        tf32_(Sides::low_rank && options.tf32_low_rank) {
    auto prepared = Sides::prepare(space, form);
    x_ = std::move(prepared.first);
    y_ = std::move(prepared.second);
    std::int64_t const B = form.batch(), N = form.rows(), K = form.columns();
    int const d = Sides::features(form);
    std::int64_t const floats =
        std::max(workspace_floats(B, N, K, d, Sides::low_rank, tf32_),
                 workspace_floats(B, K, N, d, Sides::low_rank, tf32_));
    workspace_ = call_array<Kokkos::View<float*, Space::memory_space>>(
        space, "softwave::sinkhorn::cuda_workspace", true, std::size_t(floats));
    // Each side's records as the columns of the other's updates: the rows'
    // updates read the columns' (K of them), the columns' the rows' (N).
    for (bool rows_side : {true, false}) {
      std::int64_t const kept =
          record_floats(B, rows_side ? K : N, d, Sides::low_rank, tf32_);
      if (kept == 0) continue;
      record_memory_[rows_side] =
          call_array<Kokkos::View<float*, Space::memory_space>>(
              space, "softwave::sinkhorn::cuda_records", false,
              std::size_t(kept));
      records_[rows_side].data = record_memory_[rows_side].view.data();
    }
  }

  // What an update and a measurement share: both sides (points, the rows'
  // own potential, log-weights and term, the columns'), sizes, cost, the
  // rows' penalty and ε.
  static HalfIteration half_iteration(const Form& form, bool rows_side,
                                      const Points& rows,
                                      const Points& column_points,
                                      const RowSide<float, Space>& own,
                                      const ColumnSide<float, Space>& columns,
                                      const EpsilonAt<float, Space>& epsilon) {
    auto side = [](const Points& points, const auto& potential,
                   const auto& log_weight, const auto& term) {
      Side s{points.data(),
             potential.data(),
             std::int64_t(potential.stride(0)),
             log_weight.data(),
             std::int64_t(log_weight.stride(0)),
             std::int64_t(points.extent(1))};
      if (term.extent(0)) {
        s.own_term = term.data();
        s.own_term_stride = std::int64_t(term.stride(0));
      }
      return s;
    };
    HalfIteration h;
    h.rows = side(rows, own.potential, own.log_weight,
                  Sides::own_term(form, rows_side));
    h.columns = side(column_points, columns.potential, columns.log_weight,
                     Sides::own_term(form, !rows_side));
    h.batch = form.batch();
    h.d = Sides::features(form);
    h.cost_scale = Sides::cost_scale(form);
    h.low_rank = Sides::low_rank;
    h.rho = own.rho;
    h.epsilon_target = epsilon.target.data();
    h.epsilon_scale = epsilon.scale.data();
    h.epsilon_factor = epsilon.factor;
    return h;
  }

  void update(const Space& space, bool rows_side,
              const ColumnSide<float, Space>& columns,
              const EpsilonAt<float, Space>& epsilon,
              const UpdateVisitor<float, Space>& visitor) {
    auto h = half_iteration(form_, rows_side, (rows_side ? x_ : y_).view,
                            (rows_side ? y_ : x_).view, visitor.own, columns,
                            epsilon);
    h.updated = visitor.own.potential.data();
    h.active = visitor.mask.data();
    h.residual = visitor.totals.data();
    h.residual_stride = std::int64_t(visitor.totals.stride(0));
    h.measure = visitor.measure;
    h.cold = !warm_ && !updated_[rows_side];
    h.tf32_low_rank = tf32_;
    updated_[rows_side] = true;
    compat::ScopedRegion region(
        rows_side ? "softwave::sinkhorn::cuda_update_rows"
                  : "softwave::sinkhorn::cuda_update_columns");
    cuda_sinkhorn::update(space.cuda_stream(), h, workspace_.view.data(),
                          tickets_, records_[rows_side]);
  }

  // The exact measurement of `visitor.own` against `columns` (rows_side:
  // the form's rows; else its transposed form's), as tiled_pass with a
  // MeasureVisitor; costs formed directly from the caller's points.
  static void measure(const Space& space, const Form& form, bool rows_side,
                      const ColumnSide<float, Space>& columns,
                      const EpsilonAt<float, Space>& epsilon,
                      const MeasureVisitor<float, Space>& visitor) {
    auto const rows = contiguous(space, Sides::points(form, rows_side),
                                 "softwave::sinkhorn::measured_rows");
    auto const others = contiguous(space, Sides::points(form, !rows_side),
                                   "softwave::sinkhorn::measured_columns");
    auto const h = half_iteration(form, rows_side, rows.view, others.view,
                                  visitor.own, columns, epsilon);
    Measurement out;
    out.lse = visitor.lse.data();
    out.lse_stride = visitor.lse.stride(0);
    out.totals = visitor.totals.data();
    out.totals_stride = visitor.totals.stride(0);
    out.sum_stride = visitor.totals.stride(1);
    auto workspace = call_array<Kokkos::View<float*, Space::memory_space>>(
        space, "softwave::sinkhorn::cuda_measurement", false,
        std::size_t(measurement_floats(h.batch, h.rows.n, h.columns.n, h.d,
                                       h.low_rank)));
    compat::ScopedRegion region(
        rows_side ? "softwave::sinkhorn::cuda_measure_rows"
                  : "softwave::sinkhorn::cuda_measure_columns");
    cuda_sinkhorn::measure(space.cuda_stream(), h, out, workspace.view.data());
  }

  static bool takes_weighted_rows(const Form& form) {
    return Sides::features(form) <= max_weighted_features;
  }
  // sums(b, i, c) = Σ_j w_ij z(b, j, c), w_ij the form's rows of π
  // normalised by their log-sum-exps, found in the same pass and written to
  // `lse` (takes_weighted_rows).
  static void weighted_rows(const Space& space, const Form& form,
                            const RowSide<float, Space>& own,
                            const ColumnSide<float, Space>& columns,
                            const EpsilonAt<float, Space>& epsilon,
                            const OTView2<float, Space>& lse,
                            const OTView3<const float, Space>& z,
                            const OTView3<float, Space>& sums) {
    auto const rows = contiguous(space, Sides::points(form, true),
                                 "softwave::sinkhorn::weighted_rows");
    auto const others = contiguous(space, Sides::points(form, false),
                                   "softwave::sinkhorn::weighted_columns");
    auto const values =
        contiguous(space, z, "softwave::sinkhorn::weighted_values");
    auto const h = half_iteration(form, true, rows.view, others.view, own,
                                  columns, epsilon);
    Weighted out;
    out.lse = lse.data();
    out.lse_stride = lse.stride(0);
    out.values = values.view.data();
    out.sums = sums.data();
    out.columns = int(z.extent(2));
    auto workspace = call_array<Kokkos::View<float*, Space::memory_space>>(
        space, "softwave::sinkhorn::cuda_weighted", false,
        std::size_t(
            weighted_floats(h.batch, h.rows.n, h.columns.n, h.d, h.low_rank)));
    compat::ScopedRegion region("softwave::sinkhorn::cuda_weighted_rows");
    cuda_sinkhorn::weighted(space.cuda_stream(), h, out, workspace.view.data());
  }

  Form form_;
  bool warm_, tf32_;
  bool updated_[2] = {false, false};  // [rows_side]: updated once already
  std::uint64_t tickets_ = 0;         // handed out by the workspace's counter
  CallArray<Points> x_, y_;           // the rows' and the columns' points
  CallArray<Kokkos::View<float*, Space::memory_space>> workspace_;
  // [rows_side]: the records of the side that update's columns are, kept
  // while ε stays (cuda_sinkhorn::Records).
  CallArray<Kokkos::View<float*, Space::memory_space>> record_memory_[2];
  Records records_[2];
};

}  // namespace cuda_sinkhorn

template <>
struct SpecialisedPasses<Kokkos::Cuda, float, PointsForm<float, Kokkos::Cuda>>
    : cuda_sinkhorn::Passes<PointsForm<float, Kokkos::Cuda>> {
  using Passes::Passes;
};

template <>
struct SpecialisedPasses<Kokkos::Cuda, float, LowRankForm<float, Kokkos::Cuda>>
    : cuda_sinkhorn::Passes<LowRankForm<float, Kokkos::Cuda>> {
  using Passes::Passes;
};

}  // namespace softwave::impl
