#pragma once
// Decimal numbers written as text (option values, UCR files), read whole,
// with what is wrong about one that cannot be read said precisely: not a
// number, or a number beyond the range of the type it is read into.

#include <cstdint>
#include <string>
#include <string_view>

namespace softwave::cli {

enum class NumberRead { ok, not_a_number, too_large, too_small };

// A double, with an optional leading '+'. Subnormal values are kept; a
// magnitude above the largest double is too_large, a nonzero one below the
// smallest subnormal (it would read as 0) too_small. "inf" and "nan" read
// as such: whether they are allowed is the caller's rule.
NumberRead read_double(std::string_view text, double& value);

// A signed 64-bit integer, exactly: too_large or too_small beyond its range.
NumberRead read_integer(std::string_view text, std::int64_t& value);

// What is wrong, to follow the quoted text in a message: "is not a number",
// "is too large for a double (largest 1.8e308)", ...
std::string number_problem(NumberRead problem, bool integer);

}  // namespace softwave::cli
