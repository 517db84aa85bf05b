#include "distance_blocks.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "device_series.hpp"

namespace softwave::cli {

std::size_t rows_per_block(std::size_t y_count) {
  constexpr std::size_t pairs_per_call = 16384;
  const std::size_t y = std::max<std::size_t>(y_count, 1);
  const std::size_t rows = (pairs_per_call + y - 1) / y;
  return std::clamp<std::size_t>(rows, 32, 256);
}

namespace {

std::string short_number(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", value);
  return text;
}

}  // namespace

template <class T>
void check_finite_block(const T* values, std::size_t first, std::size_t rows,
                        std::size_t columns, const SoftDTWOptions& options,
                        const std::string& x_name, const std::string& y_name,
                        const std::int64_t* column_of) {
  for (std::size_t q = 0; q < rows * columns; ++q) {
    if (std::isfinite(values[q])) continue;
    const bool float32 = sizeof(T) == sizeof(float);
    const std::size_t column =
        column_of ? std::size_t(column_of[q]) : q % columns;
    throw input_error(
        "series " + std::to_string(first + q / columns + 1) + " of " + x_name +
        " and series " + std::to_string(column + 1) + " of " + y_name +
        ": the Soft-DTW value overflows " + (float32 ? "float32" : "float64") +
        " at --gamma " + short_number(options.gamma) + " (" +
        (float32 ? "use --dtype float64, " : "") +
        "rescale the data or lower --gamma)");
  }
}

namespace {

// softwave::pairwise's workspace for `pairs` pairs of x and y series: it
// streams pairs in chunks of at most 256 MiB of workspace, or one pair's
// where that is more.
double chunked_workspace(const SeriesSet& x, const SeriesSet& y,
                         const SoftDTWOptions& options, std::size_t pairs) {
  const Space space;
  auto workspace = [&](std::int64_t count) {
    return double(softwave::workspace_bytes(
        space, count, std::int64_t(x.length), std::int64_t(y.length), options));
  };
  return std::max(workspace(1), std::min(256.0 * 1024 * 1024,
                                         workspace(std::int64_t(pairs))));
}

}  // namespace

template <class T>
std::vector<MemoryPart> pairwise_memory(const SeriesSet& x, const SeriesSet& y,
                                        const SoftDTWOptions& options) {
  const double read =
      8.0 * double(x.values.size() + (&x == &y ? 0 : y.values.size()));
  const double on_device =
      double(sizeof(T)) * double(x.values.size() + y.values.size());
  const std::size_t block = std::min(rows_per_block(y.count), x.count);
  const double blocks = 2.0 * double(sizeof(T)) * double(block * y.count);
  return {{"series read", read},
          {"series in the execution space", on_device},
          {"result rows", blocks},
          {"Soft-DTW workspace",
           chunked_workspace(x, y, options, block * y.count)}};
}

template <class T>
std::vector<MemoryPart> pairwise_upper_memory(const SeriesSet& x,
                                              const SoftDTWOptions& options) {
  const std::size_t block = std::min(upper_rows_per_block, x.count);
  // The block in the execution space, its host copy and its rows assembled.
  const double blocks = 3.0 * double(sizeof(T)) * double(block * x.count);
  return {{"series read", 8.0 * double(x.values.size())},
          {"series in the execution space",
           double(sizeof(T)) * double(x.values.size())},
          {"result rows", blocks},
          {"Soft-DTW workspace",
           chunked_workspace(x, x, options, block * x.count)}};
}

template <class T>
void pairwise_in_blocks(const SeriesSet& x, const SeriesSet& y,
                        const SoftDTWOptions& checked_options,
                        PairwiseValue what, const std::string& x_name,
                        const std::string& y_name, const RowRange& rows,
                        const BlockHandler<T>& on_block) {
  SoftDTWOptions options = checked_options;
  options.check_values = false;
  const Space space;
  const auto x_device = to_device<T>(space, x, "softwave::cli::x");
  const auto y_device = to_device<T>(space, y, "softwave::cli::y");
  const std::size_t block = std::min(rows_per_block(y.count), x.count);
  ArrayView2<T, Space> matrix(
      Kokkos::view_alloc(space, Kokkos::WithoutInitializing,
                         std::string("softwave::cli::matrix")),
      block, y.count);
  auto matrix_host = Kokkos::create_mirror_view(matrix);
  const std::size_t end = rows.first + rows.count;
  for (std::size_t first = rows.first; first < end; first += block) {
    const std::size_t count = std::min(block, end - first);
    const auto row_range = std::make_pair(first, first + count);
    const auto used = std::make_pair(std::size_t{0}, count);
    const auto x_block =
        Kokkos::subview(x_device, row_range, Kokkos::ALL, Kokkos::ALL);
    const auto matrix_block = Kokkos::subview(matrix, used, Kokkos::ALL);
    softwave::pairwise(space, x_block, y_device, matrix_block, options, what);
    Kokkos::deep_copy(space, Kokkos::subview(matrix_host, used, Kokkos::ALL),
                      matrix_block);
    space.fence();
    check_finite_block(matrix_host.data(), first, count, y.count, options,
                       x_name, y_name);
    on_block(first, count, matrix_host.data());
  }
}

template <class T>
void pairwise_upper_in_blocks(const SeriesSet& x,
                              const SoftDTWOptions& checked_options,
                              PairwiseValue what, const std::string& x_name,
                              const RowRange& rows,
                              const BlockHandler<T>& on_block) {
  SoftDTWOptions options = checked_options;
  options.check_values = false;
  const Space space;
  const auto x_device = to_device<T>(space, x, "softwave::cli::x");
  const std::size_t columns = x.count;
  const std::size_t block = std::min(upper_rows_per_block, x.count);
  // A block's square (count × count), then its rows against the later
  // series (count × later), each row-major.
  Kokkos::View<T*, Space::memory_space> values(
      Kokkos::view_alloc(space, Kokkos::WithoutInitializing,
                         std::string("softwave::cli::upper_rows")),
      block * columns);
  auto values_host = Kokkos::create_mirror_view(values);
  std::vector<T> assembled(block * columns);
  std::vector<std::int64_t> column_of;
  const std::size_t end = rows.first + rows.count;
  for (std::size_t first = rows.first; first < end; first += block) {
    const std::size_t count = std::min(block, end - first);
    const std::size_t later_first = first + count;
    const std::size_t later = columns - later_first;
    const auto x_block = Kokkos::subview(
        x_device, std::make_pair(first, later_first), Kokkos::ALL, Kokkos::ALL);
    // The same view on both sides: the library walks each pair once.
    softwave::pairwise(space, x_block, x_block,
                       ArrayView2<T, Space>(values.data(), count, count),
                       options, what);
    if (later > 0) {
      const auto x_later =
          Kokkos::subview(x_device, std::make_pair(later_first, columns),
                          Kokkos::ALL, Kokkos::ALL);
      softwave::pairwise(
          space, x_block, x_later,
          ArrayView2<T, Space>(values.data() + count * count, count, later),
          options, what);
    }
    const auto used = std::make_pair(std::size_t{0}, count * (count + later));
    Kokkos::deep_copy(space, Kokkos::subview(values_host, used),
                      Kokkos::subview(values, used));
    space.fence();
    const T* square = values_host.data();
    const T* rest = square + count * count;
    column_of.resize(columns - first);
    for (std::size_t c = 0; c < column_of.size(); ++c)
      column_of[c] = std::int64_t(first + c);
    for (std::size_t q = 0; q < count; ++q) {
      T* row = assembled.data() + q * columns + first;
      std::copy(square + q * count, square + (q + 1) * count, row);
      std::copy(rest + q * later, rest + (q + 1) * later, row + count);
      check_finite_block(row, first + q, 1, columns - first, options, x_name,
                         x_name, column_of.data());
    }
    on_block(first, count, assembled.data());
  }
}

template void check_finite_block<float>(const float*, std::size_t, std::size_t,
                                        std::size_t, const SoftDTWOptions&,
                                        const std::string&, const std::string&,
                                        const std::int64_t*);
template void check_finite_block<double>(const double*, std::size_t,
                                         std::size_t, std::size_t,
                                         const SoftDTWOptions&,
                                         const std::string&, const std::string&,
                                         const std::int64_t*);
template std::vector<MemoryPart> pairwise_memory<float>(const SeriesSet&,
                                                        const SeriesSet&,
                                                        const SoftDTWOptions&);
template std::vector<MemoryPart> pairwise_memory<double>(const SeriesSet&,
                                                         const SeriesSet&,
                                                         const SoftDTWOptions&);
template std::vector<MemoryPart> pairwise_upper_memory<float>(
    const SeriesSet&, const SoftDTWOptions&);
template std::vector<MemoryPart> pairwise_upper_memory<double>(
    const SeriesSet&, const SoftDTWOptions&);
template void pairwise_upper_in_blocks<float>(const SeriesSet&,
                                              const SoftDTWOptions&,
                                              PairwiseValue, const std::string&,
                                              const RowRange&,
                                              const BlockHandler<float>&);
template void pairwise_upper_in_blocks<double>(
    const SeriesSet&, const SoftDTWOptions&, PairwiseValue, const std::string&,
    const RowRange&, const BlockHandler<double>&);
template void pairwise_in_blocks<float>(const SeriesSet&, const SeriesSet&,
                                        const SoftDTWOptions&, PairwiseValue,
                                        const std::string&, const std::string&,
                                        const RowRange&,
                                        const BlockHandler<float>&);
template void pairwise_in_blocks<double>(const SeriesSet&, const SeriesSet&,
                                         const SoftDTWOptions&, PairwiseValue,
                                         const std::string&, const std::string&,
                                         const RowRange&,
                                         const BlockHandler<double>&);

}  // namespace softwave::cli
