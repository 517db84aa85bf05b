#include "number_text.hpp"

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <system_error>

namespace softwave::cli {

namespace {

// The text without a leading '+', which from_chars does not take.
std::string_view without_plus(std::string_view text) {
  if (text.size() > 1 && text.front() == '+') text.remove_prefix(1);
  return text;
}

}  // namespace

NumberRead read_double(std::string_view text, double& value) {
  const std::string_view digits = without_plus(text);
  if (digits.empty()) return NumberRead::not_a_number;
  const char* const end = digits.data() + digits.size();
  const auto [stop, error] = std::from_chars(digits.data(), end, value);
  if (stop != end) return NumberRead::not_a_number;
  if (error == std::errc()) return NumberRead::ok;
  if (error != std::errc::result_out_of_range) return NumberRead::not_a_number;
  // Out of range for from_chars, which includes subnormal results: strtod
  // tells an overflow (±HUGE_VAL) from an underflow to zero.
  const std::string copy(digits);
  errno = 0;
  const double parsed = std::strtod(copy.c_str(), nullptr);
  if (std::isinf(parsed)) return NumberRead::too_large;
  if (parsed == 0) return NumberRead::too_small;
  value = parsed;
  return NumberRead::ok;
}

NumberRead read_integer(std::string_view text, std::int64_t& value) {
  const std::string_view digits = without_plus(text);
  if (digits.empty()) return NumberRead::not_a_number;
  const char* const end = digits.data() + digits.size();
  const auto [stop, error] = std::from_chars(digits.data(), end, value);
  if (stop != end) return NumberRead::not_a_number;
  if (error == std::errc::result_out_of_range)
    return digits.front() == '-' ? NumberRead::too_small
                                 : NumberRead::too_large;
  return error == std::errc() ? NumberRead::ok : NumberRead::not_a_number;
}

std::string number_problem(NumberRead problem, bool integer) {
  switch (problem) {
    case NumberRead::ok:
      return "is fine";
    case NumberRead::not_a_number:
      return integer ? "is not an integer" : "is not a number";
    case NumberRead::too_large:
      return integer ? "is beyond the range of a 64-bit integer (largest "
                       "9223372036854775807)"
                     : "is too large for a double (largest about 1.8e308)";
    case NumberRead::too_small:
      return integer ? "is beyond the range of a 64-bit integer (smallest "
                       "-9223372036854775808)"
                     : "is too small for a double: it is not 0, but below "
                       "the smallest positive double (about 4.9e-324)";
  }
  return "is not a number";
}

}  // namespace softwave::cli
