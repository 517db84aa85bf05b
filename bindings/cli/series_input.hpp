#pragma once
// Where a command's series come from: a UCR-style text file (labels in its
// first column unless --no-labels) or a NumPy .npy file, whose labels, if
// any, come from a companion 1-D .npy given by a --*-labels option.

#include <optional>
#include <string>
#include <vector>

#include "command_line.hpp"
#include "ucr_reader.hpp"

namespace softwave::cli {

bool is_npy_path(const std::string& path);

// Help lines on the input formats, shared by the commands' --help.
const char* series_files_help();

// `labels` applies to text files. `labels_path` (the value of option
// `labels_option`) is allowed for .npy input only: a usage_error otherwise.
// A label count that differs from the series count is an input_error naming
// the labels file.
SeriesSet read_series_input(const std::string& path, Labels labels,
                            const std::optional<std::string>& labels_path,
                            const std::string& labels_option,
                            const ReadLimit& limit = {});

// read_series_input for a command that needs labels: a .npy without
// `labels_path` is a usage_error naming `labels_option`.
SeriesSet read_labelled_input(const std::string& path,
                              const std::optional<std::string>& labels_path,
                              const std::string& labels_option,
                              const ReadLimit& limit = {});

// --x FILE, --no-labels (text) and --labels FILE (.npy): one input whose
// labels are optional, as barycenter and cluster take it.
std::vector<OptionSpec> x_input_specs();
SeriesSet read_x_input(const ParsedOptions& parsed,
                       const ReadLimit& limit = {});

// usage_error when the two inputs' series have different feature counts d.
void check_same_dims(const SeriesSet& a, const std::string& a_option,
                     const SeriesSet& b, const std::string& b_option);

}  // namespace softwave::cli
