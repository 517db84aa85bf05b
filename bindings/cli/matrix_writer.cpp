#include "matrix_writer.hpp"

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace softwave::cli {
namespace {

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool little_endian() {
  const std::uint16_t probe = 1;
  unsigned char first = 0;
  std::memcpy(&first, &probe, 1);
  return first == 1;
}

}  // namespace

std::optional<MatrixFormat> matrix_format_from_path(const std::string& path) {
  if (ends_with(path, ".csv")) return MatrixFormat::csv;
  if (ends_with(path, ".npy")) return MatrixFormat::npy;
  return std::nullopt;
}

std::string npy_header(const std::string& descr,
                       const std::vector<std::size_t>& shape) {
  std::string dims;
  for (std::size_t r = 0; r < shape.size(); ++r) {
    dims += (r ? ", " : "") + std::to_string(shape[r]);
  }
  if (shape.size() == 1) dims += ",";  // a Python 1-tuple
  std::string dict = "{'descr': " + descr +
                     ", 'fortran_order': False, 'shape': (" + dims + "), }";
  // magic (6) + version (2) + little-endian uint16 dict length (2) + dict,
  // the dict padded with spaces and ended by '\n'.
  constexpr std::size_t prefix = 10;
  const std::size_t total = (prefix + dict.size() + 1 + 63) / 64 * 64;
  dict.append(total - prefix - dict.size() - 1, ' ');
  dict.push_back('\n');
  const std::size_t length = dict.size();
  std::string header("\x93NUMPY\x01\x00", 8);
  header.push_back(static_cast<char>(length & 0xff));
  header.push_back(static_cast<char>((length >> 8) & 0xff));
  return header + dict;
}

template <class T>
std::string npy_type() {
  static_assert(sizeof(T) == 4 || sizeof(T) == 8);
  const char* type = std::is_integral_v<T> ? "i8"
                     : sizeof(T) == 4      ? "f4"
                                           : "f8";
  return std::string(little_endian() ? "<" : ">") + type;
}

template <class T>
std::string npy_header(const std::vector<std::size_t>& shape) {
  return npy_header("'" + npy_type<T>() + "'", shape);
}

template <class T>
void write_neighbours(std::FILE* out, const std::string& name,
                      MatrixFormat format, std::size_t rows, std::size_t k,
                      const std::int64_t* indices, const T* distances) {
  if (format == MatrixFormat::npy) {
    const std::string header =
        npy_header("[('index', '" + npy_type<std::int64_t>() +
                       "'), ('distance', '" + npy_type<T>() + "')]",
                   {rows, k});
    std::fwrite(header.data(), 1, header.size(), out);
    // numpy packs the fields of a record: no padding between or after them.
    constexpr std::size_t record = sizeof(std::int64_t) + sizeof(T);
    std::vector<char> row(k * record);
    for (std::size_t q = 0; q < rows; ++q) {
      for (std::size_t r = 0; r < k; ++r) {
        std::memcpy(&row[r * record], &indices[q * k + r],
                    sizeof(std::int64_t));
        std::memcpy(&row[r * record + sizeof(std::int64_t)],
                    &distances[q * k + r], sizeof(T));
      }
      std::fwrite(row.data(), 1, row.size(), out);
    }
  } else {
    const char* number = sizeof(T) == sizeof(float) ? "%.9g" : "%.17g";
    for (std::size_t q = 0; q < rows; ++q) {
      for (std::size_t r = 0; r < k; ++r)
        std::fprintf(out, "%s%lld", r ? "," : "",
                     static_cast<long long>(indices[q * k + r]));
      for (std::size_t r = 0; r < k; ++r) {
        std::fputc(',', out);
        std::fprintf(out, number, static_cast<double>(distances[q * k + r]));
      }
      std::fputc('\n', out);
    }
  }
  std::fflush(out);
  if (std::ferror(out)) {
    throw output_error(name + ": write failed: " + std::strerror(errno));
  }
}

template <class T>
MatrixWriter<T>::MatrixWriter(std::FILE* out, std::string name,
                              MatrixFormat format, std::size_t rows,
                              std::size_t cols,
                              std::vector<std::size_t> npy_shape)
    : out_(out),
      name_(std::move(name)),
      format_(format),
      rows_(rows),
      cols_(cols) {
  if (format_ == MatrixFormat::npy) {
    if (npy_shape.empty()) npy_shape = {rows, cols};
    const std::string header = npy_header<T>(npy_shape);
    std::fwrite(header.data(), 1, header.size(), out_);
    check();
  }
}

template <class T>
void MatrixWriter<T>::write_rows(const T* data, std::size_t rows) {
  if (format_ == MatrixFormat::npy) {
    std::fwrite(data, sizeof(T), rows * cols_, out_);
  } else {
    const char* format = sizeof(T) == sizeof(float) ? "%.9g" : "%.17g";
    for (std::size_t i = 0; i < rows; ++i) {
      for (std::size_t j = 0; j < cols_; ++j) {
        if (j > 0) std::fputc(',', out_);
        if constexpr (std::is_integral_v<T>) {
          std::fprintf(out_, "%lld",
                       static_cast<long long>(data[i * cols_ + j]));
        } else {
          std::fprintf(out_, format, static_cast<double>(data[i * cols_ + j]));
        }
      }
      std::fputc('\n', out_);
    }
  }
  written_ += rows;
  check();
}

template <class T>
void MatrixWriter<T>::finish() {
  if (written_ != rows_) {
    throw output_error(name_ + ": wrote " + std::to_string(written_) + " of " +
                       std::to_string(rows_) + " rows");
  }
  std::fflush(out_);
  check();
}

template <class T>
void MatrixWriter<T>::check() const {
  if (std::ferror(out_)) {
    throw output_error(name_ + ": write failed: " + std::strerror(errno));
  }
}

template std::string npy_header<float>(const std::vector<std::size_t>&);
template std::string npy_header<double>(const std::vector<std::size_t>&);
template std::string npy_header<std::int64_t>(const std::vector<std::size_t>&);
template void write_neighbours<float>(std::FILE*, const std::string&,
                                      MatrixFormat, std::size_t, std::size_t,
                                      const std::int64_t*, const float*);
template void write_neighbours<double>(std::FILE*, const std::string&,
                                       MatrixFormat, std::size_t, std::size_t,
                                       const std::int64_t*, const double*);
template class MatrixWriter<float>;
template class MatrixWriter<double>;
template class MatrixWriter<std::int64_t>;

}  // namespace softwave::cli
