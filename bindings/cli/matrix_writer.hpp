#pragma once
// Streams a row-major rows×cols matrix of float, double or int64, block of
// rows by block of rows, as CSV (full precision) or as a NumPy .npy file
// (format version 1.0), so a large matrix never has to be held whole.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace softwave::cli {

// Writing an output failed (disk full, no permission, ...).
class output_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class MatrixFormat { csv, npy };

// .csv or .npy by the path's extension; nothing for any other extension.
std::optional<MatrixFormat> matrix_format_from_path(const std::string& path);

// The .npy header of a C-order array of T of the given shape, magic string
// included; its size is a multiple of 64 bytes, so the data start aligned.
template <class T>
std::string npy_header(const std::vector<std::size_t>& shape);
template <class T>
std::string npy_header(std::size_t rows, std::size_t cols) {
  return npy_header<T>(std::vector<std::size_t>{rows, cols});
}

// The neighbours of `rows` queries, k each (row-major, nearest first): a
// .npy of records (index int64, distance T), shape (rows, k), or CSV lines
// of the k indices then the k distances. output_error if writing fails.
template <class T>
void write_neighbours(std::FILE* out, const std::string& name,
                      MatrixFormat format, std::size_t rows, std::size_t k,
                      const std::int64_t* indices, const T* distances);

template <class T>
class MatrixWriter {
 public:
  // Writes the header (npy) at once. `out` stays the caller's; `name` only
  // appears in error messages. `npy_shape` (empty: (rows, cols)) is the
  // shape the .npy records, e.g. (rows,) for a column of labels or
  // (rows, L, d) for series; its entries multiply to rows·cols.
  MatrixWriter(std::FILE* out, std::string name, MatrixFormat format,
               std::size_t rows, std::size_t cols,
               std::vector<std::size_t> npy_shape = {});

  // The next `rows` rows, row-major. CSV prints one line per row, values
  // separated by ',', with enough digits to read back the same value
  // (%.9g for float, %.17g for double, integers as they are).
  void write_rows(const T* data, std::size_t rows);

  // Flushes and throws output_error if anything failed or rows are missing.
  void finish();

 private:
  void check() const;

  std::FILE* out_;
  std::string name_;
  MatrixFormat format_;
  std::size_t rows_, cols_, written_ = 0;
};

}  // namespace softwave::cli
