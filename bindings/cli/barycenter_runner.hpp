#pragma once
// Soft-DTW barycenters of series sets on Kokkos::DefaultExecutionSpace, and
// the starting points the commands offer. Needs Kokkos initialised.

#include <cstddef>
#include <softwave/barycenter.hpp>
#include <string>
#include <vector>

#include "memory_limit.hpp"
#include "ucr_reader.hpp"

namespace softwave::cli {

struct BarycenterRun {
  std::vector<double> z;  // L·d values, row-major
  BarycenterReport report;
};

// The barycenter of every series of `set` (weights 1/count) from `start`
// (L·d values), computed with inputs of type T (float or double). A
// barycenter the library refuses (its objective overflows T's values) is an
// input_error naming the series by `name` (e.g. "--x 'a.tsv'").
template <class T>
BarycenterRun barycenter_of(const SeriesSet& set,
                            const std::vector<double>& start, std::size_t L,
                            const BarycenterOptions& options,
                            const std::string& name);

// What barycenter_of<T> holds and allocates for a barycenter of length L
// of `set`, the series read included (Kokkos initialised).
template <class T>
std::vector<MemoryPart> barycenter_memory(const SeriesSet& set, std::size_t L,
                                          const BarycenterOptions& options);

// The medoid of `set`: the series with the smallest summed Soft-DTW value
// to the others (softwave::pairwise, ties to the first), resampled to L.
template <class T>
std::vector<double> medoid_of(const SeriesSet& set, std::size_t L,
                              const SoftDTWOptions& options,
                              const std::string& name);

}  // namespace softwave::cli
