#pragma once
// How much memory a command may use (--max-memory, else what the system
// reports available), and the check of a command's estimate against it
// before anything large is allocated: work that cannot fit is refused with
// a message instead of meeting the kernel's out-of-memory killer.

#include <cstdint>
#include <string>
#include <vector>

#include "command_line.hpp"
#include "ucr_reader.hpp"

namespace softwave::cli {

struct MemoryLimit {
  std::uint64_t bytes = UINT64_MAX;  // UINT64_MAX: nothing known, no limit
  std::string name;                  // "--max-memory 2G", "MemAvailable ..."

  ReadLimit read_limit() const { return {bytes, name}; }
};

// One share of an estimate, e.g. {"Soft-DTW workspace", 1.2e9}.
struct MemoryPart {
  std::string what;
  double bytes;
};

// --max-memory SIZE (bytes, or with a K, M, G or T suffix: powers of
// 1024), else MemAvailable from /proc/meminfo, else no limit. usage_error
// for a SIZE that is not a positive size.
MemoryLimit memory_limit(const ParsedOptions& options);

// input_error when the parts add up to more than the limit: "<command>
// needs about 24.1 GB (...), more than the 15.2 GB allowed (<limit>)".
void check_memory(const MemoryLimit& limit, const std::string& command,
                  const std::vector<MemoryPart>& parts);

// "1.5 GB", "830 MB", "512 B" (powers of 1024).
std::string bytes_text(double bytes);

}  // namespace softwave::cli
