#pragma once
// Reader for NumPy .npy files (format versions 1.0, 2.0 and 3.0): series as
// a float32/float64 array of shape (n, length) or (n, length, d), and class
// labels as a 1-D integer or integral float array. Little-endian, C order.
// Every problem is an input_error "FILE: what".

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ucr_reader.hpp"

namespace softwave::cli {

// One array as stored: shape, element type and the raw little-endian data.
struct NpyArray {
  std::vector<std::size_t> shape;
  char kind = 'f';  // 'f' float, 'i' signed, 'u' unsigned integer
  std::size_t item_size = 8;
  std::string data;

  std::size_t size() const;           // number of elements
  double element(std::size_t) const;  // converted to double
  // An integer element ('i' or 'u') exactly; false for an unsigned one
  // beyond int64 (`bits` holds it either way).
  bool integer_element(std::size_t q, std::int64_t& value,
                       std::uint64_t& bits) const;
};

// Parses the bytes of a .npy file; `name` only appears in error messages.
NpyArray parse_npy(std::string_view bytes, const std::string& name);

// Series from the bytes of a .npy file: float32/float64, 2-D or 3-D, no
// empty dimension, finite values. No labels.
SeriesSet parse_npy_series(std::string_view bytes, const std::string& name);

// Labels from the bytes of a .npy file: 1-D, integer or float holding
// integers.
std::vector<std::int64_t> parse_npy_labels(std::string_view bytes,
                                           const std::string& name);

}  // namespace softwave::cli
