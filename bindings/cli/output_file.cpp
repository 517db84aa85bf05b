#include "output_file.hpp"

#include <cerrno>
#include <cstring>
#include <utility>

#include "command_line.hpp"

namespace softwave::cli {

MatrixFormat output_format(const std::string& option, const std::string& path) {
  const std::optional<MatrixFormat> format = matrix_format_from_path(path);
  if (!format) {
    throw usage_error("option " + option + ": '" + path +
                      "' must end in .csv or .npy");
  }
  return *format;
}

OutputFile::OutputFile(const std::string& option, std::string path)
    : path_(std::move(path)), format_(output_format(option, path_)) {
  file_ = std::fopen(path_.c_str(), "wb");
  if (file_ == nullptr) {
    throw usage_error("option " + option + ": cannot open '" + path_ +
                      "' for writing: " + std::strerror(errno));
  }
}

OutputFile::~OutputFile() {
  if (file_ == nullptr) return;
  std::fclose(file_);
  std::remove(path_.c_str());
}

void OutputFile::close() {
  std::FILE* const file = std::exchange(file_, nullptr);
  if (std::fclose(file) != 0) {
    std::remove(path_.c_str());
    throw output_error(path_ + ": write failed: " + std::strerror(errno));
  }
}

}  // namespace softwave::cli
