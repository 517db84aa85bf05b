#include "npy_reader.hpp"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <utility>

namespace softwave::cli {
namespace {

[[noreturn]] void fail(const std::string& name, const std::string& what) {
  throw input_error(name + ": " + what);
}

// Little-endian unsigned integer of `size` bytes at `p`, whatever the host.
std::uint64_t little_endian(const char* p, std::size_t size) {
  std::uint64_t value = 0;
  for (std::size_t b = size; b-- > 0;) {
    value = (value << 8) | static_cast<unsigned char>(p[b]);
  }
  return value;
}

std::string shape_text(const std::vector<std::size_t>& shape) {
  std::string text = "(";
  for (std::size_t r = 0; r < shape.size(); ++r) {
    text += (r ? ", " : "") + std::to_string(shape[r]);
  }
  return text + (shape.size() == 1 ? ",)" : ")");
}

// The header is a Python dict literal written by numpy, e.g.
// {'descr': '<f8', 'fortran_order': False, 'shape': (3, 4), }
// It must hold exactly the keys 'descr', 'fortran_order' and 'shape', each
// once: numpy itself refuses others, and of two equal keys Python keeps the
// last, so reading either one could disagree with numpy.
class HeaderParser {
 public:
  HeaderParser(std::string_view header, const std::string& name) : name_(name) {
    std::string_view rest = header;
    auto skip_blanks = [&] {
      while (!rest.empty() && (rest.front() == ' ' || rest.front() == '\n'))
        rest.remove_prefix(1);
    };
    skip_blanks();
    if (rest.empty() || rest.front() != '{') fail(name_, "bad .npy header");
    rest.remove_prefix(1);
    for (;;) {
      skip_blanks();
      if (!rest.empty() && rest.front() == '}') break;
      if (rest.empty() || rest.front() != '\'') {
        fail(name_, "bad .npy header: expected a quoted key");
      }
      const std::size_t close = rest.find('\'', 1);
      if (close == std::string_view::npos) fail(name_, "bad .npy header");
      const std::string key(rest.substr(1, close - 1));
      rest.remove_prefix(close + 1);
      skip_blanks();
      if (rest.empty() || rest.front() != ':') {
        fail(name_, "bad .npy header: no ':' after '" + key + "'");
      }
      rest.remove_prefix(1);
      skip_blanks();
      // A value ends at the first ',' or '}' outside quotes and brackets.
      std::size_t end = 0;
      int depth = 0;
      bool in_quotes = false;
      for (; end < rest.size(); ++end) {
        const char c = rest[end];
        if (c == '\'') in_quotes = !in_quotes;
        if (in_quotes) continue;
        if (c == '(' || c == '[') ++depth;
        if (c == ')' || c == ']') --depth;
        if (depth == 0 && (c == ',' || c == '}')) break;
      }
      if (end == rest.size()) fail(name_, "bad .npy header: unterminated");
      if (key != "descr" && key != "fortran_order" && key != "shape") {
        fail(name_, "bad .npy header: unknown key '" + key +
                        "' (only 'descr', 'fortran_order' and 'shape')");
      }
      for (const auto& entry : entries_) {
        if (entry.first == key) {
          fail(name_, "bad .npy header: key '" + key + "' appears twice");
        }
      }
      entries_.emplace_back(key, rest.substr(0, end));
      rest.remove_prefix(end);
      if (rest.front() == ',') rest.remove_prefix(1);
    }
  }

  // The text of the value of `key`, blanks skipped.
  std::string_view value_of(const char* key) const {
    for (const auto& entry : entries_) {
      if (entry.first == key) return entry.second;
    }
    fail(name_, std::string("bad .npy header: no '") + key + "' entry");
  }

  std::string descr() const {
    const std::string_view rest = value_of("descr");
    const std::size_t end = rest.find('\'', 1);
    if (rest.empty() || rest.front() != '\'' || end == std::string_view::npos) {
      fail(name_,
           "bad .npy header: 'descr' is not a simple type string "
           "(structured arrays are not supported)");
    }
    return std::string(rest.substr(1, end - 1));
  }

  bool fortran_order() const {
    const std::string_view rest = value_of("fortran_order");
    if (rest.substr(0, 4) == "True") return true;
    if (rest.substr(0, 5) == "False") return false;
    fail(name_, "bad .npy header: 'fortran_order' is neither True nor False");
  }

  std::vector<std::size_t> shape() const {
    std::string_view rest = value_of("shape");
    const std::size_t end = rest.find(')');
    if (rest.empty() || rest.front() != '(' || end == std::string_view::npos) {
      fail(name_, "bad .npy header: 'shape' is not a tuple");
    }
    rest = rest.substr(1, end - 1);
    std::vector<std::size_t> shape;
    while (!rest.empty()) {
      while (!rest.empty() && (rest.front() == ' ' || rest.front() == ',')) {
        rest.remove_prefix(1);
      }
      if (rest.empty()) break;
      std::size_t digits = 0;
      std::uint64_t value = 0;
      while (digits < rest.size() && rest[digits] >= '0' &&
             rest[digits] <= '9') {
        if (value > (std::numeric_limits<std::uint64_t>::max() - 9) / 10) {
          fail(name_, "bad .npy header: a dimension is too large");
        }
        value = value * 10 + static_cast<std::uint64_t>(rest[digits] - '0');
        ++digits;
      }
      if (digits == 0) {
        fail(name_, "bad .npy header: 'shape' holds a non-integer");
      }
      shape.push_back(static_cast<std::size_t>(value));
      rest.remove_prefix(digits);
    }
    return shape;
  }

 private:
  const std::string& name_;
  std::vector<std::pair<std::string, std::string_view>> entries_;
};

}  // namespace

std::size_t NpyArray::size() const {
  std::size_t n = 1;
  for (const std::size_t e : shape) n *= e;
  return n;
}

double NpyArray::element(std::size_t q) const {
  const std::uint64_t bits =
      little_endian(data.data() + q * item_size, item_size);
  if (kind == 'f') {
    if (item_size == 4) {
      float value = 0;
      const std::uint32_t narrow = static_cast<std::uint32_t>(bits);
      std::memcpy(&value, &narrow, 4);
      return value;
    }
    double value = 0;
    std::memcpy(&value, &bits, 8);
    return value;
  }
  if (kind == 'u') return static_cast<double>(bits);
  // Sign-extend a signed integer of item_size bytes.
  const unsigned shift = 64 - 8 * static_cast<unsigned>(item_size);
  return static_cast<double>(static_cast<std::int64_t>(bits << shift) >> shift);
}

bool NpyArray::integer_element(std::size_t q, std::int64_t& value,
                               std::uint64_t& bits) const {
  bits = little_endian(data.data() + q * item_size, item_size);
  if (kind == 'u') {
    if (bits > static_cast<std::uint64_t>(INT64_MAX)) return false;
    value = static_cast<std::int64_t>(bits);
    return true;
  }
  const unsigned shift = 64 - 8 * static_cast<unsigned>(item_size);
  value = static_cast<std::int64_t>(bits << shift) >> shift;
  return true;
}

NpyArray parse_npy(std::string_view bytes, const std::string& name) {
  static const std::string_view magic("\x93NUMPY", 6);
  if (bytes.size() < 10 || bytes.substr(0, 6) != magic) {
    fail(name, "not a NumPy .npy file (no \\x93NUMPY magic string)");
  }
  const int major = static_cast<unsigned char>(bytes[6]);
  if (major < 1 || major > 3) {
    fail(name, ".npy format version " + std::to_string(major) +
                   " is not supported (1.0 to 3.0 are)");
  }
  const std::size_t length_bytes = major == 1 ? 2 : 4;
  if (bytes.size() < 8 + length_bytes) fail(name, "truncated .npy header");
  const std::size_t header_length =
      static_cast<std::size_t>(little_endian(bytes.data() + 8, length_bytes));
  const std::size_t data_start = 8 + length_bytes + header_length;
  if (bytes.size() < data_start) fail(name, "truncated .npy header");
  const HeaderParser header(bytes.substr(8 + length_bytes, header_length),
                            name);

  NpyArray array;
  const std::string descr = header.descr();
  const bool known_kind =
      descr.size() >= 3 &&
      (descr[1] == 'f' || descr[1] == 'i' || descr[1] == 'u');
  if (!known_kind) {
    fail(name, "dtype '" + descr + "' is not supported (float or integer)");
  }
  if (descr[0] == '>') {
    fail(name, "dtype '" + descr +
                   "' is big-endian; only little-endian data is supported");
  }
  array.kind = descr[1];
  array.item_size = static_cast<std::size_t>(std::atoi(descr.c_str() + 2));
  const bool size_ok = array.kind == 'f'
                           ? (array.item_size == 4 || array.item_size == 8)
                           : (array.item_size == 1 || array.item_size == 2 ||
                              array.item_size == 4 || array.item_size == 8);
  if (!size_ok || (descr[0] != '<' && descr[0] != '|' && descr[0] != '=')) {
    fail(name, "dtype '" + descr + "' is not supported");
  }
  if (header.fortran_order()) {
    fail(name,
         "Fortran-order arrays are not supported (save a C-order array, "
         "e.g. np.save(path, np.ascontiguousarray(a)))");
  }
  array.shape = header.shape();
  std::size_t elements = 1;
  for (const std::size_t e : array.shape) {
    if (e != 0 && elements > std::numeric_limits<std::size_t>::max() / e /
                                 array.item_size) {
      fail(name, "shape " + shape_text(array.shape) + " is too large");
    }
    elements *= e;
  }
  const std::size_t expected = elements * array.item_size;
  const std::size_t got = bytes.size() - data_start;
  if (got < expected) {
    fail(name, "truncated: shape " + shape_text(array.shape) + " of '" + descr +
                   "' needs " + std::to_string(expected) +
                   " bytes of data, the file has " + std::to_string(got));
  }
  if (got > expected) {
    fail(name, std::to_string(got - expected) +
                   " unexpected bytes after the array data");
  }
  array.data = std::string(bytes.substr(data_start));
  return array;
}

SeriesSet parse_npy_series(std::string_view bytes, const std::string& name) {
  const NpyArray array = parse_npy(bytes, name);
  if (array.kind != 'f') {
    fail(name, "series must be float32 or float64, not an integer array");
  }
  if (array.shape.size() != 2 && array.shape.size() != 3) {
    fail(name,
         "series must be a 2-D (n, length) or 3-D (n, length, d) "
         "array, got shape " +
             shape_text(array.shape));
  }
  if (array.size() == 0) {
    fail(name, "no series (shape " + shape_text(array.shape) + ")");
  }
  SeriesSet set;
  set.count = array.shape[0];
  set.length = array.shape[1];
  set.dims = array.shape.size() == 3 ? array.shape[2] : 1;
  set.values.resize(array.size());
  for (std::size_t q = 0; q < set.values.size(); ++q) {
    set.values[q] = array.element(q);
    if (!std::isfinite(set.values[q])) {
      const std::size_t per_series = set.length * set.dims;
      std::string where = "[" + std::to_string(q / per_series) + ", " +
                          std::to_string(q % per_series / set.dims);
      if (array.shape.size() == 3) where += ", " + std::to_string(q % set.dims);
      fail(name, "value " + where + "] is not finite");
    }
  }
  return set;
}

std::vector<std::int64_t> parse_npy_labels(std::string_view bytes,
                                           const std::string& name) {
  const NpyArray array = parse_npy(bytes, name);
  if (array.shape.size() != 1) {
    fail(name,
         "labels must be a 1-D array, got shape " + shape_text(array.shape));
  }
  std::vector<std::int64_t> labels(array.size());
  for (std::size_t q = 0; q < labels.size(); ++q) {
    const std::string where = "label [" + std::to_string(q) + "] ";
    if (array.kind != 'f') {
      std::uint64_t bits = 0;
      if (!array.integer_element(q, labels[q], bits)) {
        fail(name, where + std::to_string(bits) +
                       " is beyond the range of a 64-bit integer");
      }
      continue;
    }
    // Every float from 2^53 up is an integer; below 2^63 it fits exactly.
    const double value = array.element(q);
    constexpr double int64_end = 9223372036854775808.0;  // 2^63
    if (!std::isfinite(value) || value != std::floor(value)) {
      fail(name, where + "is not an integer");
    }
    if (!(value >= -int64_end && value < int64_end)) {
      fail(name, where + "is beyond the range of a 64-bit integer");
    }
    labels[q] = static_cast<std::int64_t>(value);
  }
  return labels;
}

}  // namespace softwave::cli
