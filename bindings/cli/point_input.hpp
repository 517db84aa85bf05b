#pragma once
// Point sets and weights for the optimal-transport commands (sinkhorn, gw).

#include <cstddef>
#include <string>
#include <vector>

#include "ucr_reader.hpp"

namespace softwave::cli {

// Points (N, d): rows of a text file (no labels) or a 2-D .npy. `option`
// names the argument in errors.
SeriesSet read_points(const std::string& option, const std::string& path);

// Weights: a text file with one number per row, or a .npy of n numbers.
std::vector<double> read_weights(const std::string& option,
                                 const std::string& path, std::size_t n);

}  // namespace softwave::cli
