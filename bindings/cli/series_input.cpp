#include "series_input.hpp"

#include "npy_reader.hpp"

namespace softwave::cli {

bool is_npy_path(const std::string& path) {
  return path.size() >= 4 && path.compare(path.size() - 4, 4, ".npy") == 0;
}

const char* series_files_help() {
  return "\n"
         "Input files: UCR-style text (one series per line, integer class "
         "label first\n"
         "unless --no-labels, values separated by tabs, commas or spaces) "
         "or NumPy\n"
         ".npy (float32 or float64, little-endian, C order, shape (n, "
         "length) or\n"
         "(n, length, d)). A .npy holds no labels: where a command uses "
         "them, a\n"
         "companion 1-D .npy of n integers (int or integral float) gives "
         "them.\n";
}

SeriesSet read_series_input(const std::string& path, Labels labels,
                            const std::optional<std::string>& labels_path,
                            const std::string& labels_option,
                            const ReadLimit& limit) {
  if (!is_npy_path(path)) {
    if (labels_path) {
      throw usage_error("option " + labels_option +
                        " is for .npy input only ('" + path +
                        "' is a text file, whose labels are its first "
                        "column)");
    }
    return read_series_file(path, labels, limit);
  }
  SeriesSet set = parse_npy_series(read_file_bytes(path, limit), path);
  if (labels_path) {
    set.labels =
        parse_npy_labels(read_file_bytes(*labels_path, limit), *labels_path);
    if (set.labels.size() != set.count) {
      throw input_error(*labels_path + ": " +
                        std::to_string(set.labels.size()) + " labels for " +
                        std::to_string(set.count) + " series in " + path);
    }
  }
  return set;
}

SeriesSet read_labelled_input(const std::string& path,
                              const std::optional<std::string>& labels_path,
                              const std::string& labels_option,
                              const ReadLimit& limit) {
  if (is_npy_path(path) && !labels_path) {
    throw usage_error("'" + path + "' holds no class labels (a .npy file " +
                      "has none): give them with " + labels_option +
                      " FILE.npy");
  }
  return read_series_input(path, Labels::first_column, labels_path,
                           labels_option, limit);
}

std::vector<OptionSpec> x_input_specs() {
  return {{"--x"}, {"--no-labels", false}, {"--labels"}};
}

SeriesSet read_x_input(const ParsedOptions& parsed, const ReadLimit& limit) {
  return read_series_input(
      parsed.required("--x"),
      parsed.has("--no-labels") ? Labels::none : Labels::first_column,
      parsed.text("--labels"), "--labels", limit);
}

void check_same_dims(const SeriesSet& a, const std::string& a_option,
                     const SeriesSet& b, const std::string& b_option) {
  if (a.dims != b.dims) {
    throw usage_error("options " + a_option + " and " + b_option +
                      ": series with different feature counts (d = " +
                      std::to_string(a.dims) + " and " +
                      std::to_string(b.dims) + ")");
  }
}

}  // namespace softwave::cli
