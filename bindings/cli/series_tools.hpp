#pragma once
// Host-side helpers on series sets for the barycenter and cluster commands:
// selecting series, resampling to another length, the per-time-step mean,
// and the adjusted Rand index of two labellings.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "ucr_reader.hpp"

namespace softwave::cli {

// The series of `set` listed in `members`, in that order, with their labels.
SeriesSet subset(const SeriesSet& set, const std::vector<std::size_t>& members);

// The indices of the series labelled `label`.
std::vector<std::size_t> series_with_label(const SeriesSet& set,
                                           std::int64_t label);

// A series of n points of d features (row-major) linearly interpolated to
// L points; point t sits at position t·(n−1)/(L−1) of the input, so both
// ends are kept (L = 1: the middle).
std::vector<double> resample(const double* series, std::size_t n, std::size_t d,
                             std::size_t L);

// The per-time-step mean of the series of `set`, each resampled to L
// points: L·d values.
std::vector<double> mean_series(const SeriesSet& set, std::size_t L);

// Adjusted Rand index (Hubert & Arabie 1985) between two labellings of the
// same items: 1 for identical partitions, about 0 for independent ones.
// Two partitions that are both trivial in the same way (one cluster each,
// or all singletons) score 1.
double adjusted_rand_index(const std::vector<std::int64_t>& a,
                           const std::vector<std::int64_t>& b);

}  // namespace softwave::cli
