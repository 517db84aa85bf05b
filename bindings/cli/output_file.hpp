#pragma once
// An output file named by an option (-o, --centroids): its format from the
// extension, and its contents written to a temporary file beside it that
// replaces it (rename) only when the command has finished it. A run that
// fails, is interrupted or is killed leaves the previous file as it was:
// the temporary file has no name until close() (O_TMPFILE), or, on file
// systems without that, is removed on failure and on SIGINT, SIGTERM and
// SIGHUP.

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
  // the file's directory cannot take a new file. `shared`: the temporary
  // file has a name (temporary_path()) from the start, so that other
  // processes (the ranks of an MPI job) can open it and write their parts.
  OutputFile(const std::string& option, std::string path, bool shared = false);
  ~OutputFile();  // discards the contents unless close() succeeded
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  std::FILE* get() const { return file_; }
  const std::string& path() const { return path_; }
  const std::string& temporary_path() const { return temporary_; }
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

  // Flushes the contents to disk and puts them in place of the target;
  // output_error if any step fails (the target is then untouched).
  void close();

 private:
  void discard();

  std::string path_;       // as the user wrote it, for messages
  std::string target_;     // the file replaced: symbolic links followed
  std::string temporary_;  // named temporary file; empty with O_TMPFILE
  MatrixFormat format_;
  int descriptor_ = -1;
  std::FILE* file_ = nullptr;
  int mode_ = 0666;  // the target's permissions, or 0666 less the umask
};

// The format of `path` for `option`, or usage_error.
MatrixFormat output_format(const std::string& option, const std::string& path);

// usage_error when two outputs name the same file (the same path, or the
// same file through links), which would leave only the last one written.
void check_distinct_outputs(const std::string& option_a,
                            const std::string& path_a,
                            const std::string& option_b,
                            const std::string& path_b);

}  // namespace softwave::cli
