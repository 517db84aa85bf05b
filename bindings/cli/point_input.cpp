// Point sets and weights for the optimal-transport commands.

#include "point_input.hpp"

#include "command_line.hpp"
#include "npy_reader.hpp"
#include "series_input.hpp"

namespace softwave::cli {

// Weights: a text file with one number per row, or a .npy of n numbers.
std::vector<double> read_weights(const std::string& option,
                                 const std::string& path, std::size_t n) {
  std::vector<double> w;
  if (is_npy_path(path)) {
    NpyArray const a = parse_npy(read_file_bytes(path, {}), path);
    if (a.kind != 'f' && a.kind != 'i' && a.kind != 'u')
      throw input_error(path + ": weights must be numbers");
    for (std::size_t q = 0; q < a.size(); ++q) w.push_back(a.element(q));
  } else {
    SeriesSet const s =
        parse_series(read_file_bytes(path, {}), path, Labels::none);
    if (s.length != 1)
      throw input_error(path + ": weights must be one number per row (got " +
                        std::to_string(s.length) + ")");
    w = s.values;
  }
  if (w.size() != n)
    throw usage_error(option + " '" + path + "' holds " +
                      std::to_string(w.size()) + " weights for " +
                      std::to_string(n) + " points");
  return w;
}

// Points (N, d): rows of a text file (no labels) or a 2-D .npy.
SeriesSet read_points(const std::string& option, const std::string& path) {
  SeriesSet s = read_series_input(path, Labels::none, {}, option);
  if (s.dims != 1)
    throw usage_error(option + " '" + path +
                      "' must be 2-D (points, coordinates), got a 3-D array");
  return s;
}

}  // namespace softwave::cli
