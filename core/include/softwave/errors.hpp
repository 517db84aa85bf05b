#pragma once
// Errors raised by softwave's host-side precondition checks.

#include <sstream>
#include <stdexcept>
#include <string>

namespace softwave {

// Thrown for every bad argument. The message names the argument and, where it
// helps, its value, e.g. "softwave: gamma must be finite and >= 0 (got -1)".
class invalid_argument : public std::invalid_argument {
 public:
  explicit invalid_argument(const std::string& message)
      : std::invalid_argument("softwave: " + message) {}
};

namespace impl {

template <class... Parts>
[[noreturn]] void throw_invalid_argument(const Parts&... parts) {
  std::ostringstream message;
  (message << ... << parts);
  throw invalid_argument(message.str());
}

}  // namespace impl
}  // namespace softwave
