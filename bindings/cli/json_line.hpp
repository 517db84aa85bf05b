#pragma once
// One flat JSON object on one line, for the commands' summaries on stdout.

#include <optional>
#include <string>
#include <type_traits>
#include <vector>

namespace softwave::cli {

// A JSON string literal of `text` (quotes, backslashes and control
// characters escaped).
std::string json_string(const std::string& text);

class JsonLine {
 public:
  // Strings are quoted; bools are true/false; integers as they are; other
  // numbers with `format` (default: all 17 digits), non-finite ones as null;
  // an empty optional is null.
  template <class V>
  JsonLine& add(const std::string& key, const V& value,
                const char* format = "%.17g") {
    if constexpr (std::is_same_v<V, bool>) {
      return raw(key, value ? "true" : "false");
    } else if constexpr (std::is_integral_v<V>) {
      return raw(key, std::to_string(value));
    } else if constexpr (std::is_floating_point_v<V>) {
      return raw(key, number(static_cast<double>(value), format));
    } else {
      return raw(key, json_string(value));
    }
  }
  template <class V>
  JsonLine& add(const std::string& key, const std::optional<V>& value,
                const char* format = "%.17g") {
    if (!value) return raw(key, "null");
    return add(key, *value, format);
  }

  // An array of numbers, each as above.
  JsonLine& add(const std::string& key, const std::vector<double>& values,
                const char* format = "%.17g") {
    std::string text = "[";
    for (std::size_t i = 0; i < values.size(); ++i)
      text += (i > 0 ? "," : "") + number(values[i], format);
    return raw(key, text + "]");
  }

  // "{...}\n"
  std::string str() const { return "{" + body_ + "}\n"; }

 private:
  JsonLine& raw(const std::string& key, const std::string& value);
  static std::string number(double value, const char* format);

  std::string body_;
};

}  // namespace softwave::cli
