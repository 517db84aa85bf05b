// Where a softwave call's time goes, by label, on any backend: a Kokkos
// Tools library (perf/kokkos_regions.sh builds it and runs a command with
// it). At exit it writes, per region (softwave's `softwave::…` regions,
// inclusive), per kernel label, per kernel label under the innermost region
// that launched it, per fence and per deep copy direction, the count and the
// total wall time, sorted by time. It asks Kokkos for global fencing, so
// on a GPU each kernel's time is its own (launch to completion) rather than
// its launch's; the extra fences make the whole slower, so compare shares,
// and time the call itself without the tool.
//
// Only the C interface of Kokkos Tools is used (no Kokkos headers), so one
// build serves every Kokkos version the library is built with.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

struct Totals {
  long long count = 0;
  double seconds = 0;
  double bytes = 0;
};

struct Open {
  std::string name;
  Clock::time_point begin;
};

// Kokkos calls the tool from the thread that launches, which for softwave is
// the caller's; a process with several launching threads would interleave.
std::map<std::string, Totals> g_regions, g_kernels, g_region_kernels, g_fences,
    g_copies;
std::vector<Open> g_region_stack;
std::map<std::uint64_t, Open> g_open_kernels, g_open_fences;
Open g_open_copy;
std::uint64_t g_next_id = 1;
Clock::time_point g_start;

double since(Clock::time_point begin) {
  return std::chrono::duration<double>(Clock::now() - begin).count();
}

void begin_kernel(const char* name, std::uint64_t* id) {
  *id = g_next_id++;
  g_open_kernels[*id] = {name ? name : "(unnamed)", Clock::now()};
}

void end_kernel(std::uint64_t id) {
  auto found = g_open_kernels.find(id);
  if (found == g_open_kernels.end()) return;
  double const seconds = since(found->second.begin);
  std::string const& name = found->second.name;
  Totals& all = g_kernels[name];
  all.count += 1;
  all.seconds += seconds;
  if (!g_region_stack.empty()) {
    Totals& within =
        g_region_kernels[g_region_stack.back().name + "  >  " + name];
    within.count += 1;
    within.seconds += seconds;
  }
  g_open_kernels.erase(found);
}

void write_table(std::FILE* out, const char* title,
                 const std::map<std::string, Totals>& rows, bool bytes) {
  std::vector<std::pair<std::string, Totals>> sorted(rows.begin(), rows.end());
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) {
    return a.second.seconds > b.second.seconds;
  });
  std::fprintf(out, "\n%-14s %10s %12s %10s%s  label\n", title, "count",
               "total ms", "mean us", bytes ? "     MB" : "");
  for (const auto& [name, t] : sorted)
    if (bytes)
      std::fprintf(out, "%-14s %10lld %12.3f %10.2f %8.1f  %s\n", "", t.count,
                   1e3 * t.seconds, 1e6 * t.seconds / double(t.count),
                   t.bytes / 1e6, name.c_str());
    else
      std::fprintf(out, "%-14s %10lld %12.3f %10.2f  %s\n", "", t.count,
                   1e3 * t.seconds, 1e6 * t.seconds / double(t.count),
                   name.c_str());
}

struct SpaceHandle {
  char name[64];
};

struct ToolSettings {
  bool requires_global_fencing;
  bool padding[255];
};

}  // namespace

extern "C" {

void kokkosp_init_library(const int, const std::uint64_t, const std::uint32_t,
                          void*) {
  g_start = Clock::now();
}

void kokkosp_request_tool_settings(const std::uint32_t count,
                                   ToolSettings* settings) {
  if (count > 0) settings->requires_global_fencing = true;
}

void kokkosp_finalize_library() {
  const char* path = std::getenv("KOKKOS_REGIONS_OUT");
  std::FILE* out = path ? std::fopen(path, "w") : stderr;
  if (out == nullptr) out = stderr;
  std::fprintf(out, "process span from Kokkos' initialisation: %.3f ms\n",
               1e3 * since(g_start));
  write_table(out, "regions", g_regions, false);
  write_table(out, "kernels", g_kernels, false);
  write_table(out, "by region", g_region_kernels, false);
  write_table(out, "fences", g_fences, false);
  write_table(out, "deep copies", g_copies, true);
  if (out != stderr) std::fclose(out);
}

void kokkosp_push_profile_region(const char* name) {
  g_region_stack.push_back({name ? name : "(unnamed)", Clock::now()});
}

void kokkosp_pop_profile_region() {
  if (g_region_stack.empty()) return;
  Totals& t = g_regions[g_region_stack.back().name];
  t.count += 1;
  t.seconds += since(g_region_stack.back().begin);
  g_region_stack.pop_back();
}

void kokkosp_begin_parallel_for(const char* name, const std::uint32_t,
                                std::uint64_t* id) {
  begin_kernel(name, id);
}
void kokkosp_end_parallel_for(const std::uint64_t id) { end_kernel(id); }
void kokkosp_begin_parallel_reduce(const char* name, const std::uint32_t,
                                   std::uint64_t* id) {
  begin_kernel(name, id);
}
void kokkosp_end_parallel_reduce(const std::uint64_t id) { end_kernel(id); }
void kokkosp_begin_parallel_scan(const char* name, const std::uint32_t,
                                 std::uint64_t* id) {
  begin_kernel(name, id);
}
void kokkosp_end_parallel_scan(const std::uint64_t id) { end_kernel(id); }

void kokkosp_begin_fence(const char* name, const std::uint32_t,
                         std::uint64_t* id) {
  *id = g_next_id++;
  g_open_fences[*id] = {name ? name : "(unnamed)", Clock::now()};
}

void kokkosp_end_fence(const std::uint64_t id) {
  auto found = g_open_fences.find(id);
  if (found == g_open_fences.end()) return;
  Totals& t = g_fences[found->second.name];
  t.count += 1;
  t.seconds += since(found->second.begin);
  g_open_fences.erase(found);
}

void kokkosp_begin_deep_copy(SpaceHandle destination, const char*, const void*,
                             SpaceHandle source, const char*, const void*,
                             const std::uint64_t bytes) {
  g_open_copy = {std::string(source.name) + " -> " + destination.name,
                 Clock::now()};
  g_copies[g_open_copy.name].bytes += double(bytes);
}

void kokkosp_end_deep_copy() {
  Totals& t = g_copies[g_open_copy.name];
  t.count += 1;
  t.seconds += since(g_open_copy.begin);
}

}  // extern "C"
