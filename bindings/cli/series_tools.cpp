#include "series_tools.hpp"

#include <algorithm>
#include <map>
#include <stdexcept>
#include <utility>

namespace softwave::cli {

SeriesSet subset(const SeriesSet& set,
                 const std::vector<std::size_t>& members) {
  SeriesSet out;
  out.length = set.length;
  out.dims = set.dims;
  out.count = members.size();
  out.values.reserve(members.size() * set.series_size());
  for (const std::size_t s : members) {
    out.values.insert(out.values.end(), set.series(s),
                      set.series(s) + set.series_size());
    if (!set.labels.empty()) out.labels.push_back(set.labels[s]);
  }
  return out;
}

std::vector<std::size_t> series_with_label(const SeriesSet& set,
                                           std::int64_t label) {
  std::vector<std::size_t> members;
  for (std::size_t s = 0; s < set.labels.size(); ++s) {
    if (set.labels[s] == label) members.push_back(s);
  }
  return members;
}

std::vector<double> resample(const double* series, std::size_t n, std::size_t d,
                             std::size_t L) {
  std::vector<double> out(L * d);
  for (std::size_t t = 0; t < L; ++t) {
    const double position = L == 1 ? 0.5 * static_cast<double>(n - 1)
                                   : static_cast<double>(t) *
                                         static_cast<double>(n - 1) /
                                         static_cast<double>(L - 1);
    const std::size_t below =
        std::min(static_cast<std::size_t>(position), n - 1);
    const std::size_t above = std::min(below + 1, n - 1);
    const double frac = position - static_cast<double>(below);
    for (std::size_t k = 0; k < d; ++k) {
      out[t * d + k] =
          (1 - frac) * series[below * d + k] + frac * series[above * d + k];
    }
  }
  return out;
}

std::vector<double> mean_series(const SeriesSet& set, std::size_t L) {
  std::vector<double> mean(L * set.dims, 0.0);
  for (std::size_t s = 0; s < set.count; ++s) {
    const std::vector<double> r =
        resample(set.series(s), set.length, set.dims, L);
    for (std::size_t q = 0; q < mean.size(); ++q) {
      mean[q] += r[q] / static_cast<double>(set.count);
    }
  }
  return mean;
}

double adjusted_rand_index(const std::vector<std::int64_t>& a,
                           const std::vector<std::int64_t>& b) {
  if (a.size() != b.size()) {
    throw std::invalid_argument(
        "adjusted_rand_index: labellings differ in size");
  }
  if (a.size() < 2) return 1.0;  // no pairs to disagree on
  auto pairs = [](double count) { return count * (count - 1) / 2; };
  std::map<std::pair<std::int64_t, std::int64_t>, double> joint;
  std::map<std::int64_t, double> rows, cols;
  for (std::size_t i = 0; i < a.size(); ++i) {
    joint[{a[i], b[i]}] += 1;
    rows[a[i]] += 1;
    cols[b[i]] += 1;
  }
  double index = 0, row_pairs = 0, col_pairs = 0;
  for (const auto& [key, count] : joint) index += pairs(count);
  for (const auto& [key, count] : rows) row_pairs += pairs(count);
  for (const auto& [key, count] : cols) col_pairs += pairs(count);
  const double expected = row_pairs * col_pairs / pairs(double(a.size()));
  const double best = (row_pairs + col_pairs) / 2;
  if (best == expected) return 1.0;  // both trivial in the same way
  return (index - expected) / (best - expected);
}

}  // namespace softwave::cli
