#include "barycenter_runner.hpp"

#include <string>

#include "device_series.hpp"
#include "distance_blocks.hpp"
#include "series_tools.hpp"

namespace softwave::cli {

template <class T>
BarycenterRun barycenter_of(const SeriesSet& set,
                            const std::vector<double>& start, std::size_t L,
                            const BarycenterOptions& options,
                            const std::string& name) {
  const Space space;
  const auto X = to_device<T>(space, set, "softwave::cli::barycenter_x");
  ArrayView2<T, Space> z(
      Kokkos::view_alloc(space, Kokkos::WithoutInitializing,
                         std::string("softwave::cli::barycenter")),
      L, set.dims);
  auto host = Kokkos::create_mirror_view(z);
  for (std::size_t q = 0; q < start.size(); ++q) {
    host.data()[q] = static_cast<T>(start[q]);
  }
  Kokkos::deep_copy(space, z, host);
  BarycenterRun run;
  try {
    run.report = softwave::barycenter(space, X, z, options);
  } catch (const softwave::invalid_argument& error) {
    // The inputs and options were checked before: what is left is the
    // library's word on the values (an objective beyond T's range).
    const std::string prefix = "softwave: ";
    std::string why = error.what();
    if (why.rfind(prefix, 0) == 0) why.erase(0, prefix.size());
    throw input_error("the barycenter of " + name + ": " + why);
  }
  Kokkos::deep_copy(space, host, z);
  space.fence();
  run.z.assign(host.data(), host.data() + host.size());
  return run;
}

template <class T>
std::vector<MemoryPart> barycenter_memory(const SeriesSet& set, std::size_t L,
                                          const BarycenterOptions& options) {
  const double point = double(L) * double(set.dims);
  const double pairs = double(set.count);
  const double workspace = double(softwave::workspace_bytes(
      Space(), std::int64_t(set.count), std::int64_t(L),
      std::int64_t(set.length), options.softdtw, /*backward=*/true));
  return {{"series read", 8.0 * double(set.values.size())},
          {"series in the execution space",
           double(sizeof(T)) * double(set.values.size())},
          // The start broadcast to every pair and each pair's gradient.
          {"barycenter gradients", 2.0 * double(sizeof(T)) * pairs * point},
          {"Soft-DTW workspace", workspace},
          {"optimiser", 8.0 * point * (2.0 * options.history + 8)}};
}

template <class T>
std::vector<double> medoid_of(const SeriesSet& set, std::size_t L,
                              const SoftDTWOptions& options,
                              const std::string& name) {
  std::vector<double> sums(set.count, 0.0);
  pairwise_in_blocks<T>(
      set, set, options, PairwiseValue::soft_dtw, name, name, {0, set.count},
      [&](std::size_t first, std::size_t rows, const T* values) {
        for (std::size_t r = 0; r < rows; ++r) {
          for (std::size_t j = 0; j < set.count; ++j) {
            if (j != first + r) sums[first + r] += values[r * set.count + j];
          }
        }
      });
  std::size_t best = 0;
  for (std::size_t s = 1; s < set.count; ++s) {
    if (sums[s] < sums[best]) best = s;
  }
  return resample(set.series(best), set.length, set.dims, L);
}

template BarycenterRun barycenter_of<float>(const SeriesSet&,
                                            const std::vector<double>&,
                                            std::size_t,
                                            const BarycenterOptions&,
                                            const std::string&);
template BarycenterRun barycenter_of<double>(const SeriesSet&,
                                             const std::vector<double>&,
                                             std::size_t,
                                             const BarycenterOptions&,
                                             const std::string&);
template std::vector<MemoryPart> barycenter_memory<float>(
    const SeriesSet&, std::size_t, const BarycenterOptions&);
template std::vector<MemoryPart> barycenter_memory<double>(
    const SeriesSet&, std::size_t, const BarycenterOptions&);
template std::vector<double> medoid_of<float>(const SeriesSet&, std::size_t,
                                              const SoftDTWOptions&,
                                              const std::string&);
template std::vector<double> medoid_of<double>(const SeriesSet&, std::size_t,
                                               const SoftDTWOptions&,
                                               const std::string&);

}  // namespace softwave::cli
