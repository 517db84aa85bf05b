#include "ucr_reader.hpp"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <system_error>

#include "number_text.hpp"

namespace softwave::cli {
namespace {

bool is_blank(char c) { return c == ' ' || c == '\t'; }

// Keeps error messages one short line whatever the file holds.
std::string quoted(std::string_view token) {
  constexpr std::size_t max_shown = 32;
  std::string shown(token.substr(0, max_shown));
  for (char& c : shown) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  }
  if (token.size() > max_shown) shown += "...";
  return "'" + shown + "'";
}

class LineParser {
 public:
  LineParser(const std::string& file, std::size_t line)
      : file_(file), line_(line) {}

  [[noreturn]] void fail(const std::string& what) const {
    throw input_error(file_ + ":" + std::to_string(line_) + ": " + what);
  }

  // Splits on ',' (one separator, so ",," is a missing value) and on runs of
  // tabs/spaces; calls on_field(token, 1-based field number).
  template <class OnField>
  void split(std::string_view text, OnField&& on_field) const {
    std::size_t pos = 0, field = 0;
    auto skip_blanks = [&] {
      while (pos < text.size() && is_blank(text[pos])) ++pos;
    };
    skip_blanks();
    while (pos < text.size()) {
      ++field;
      const std::size_t begin = pos;
      while (pos < text.size() && text[pos] != ',' && !is_blank(text[pos])) {
        ++pos;
      }
      if (pos == begin) fail("field " + std::to_string(field) + " is empty");
      on_field(text.substr(begin, pos - begin), field);
      skip_blanks();
      if (pos < text.size() && text[pos] == ',') {
        ++pos;
        skip_blanks();
        if (pos == text.size()) {
          fail("field " + std::to_string(field + 1) +
               " is empty (trailing comma)");
        }
      }
    }
  }

  double number(std::string_view token, std::size_t field) const {
    double value = 0;
    const NumberRead read = read_double(token, value);
    const std::string where = "field " + std::to_string(field) + ": ";
    if (read != NumberRead::ok) {
      fail(where + quoted(token) + " " + number_problem(read, false));
    }
    if (!std::isfinite(value)) {
      fail(where + quoted(token) + " is not a finite number");
    }
    return value;
  }

  // An integer label, read exactly; one written as a number with a point
  // or an exponent ("1.0", "2e3") must be an integer below 2^53, where a
  // double is surely the integer written (from 2^53 on, it may be rounded).
  std::int64_t label(std::string_view token) const {
    std::int64_t exact = 0;
    const NumberRead read = read_integer(token, exact);
    if (read == NumberRead::ok) return exact;
    if (read != NumberRead::not_a_number) {
      fail("label " + quoted(token) + " " + number_problem(read, true));
    }
    const double value = number(token, 1);
    constexpr double max_exact = 9007199254740992.0;  // 2^53
    if (value != std::floor(value)) {
      fail("label " + quoted(token) +
           " is not an integer (a file without labels needs --no-labels)");
    }
    if (std::fabs(value) >= max_exact) {
      fail("label " + quoted(token) +
           " is 2^53 or beyond written as a decimal number, which cannot "
           "tell neighbouring integers apart: write it as an integer");
    }
    return static_cast<std::int64_t>(value);
  }

 private:
  const std::string& file_;
  std::size_t line_;
};

std::string_view trim_end(std::string_view text) {
  while (!text.empty() && (is_blank(text.back()) || text.back() == '\r')) {
    text.remove_suffix(1);
  }
  return text;
}

}  // namespace

SeriesSet parse_series(std::string_view text, const std::string& name,
                       Labels labels) {
  SeriesSet set;
  std::size_t line_number = 0;
  std::size_t blank_line = 0;  // first blank line after data, if any
  std::size_t values_in_row = 0;
  while (!text.empty()) {
    const std::size_t newline = text.find('\n');
    std::string_view line = trim_end(text.substr(0, newline));
    text.remove_prefix(newline == std::string_view::npos ? text.size()
                                                         : newline + 1);
    ++line_number;
    const LineParser parser(name, line_number);
    std::size_t first_blank = 0;
    while (first_blank < line.size() && is_blank(line[first_blank])) {
      ++first_blank;
    }
    if (first_blank == line.size()) {
      if (blank_line == 0) blank_line = line_number;
      continue;
    }
    if (blank_line != 0) {
      LineParser(name, blank_line).fail("blank line before more series");
    }
    values_in_row = 0;
    parser.split(line, [&](std::string_view token, std::size_t field) {
      if (field == 1 && labels == Labels::first_column) {
        set.labels.push_back(parser.label(token));
      } else {
        set.values.push_back(parser.number(token, field));
        ++values_in_row;
      }
    });
    if (values_in_row == 0) parser.fail("no values after the label");
    if (set.count == 0) {
      set.length = values_in_row;
    } else if (values_in_row != set.length) {
      parser.fail("ragged rows: " + std::to_string(values_in_row) +
                  " values, but the first series has " +
                  std::to_string(set.length));
    }
    ++set.count;
  }
  if (set.count == 0) {
    LineParser(name, 1).fail("no series (the file is empty)");
  }
  return set;
}

std::string read_file_bytes(const std::string& path, const ReadLimit& limit) {
  struct Closer {
    void operator()(std::FILE* file) const { std::fclose(file); }
  };
  const std::unique_ptr<std::FILE, Closer> file(std::fopen(path.c_str(), "rb"));
  if (!file) {
    throw input_error(path + ": cannot open: " + std::strerror(errno));
  }
  std::string bytes;
  char buffer[1 << 16];
  std::size_t got = 0;
  while ((got = std::fread(buffer, 1, sizeof buffer, file.get())) > 0) {
    if (bytes.size() + got > limit.bytes) {
      throw input_error(path + ": more than " + std::to_string(limit.bytes) +
                        " bytes, the memory limit (" + limit.name + ")");
    }
    bytes.append(buffer, got);
  }
  if (std::ferror(file.get())) {
    throw input_error(path + ": cannot read: " + std::strerror(errno));
  }
  return bytes;
}

SeriesSet read_series_file(const std::string& path, Labels labels,
                           const ReadLimit& limit) {
  return parse_series(read_file_bytes(path, limit), path, labels);
}

}  // namespace softwave::cli
