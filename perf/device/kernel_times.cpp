// GPU time by kernel for any process, where Nsight Systems is not at hand:
// preload this library (perf/device/kernel_times.sh builds and runs it) and
// at exit it writes, per kernel name (demangled), the launches, their total
// and mean time, the share of all kernel time, and the last launch's
// registers a thread, threads a block and fast (shared) memory a block,
// which bound how many blocks a multiprocessor holds at once; then the span
// from the first kernel's start to the last one's end and the time in it when
// no kernel or copy ran (host gaps, synchronisation). CUPTI's activity records
// time each kernel on the GPU itself; the counters and clocks are left alone.
//
// The record structs change version with CUPTI: the script passes the
// newest names its headers have (KERNEL_RECORD, MEMCPY_RECORD,
// MEMSET_RECORD).

#include <cupti_activity.h>
#include <cupti_callbacks.h>
#include <cxxabi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace {

struct Totals {
  long long launches = 0;
  unsigned long long nanoseconds = 0;
  int registers = 0, threads = 0;  // a kernel's last launch (0: a copy)
  long long shared_bytes = 0;
};

std::mutex g_mutex;
std::map<std::string, Totals> g_kernels;
// Every activity's [start, end), for the busy time in the span.
std::vector<std::pair<unsigned long long, unsigned long long>> g_intervals;

void check(CUptiResult result, const char* what) {
  if (result == CUPTI_SUCCESS) return;
  const char* text = nullptr;
  cuptiGetResultString(result, &text);
  std::fprintf(stderr, "kernel_times: %s failed: %s\n", what,
               text ? text : "unknown");
}

std::string demangled(const char* name) {
  if (name == nullptr) return "(unnamed)";
  int status = 0;
  char* plain = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  std::string result = status == 0 && plain ? plain : name;
  std::free(plain);
  return result;
}

void CUPTIAPI give_buffer(uint8_t** buffer, size_t* size, size_t* max_records) {
  constexpr size_t kBytes = 8 << 20;
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBytes));
  *size = kBytes;
  *max_records = 0;
}

// One activity's time under `name` (the caller holds g_mutex); returns its
// totals.
Totals& add(const std::string& name, unsigned long long start,
            unsigned long long end) {
  Totals& t = g_kernels[name];
  t.launches += 1;
  t.nanoseconds += end - start;
  g_intervals.emplace_back(start, end);
  return t;
}

void CUPTIAPI take_buffer(CUcontext, uint32_t, uint8_t* buffer, size_t,
                          size_t valid) {
  std::lock_guard<std::mutex> lock(g_mutex);
  CUpti_Activity* record = nullptr;
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    switch (record->kind) {
      case CUPTI_ACTIVITY_KIND_KERNEL:
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
        auto const* k = reinterpret_cast<const KERNEL_RECORD*>(record);
        Totals& t = add(demangled(k->name), k->start, k->end);
        t.registers = k->registersPerThread;
        t.threads = k->blockX * k->blockY * k->blockZ;
        t.shared_bytes =
            (long long)k->staticSharedMemory + k->dynamicSharedMemory;
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY: {
        auto const* m = reinterpret_cast<const MEMCPY_RECORD*>(record);
        add("(copy)", m->start, m->end);
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMSET: {
        auto const* m = reinterpret_cast<const MEMSET_RECORD*>(record);
        add("(memset)", m->start, m->end);
        break;
      }
      default:
        break;
    }
  }
  std::free(buffer);
}

void report() {
  check(cuptiActivityFlushAll(1), "cuptiActivityFlushAll");
  std::lock_guard<std::mutex> lock(g_mutex);
  const char* path = std::getenv("KERNEL_TIMES_OUT");
  FILE* out = path ? std::fopen(path, "w") : stderr;
  if (out == nullptr) out = stderr;
  std::vector<std::pair<std::string, Totals>> rows(g_kernels.begin(),
                                                   g_kernels.end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) {
    return a.second.nanoseconds > b.second.nanoseconds;
  });
  unsigned long long all = 0;
  for (auto const& r : rows) all += r.second.nanoseconds;
  std::fprintf(out, "%12s %10s %12s %7s %5s %7s %8s  %s\n", "total_ms",
               "launches", "mean_us", "share", "regs", "threads", "shared",
               "kernel");
  for (auto const& [name, t] : rows)
    std::fprintf(out, "%12.3f %10lld %12.3f %6.2f%% %5d %7d %8lld  %s\n",
                 t.nanoseconds * 1e-6, t.launches,
                 t.nanoseconds * 1e-3 / double(t.launches),
                 all ? 100.0 * double(t.nanoseconds) / double(all) : 0.0,
                 t.registers, t.threads, t.shared_bytes, name.c_str());
  if (!g_intervals.empty()) {
    std::sort(g_intervals.begin(), g_intervals.end());
    unsigned long long busy = 0, open_start = g_intervals[0].first,
                       open_end = g_intervals[0].second;
    for (auto const& [start, end] : g_intervals) {
      if (start > open_end) {
        busy += open_end - open_start;
        open_start = start;
      }
      open_end = std::max(open_end, end);
    }
    busy += open_end - open_start;
    unsigned long long const span = open_end - g_intervals[0].first;
    std::fprintf(out,
                 "span %.3f ms (first kernel's start to last end), busy %.3f "
                 "ms, idle %.3f ms\n",
                 span * 1e-6, busy * 1e-6, (span - busy) * 1e-6);
  }
  if (out != stderr) std::fclose(out);
}

// The runtime may tear its context down at exit before report() runs (its
// exit handler is registered after this library's): flush as it starts to.
void CUPTIAPI on_resource(void*, CUpti_CallbackDomain domain,
                          CUpti_CallbackId id, const void*) {
  if (domain == CUPTI_CB_DOMAIN_RESOURCE &&
      id == CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING)
    cuptiActivityFlushAll(1);
}

CUpti_SubscriberHandle g_subscriber;

__attribute__((constructor)) void start() {
  check(cuptiSubscribe(&g_subscriber, on_resource, nullptr), "cuptiSubscribe");
  check(cuptiEnableCallback(1, g_subscriber, CUPTI_CB_DOMAIN_RESOURCE,
                            CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING),
        "cuptiEnableCallback");
  check(cuptiActivityRegisterCallbacks(give_buffer, take_buffer),
        "cuptiActivityRegisterCallbacks");
  check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL),
        "enable kernels");
  check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY), "enable copies");
  check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET), "enable memsets");
  std::atexit(report);
}

}  // namespace
