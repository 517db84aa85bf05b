#pragma once
// An output file named by an option (-o, --centroids): its format from the
// extension, opened before any work starts so a bad path fails fast, and
// removed again unless the command finishes it, so no half-written results
// are left behind.

#include <cstddef>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "matrix_writer.hpp"

namespace softwave::cli {

class OutputFile {
 public:
  // usage_error naming `option` when the extension is not .csv or .npy or
  // the file cannot be opened.
  OutputFile(const std::string& option, std::string path);
  ~OutputFile();  // removes the file unless close() succeeded
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  std::FILE* get() const { return file_; }
  const std::string& path() const { return path_; }
  MatrixFormat format() const { return format_; }

  // The whole rows×cols matrix (see MatrixWriter for npy_shape).
  template <class T>
  void write(const T* data, std::size_t rows, std::size_t cols,
             std::vector<std::size_t> npy_shape = {}) {
    MatrixWriter<T> writer(file_, path_, format_, rows, cols,
                           std::move(npy_shape));
    writer.write_rows(data, rows);
    writer.finish();
  }

  // Values computed in double, written as float32 or float64.
  void write_values(const std::vector<double>& values, bool float32,
                    std::size_t rows, std::size_t cols,
                    std::vector<std::size_t> npy_shape = {}) {
    if (float32) {
      const std::vector<float> narrow(values.begin(), values.end());
      write(narrow.data(), rows, cols, std::move(npy_shape));
    } else {
      write(values.data(), rows, cols, std::move(npy_shape));
    }
  }

  // Closes the file; output_error if that fails.
  void close();

 private:
  std::string path_;
  MatrixFormat format_;
  std::FILE* file_ = nullptr;
};

// The format of `path` for `option`, or usage_error.
MatrixFormat output_format(const std::string& option, const std::string& path);

}  // namespace softwave::cli
