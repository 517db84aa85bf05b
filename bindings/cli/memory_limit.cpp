#include "memory_limit.hpp"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "number_text.hpp"

namespace softwave::cli {

std::string bytes_text(double bytes) {
  static const char* const units[] = {"B", "KB", "MB", "GB", "TB", "PB"};
  int unit = 0;
  while (bytes >= 1024 && unit < 5) {
    bytes /= 1024;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof text, unit == 0 ? "%.0f %s" : "%.3g %s", bytes,
                units[unit]);
  return text;
}

MemoryLimit memory_limit(const ParsedOptions& options) {
  if (const auto text = options.text("--max-memory")) {
    std::string digits = *text;
    double scale = 1;
    if (!digits.empty()) {
      const char suffix = static_cast<char>(
          std::toupper(static_cast<unsigned char>(digits.back())));
      const std::string suffixes = "KMGT";
      const std::size_t power = suffixes.find(suffix);
      if (power != std::string::npos) {
        scale = std::pow(1024.0, double(power + 1));
        digits.pop_back();
      }
    }
    double value = 0;
    if (read_double(digits, value) != NumberRead::ok || !(value > 0) ||
        !std::isfinite(value * scale)) {
      throw usage_error(
          "option --max-memory: expected a size > 0 in bytes, or with a K, M, "
          "G or T suffix, got '" +
          *text + "'");
    }
    const double bytes = value * scale;
    return {bytes >= 1.8e19 ? UINT64_MAX : std::uint64_t(bytes),
            "--max-memory " + *text};
  }
  std::ifstream meminfo("/proc/meminfo");
  std::string line;
  while (std::getline(meminfo, line)) {
    std::istringstream fields(line);
    std::string key;
    std::uint64_t kilobytes = 0;
    if (fields >> key >> kilobytes && key == "MemAvailable:") {
      return {kilobytes * 1024,
              "MemAvailable in /proc/meminfo; --max-memory sets another"};
    }
  }
  return {};
}

void check_memory(const MemoryLimit& limit, const std::string& command,
                  const std::vector<MemoryPart>& parts) {
  double total = 0;
  for (const MemoryPart& part : parts) total += part.bytes;
  if (total <= double(limit.bytes)) return;
  std::string shares;
  for (const MemoryPart& part : parts) {
    if (part.bytes < 0.01 * total) continue;
    shares +=
        (shares.empty() ? "" : ", ") + part.what + " " + bytes_text(part.bytes);
  }
  throw input_error(command + " needs about " + bytes_text(total) + " (" +
                    shares + "), more than the limit of " +
                    bytes_text(double(limit.bytes)) + " (" + limit.name + ")");
}

}  // namespace softwave::cli
