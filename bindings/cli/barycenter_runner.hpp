#pragma once
// Soft-DTW barycenters of series sets on Kokkos::DefaultExecutionSpace, and
// the starting points the commands offer. Needs Kokkos initialised.

#include <cstddef>
#include <softwave/barycenter.hpp>
#include <vector>

#include "ucr_reader.hpp"

namespace softwave::cli {

struct BarycenterRun {
  std::vector<double> z;  // L·d values, row-major
  BarycenterReport report;
};

// The barycenter of every series of `set` (weights 1/count) from `start`
// (L·d values), computed with inputs of type T (float or double).
template <class T>
BarycenterRun barycenter_of(const SeriesSet& set,
                            const std::vector<double>& start, std::size_t L,
                            const BarycenterOptions& options);

// The medoid of `set`: the series with the smallest summed Soft-DTW value
// to the others (softwave::pairwise, ties to the first), resampled to L.
template <class T>
std::vector<double> medoid_of(const SeriesSet& set, std::size_t L,
                              const SoftDTWOptions& options);

}  // namespace softwave::cli
