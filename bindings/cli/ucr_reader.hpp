#pragma once
// Reader for UCR-style series files: one series per line, an integer class
// label first (unless the file has none), then the values; fields separated
// by tabs, commas or spaces.

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace softwave::cli {

// A bad input file. what() is "FILE:LINE: reason" (or "FILE: reason" when no
// line applies, e.g. the file cannot be opened).
class input_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Equal-length series of `dims` features, row-major:
// values[(s * length + t) * dims + k]. Text files hold dims = 1.
struct SeriesSet {
  std::vector<std::int64_t> labels;  // empty when read without labels
  std::vector<double> values;
  std::size_t count = 0;
  std::size_t length = 0;
  std::size_t dims = 1;

  std::size_t series_size() const { return length * dims; }
  const double* series(std::size_t s) const {
    return values.data() + s * series_size();
  }
};

enum class Labels { first_column, none };

// Parses the text of a file; `name` only appears in error messages.
// Rules: CRLF tolerated; trailing whitespace and trailing blank lines ignored;
// a blank line followed by more data, a row whose length differs from the
// first row, a field that is not a number, NaN/inf, a missing value (two
// commas in a row) or a non-integer label is an input_error naming the line.
SeriesSet parse_series(std::string_view text, const std::string& name,
                       Labels labels);

// The most bytes an input file may hold (what parsing it would need is of
// the same order), and how a message names that limit.
struct ReadLimit {
  std::uint64_t bytes = UINT64_MAX;
  std::string name;  // e.g. "--max-memory 2G"
};

// The whole file, or input_error "PATH: cannot open: ..." / "cannot read",
// or, for a file (or a device such as /dev/zero) longer than the limit,
// an input_error naming the limit once that much has been read.
std::string read_file_bytes(const std::string& path,
                            const ReadLimit& limit = {});

// Reads and parses a file; a missing, unreadable or empty file is an
// input_error too.
SeriesSet read_series_file(const std::string& path, Labels labels,
                           const ReadLimit& limit = {});

}  // namespace softwave::cli
