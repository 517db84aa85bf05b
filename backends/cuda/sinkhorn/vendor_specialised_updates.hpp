#pragma once
// The CUDA specialisation of core's SpecialisedUpdates (core/src/sinkhorn/
// specialised.hpp, which includes this file in CUDA builds): float point
// clouds with d <= 64 (updates.hpp has the kernels' design). An instance
// holds the clouds centred on their common mean (the cost is translation
// invariant, and the kernels' expanded cost loses no digits to an offset)
// and the kernels' workspace, for the whole solve.

#include <algorithm>
#include <softwave/kokkos_compat.hpp>
#include <string>

#include "updates.hpp"

namespace softwave::impl {

namespace cuda_sinkhorn {

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

}  // namespace cuda_sinkhorn

template <>
struct SpecialisedUpdates<Kokkos::Cuda, float,
                          PointsForm<float, Kokkos::Cuda>> {
  using Space = Kokkos::Cuda;
  using Form = PointsForm<float, Space>;
  using Points =
      Kokkos::View<float***, Kokkos::LayoutRight, Space::memory_space>;

  static std::string unavailable(const Form& form) {
    if (form.x.extent(2) > std::size_t(cuda_sinkhorn::max_features))
      return "they take point clouds with d <= " +
             std::to_string(cuda_sinkhorn::max_features) +
             " (got d = " + std::to_string(form.x.extent(2)) + ")";
    return {};
  }
  static bool pays_off(const Form& form) {
    return form.rows() >= 512 && form.columns() >= 512;
  }

  // warm: the potentials start from given values (not zeros).
  SpecialisedUpdates(const Space& space, const Form& form, bool warm)
      : form_(form),
        warm_(warm),
        x_(call_array<Points>(space, "softwave::sinkhorn::centred_x", false,
                              form.x.extent(0), form.x.extent(1),
                              form.x.extent(2))),
        y_(call_array<Points>(space, "softwave::sinkhorn::centred_y", false,
                              form.y.extent(0), form.y.extent(1),
                              form.y.extent(2))) {
    std::int64_t const B = form.batch(), N = form.rows(), K = form.columns();
    int const d = int(form.x.extent(2));
    cuda_sinkhorn::centre_clouds(space, form, x_.view, y_.view);
    std::int64_t const floats =
        std::max(cuda_sinkhorn::workspace_floats(B, N, K, d),
                 cuda_sinkhorn::workspace_floats(B, K, N, d));
    workspace_ = call_array<Kokkos::View<float*, Space::memory_space>>(
        space, "softwave::sinkhorn::cuda_workspace", true, std::size_t(floats));
  }

  void update(const Space& space, bool rows_side,
              const ColumnSide<float, Space>& columns,
              const EpsilonAt<float, Space>& epsilon,
              const UpdateVisitor<float, Space>& visitor) {
    cuda_sinkhorn::HalfIteration h;
    auto const& own = visitor.own;
    // One side: its centred points, potentials and log-weights.
    auto side = [](const Points& points, const float* potential,
                   std::int64_t potential_stride, const float* log_weight,
                   std::int64_t log_weight_stride) {
      return cuda_sinkhorn::Side{
          points.data(), potential,         potential_stride,
          log_weight,    log_weight_stride, std::int64_t(points.extent(1))};
    };
    h.rows = side((rows_side ? x_ : y_).view, own.potential.data(),
                  own.potential.stride(0), own.log_weight.data(),
                  own.log_weight.stride(0));
    h.columns = side((rows_side ? y_ : x_).view, columns.potential.data(),
                     columns.potential.stride(0), columns.log_weight.data(),
                     columns.log_weight.stride(0));
    h.updated = own.potential.data();
    h.batch = form_.batch();
    h.d = int(form_.x.extent(2));
    h.cost_scale = form_.scale;
    h.rho = own.rho;
    h.epsilon_target = epsilon.target.data();
    h.epsilon_scale = epsilon.scale.data();
    h.epsilon_factor = epsilon.factor;
    h.active = visitor.mask.data();
    h.residual = visitor.totals.data();
    h.residual_stride = std::int64_t(visitor.totals.stride(0));
    h.measure = visitor.measure;
    h.cold = !warm_ && !updated_[rows_side];
    updated_[rows_side] = true;
    compat::ScopedRegion region(
        rows_side ? "softwave::sinkhorn::cuda_update_rows"
                  : "softwave::sinkhorn::cuda_update_columns");
    cuda_sinkhorn::update(space.cuda_stream(), h, workspace_.view.data(),
                          tickets_);
  }

  Form form_;
  bool warm_;
  bool updated_[2] = {false, false};  // [rows_side]: updated once already
  std::uint64_t tickets_ = 0;         // handed out by the workspace's counter
  CallArray<Points> x_, y_;
  CallArray<Kokkos::View<float*, Space::memory_space>> workspace_;
};

}  // namespace softwave::impl
