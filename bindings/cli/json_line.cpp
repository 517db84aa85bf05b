#include "json_line.hpp"

#include <cmath>
#include <cstdio>

namespace softwave::cli {

std::string json_string(const std::string& text) {
  std::string quoted = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\') {
      quoted += '\\';
      quoted += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\u%04x", c);
      quoted += escaped;
    } else {
      quoted += c;
    }
  }
  return quoted + "\"";
}

JsonLine& JsonLine::raw(const std::string& key, const std::string& value) {
  if (!body_.empty()) body_ += ", ";
  body_ += json_string(key) + ": " + value;
  return *this;
}

std::string JsonLine::number(double value, const char* format) {
  if (!std::isfinite(value)) return "null";  // JSON has no NaN or inf
  char text[64];
  std::snprintf(text, sizeof text, format, value);
  return text;
}

}  // namespace softwave::cli
