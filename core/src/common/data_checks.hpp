#pragma once
// Argument checks every family shares. Each failure throws
// softwave::invalid_argument naming the argument. Shapes are checked on the
// host; the checks that need the data (lengths, non-finite values) run on
// the caller's execution-space instance, batched into one fence per call
// (DataChecks).

#include <Kokkos_Core.hpp>
#include <climits>
#include <cstdint>
#include <memory>
#include <softwave/errors.hpp>
#include <softwave/kokkos_compat.hpp>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "call_memory.hpp"

namespace softwave::impl {

// Sequences (B, N, d): N >= 1 and d >= 1 (B = 0 is an empty batch).
template <class View>
void check_sequences(const View& v, const char* name) {
  if (v.extent(0) > 0 && v.extent(1) == 0)
    throw_invalid_argument(name, " is empty (", name,
                           ".extent(1) = 0): sequences need at least one "
                           "element");
  if (v.extent(0) > 0 && v.extent(2) == 0)
    throw_invalid_argument(name, " has no features (", name, ".extent(2) = 0)");
}

template <class View>
void check_extent(const View& v, const char* name,
                  std::vector<std::size_t> expected, const char* meaning) {
  bool same = View::rank == expected.size();
  for (std::size_t r = 0; same && r < expected.size(); ++r)
    same = v.extent(r) == expected[r];
  if (same) return;
  std::string got, want;
  for (std::size_t r = 0; r < View::rank; ++r)
    got += (r ? ", " : "") + std::to_string(v.extent(r));
  for (std::size_t r = 0; r < expected.size(); ++r)
    want += (r ? ", " : "") + std::to_string(expected[r]);
  throw_invalid_argument(name, " has shape (", got, "), expected (", want, ") ",
                         meaning);
}

// Element (q / e1, q % e1, k) of a view of rank 1 to 3, read as a double
// (a function: CUDA's device lambdas cannot capture inside `if constexpr`).
template <class View>
KOKKOS_INLINE_FUNCTION double element(const View& v, std::int64_t q,
                                      std::int64_t e1, std::int64_t k) {
  if constexpr (View::rank == 1)
    return v(q);
  else if constexpr (View::rank == 2)
    return v(q / e1, q % e1);
  else
    return v(q / e1, q % e1, k);
}

// The kernels below are functors, not lambdas: this header is compiled into
// several translation units, and nvcc keeps the copy and call hooks of each
// extended lambda per unit while the linker keeps one unit's instantiation
// of the code that uses them. A check first run from another unit then calls
// that unit's hooks, never set: a null call (seen on the host space of a
// CUDA build). tests/static_checks/lambda_wrappers.py finds such lambdas.
namespace checks {

// Counters of DataChecks: column 0 counts violations, column 1 starts at
// the largest key (see DataChecks::lengths).
template <class Counters>
struct ResetCounters {
  Counters counters;
  KOKKOS_INLINE_FUNCTION void operator()(std::int64_t e) const {
    counters(e, 0) = 0;
    counters(e, 1) = INT64_MAX;
  }
};

template <class Lengths, class Out>
struct ClampLengths {
  Lengths lengths;
  Out out;
  std::int64_t limit;
  KOKKOS_INLINE_FUNCTION void operator()(std::int64_t b) const {
    std::int64_t const l = lengths(b);
    out(b) = int(l < 1 ? 1 : (l > limit ? limit : l));
  }
};

// Column 1 keeps the smallest (index << 32 | value) among the violations,
// so the message can name the first one.
template <class Lengths, class Counters>
struct CheckLengths {
  Lengths lengths;
  Counters counters;
  std::int64_t e, limit;
  KOKKOS_INLINE_FUNCTION void operator()(std::int64_t b) const {
    int const l = lengths(b);
    if (l >= 1 && l <= limit) return;
    Kokkos::atomic_add(&counters(e, 0), std::int64_t(1));
    Kokkos::atomic_fetch_min(&counters(e, 1),
                             (b << 32) | std::int64_t(std::uint32_t(l)));
  }
};

// Non-finite values of series q / n up to its length, at step q % n.
template <class Series, class Lengths>
struct NonFiniteSteps {
  Series v;
  Lengths lengths;
  std::int64_t n, d;
  KOKKOS_INLINE_FUNCTION std::int64_t operator()(std::int64_t q) const {
    std::int64_t const b = q / n, i = q % n;
    if (lengths.extent(0) && i >= lengths(b)) return 0;
    std::int64_t bad = 0;
    for (std::int64_t k = 0; k < d; ++k)
      if (!compat::isfinite(double(v(b, i, k)))) ++bad;
    return bad;
  }
};

// Non-finite values of item q of a view of rank 1 to 3 (element()).
template <class View>
struct NonFiniteEntries {
  View v;
  std::int64_t e1, e2;
  KOKKOS_INLINE_FUNCTION std::int64_t operator()(std::int64_t q) const {
    std::int64_t bad = 0;
    for (std::int64_t k = 0; k < e2; ++k)
      if (!compat::isfinite(element(v, q, e1, k))) ++bad;
    return bad;
  }
};

// Adds count_bad(i) into the check's counter e.
template <class Counters, class CountBad>
struct CountViolations {
  Counters counters;
  std::int64_t e;
  CountBad count_bad;
  KOKKOS_INLINE_FUNCTION void operator()(std::int64_t i) const {
    std::int64_t const bad = count_bad(i);
    if (bad) Kokkos::atomic_add(&counters(e, 0), bad);
  }
};

// Sums NonFiniteEntries over a reduction.
template <class View>
struct SumNonFinite {
  NonFiniteEntries<View> entries;
  KOKKOS_INLINE_FUNCTION void operator()(std::int64_t q,
                                         std::int64_t& n) const {
    n += entries(q);
  }
};

}  // namespace checks

template <class Space, class Counters>
void reset_counters(const Space& space, const Counters& counters,
                    const std::string& label_prefix) {
  Kokkos::parallel_for(label_prefix + "checks_reset",
                       Kokkos::RangePolicy<Space>(space, 0, counters.extent(0)),
                       checks::ResetCounters<Counters>{counters});
}

// The checks of one call that read the data: lengths within range and
// finite values. Enabled (SoftDTWOptions::check_values), each check is a
// kernel queued on the instance that counts violations into a small device
// array; finish() reads it back with one fence and throws the first
// failure, in the order the checks were queued. Disabled, nothing is read
// back: lengths() returns a copy clamped into [1, limit] for the call to use,
// and the finite checks do nothing.
template <class Space>
class DataChecks {
  using Memory = typename Space::memory_space;
  using Counters = Kokkos::View<std::int64_t* [2], Memory>;

 public:
  using LengthView = Kokkos::View<const int*, Memory>;

  // family names the kernels and arrays: softwave::<family>::check_...
  DataChecks(const Space& space, bool enabled, const char* family)
      : space_(space),
        enabled_(enabled),
        label_prefix_(std::string("softwave::") + family + "::") {}

  // lengths: empty, or one entry per series with 1 <= length <= limit.
  // Returns the lengths the call should use.
  LengthView lengths(LengthView lengths, const char* name, std::size_t count,
                     std::int64_t limit) {
    if (lengths.extent(0) == 0) return lengths;
    if (lengths.extent(0) != count)
      throw_invalid_argument(name, " has ", lengths.extent(0),
                             " entries, expected ", count, " (one per series)");
    if (!enabled_) {
      auto copy = call_array<Kokkos::View<int*, Memory>>(
          space_, (label_prefix_ + "lengths_clamped").c_str(), /*zero=*/false,
          count);
      auto const out = copy.view;
      Kokkos::parallel_for(
          label_prefix_ + "clamp_lengths",
          Kokkos::RangePolicy<Space>(space_, 0, count),
          checks::ClampLengths<LengthView, decltype(out)>{lengths, out, limit});
      clamped_.push_back(copy.owner);
      return out;
    }
    auto const counters = slot(Entry{name, limit});
    std::int64_t const e = entries_.size() - 1;
    Kokkos::parallel_for(label_prefix_ + "check_lengths",
                         Kokkos::RangePolicy<Space>(space_, 0, count),
                         checks::CheckLengths<LengthView, Counters>{
                             lengths, counters, e, limit});
    return lengths;
  }

  // Series (B, N, d), within each series' length (clamped into [0, N] here:
  // the lengths are checked in the same batch of kernels).
  template <class SeriesView>
  void finite_series(const SeriesView& v, LengthView lengths,
                     const char* name) {
    if (v.extent(0) == 0) return;
    std::int64_t const n = v.extent(1), d = v.extent(2);
    count(name, " non-finite value(s) (NaN or inf) inside the series lengths",
          v.extent(0) * n, label_prefix_ + "check_finite",
          checks::NonFiniteSteps<SeriesView, LengthView>{v, lengths, n, d});
  }

  // grad_output (B,) must be finite: it multiplies every gradient.
  template <class T>
  void finite_weights(Kokkos::View<const T*, Memory> grad_output) {
    using View = Kokkos::View<const T*, Memory>;
    count("grad_output", " non-finite value(s) (NaN or inf)",
          grad_output.extent(0), label_prefix_ + "check_finite_grad_output",
          checks::NonFiniteEntries<View>{grad_output, 1, 1});
  }

  // A check of its own: count_bad(i) (on the device) returns how many of
  // item i's values are bad; a non-zero total throws "<name> has <total>
  // <message>" at finish(). label names the kernel.
  template <class CountBad>
  void count(const char* name, const char* message, std::int64_t items,
             const std::string& label, const CountBad& count_bad) {
    if (!enabled_ || items == 0) return;
    auto const counters = slot(Entry{name, 0, message});
    std::int64_t const e = entries_.size() - 1;
    Kokkos::parallel_for(
        label, Kokkos::RangePolicy<Space>(space_, 0, items),
        checks::CountViolations<Counters, CountBad>{counters, e, count_bad});
  }

  // Every value of v (rank 1 to 3) finite.
  template <class View>
  void finite_values(const View& v, const char* name) {
    if (v.size() == 0) return;
    std::int64_t const e1 = View::rank > 1 ? v.extent(1) : 1;
    std::int64_t const e2 = View::rank > 2 ? v.extent(2) : 1;
    count(name, " non-finite value(s) (NaN or inf)", v.extent(0) * e1,
          label_prefix_ + "check_finite",
          checks::NonFiniteEntries<View>{v, e1, e2});
  }

  // Reads the counters back (one fence) and throws the first failure.
  void finish() {
    if (entries_.empty()) return;
    // A labelled host copy (in the counters' layout, so the copy is direct):
    // a mirror of the unmanaged stream-ordered counters (Kokkos::Cuda) would
    // be an unlabelled allocation on every call.
    Kokkos::View<std::int64_t* [2], typename Counters::array_layout,
                 Kokkos::HostSpace>
        host(Kokkos::view_alloc(Kokkos::WithoutInitializing,
                                label_prefix_ + "checks_host"),
             counters_.view.extent(0));
    Kokkos::deep_copy(space_, host, counters_.view);
    space_.fence();
    for (std::size_t e = 0; e < entries_.size(); ++e) {
      std::int64_t const bad = host(e, 0);
      if (bad == 0) continue;
      Entry const& entry = entries_[e];
      if (entry.message == nullptr) {
        std::int64_t const key = host(e, 1);
        throw_invalid_argument(entry.name, "[", key >> 32,
                               "] = ", int(std::uint32_t(key & 0xffffffff)),
                               " is out of range [1, ", entry.limit, "]");
      }
      throw_invalid_argument(entry.name, " has ", bad, entry.message);
    }
  }

 private:
  struct Entry {
    const char* name;
    std::int64_t limit = 0;         // lengths: the largest allowed
    const char* message = nullptr;  // finite checks: what follows
  };
  static constexpr int kMaxEntries = 16;

  // The counters of a new check (allocated and reset with the first).
  Counters slot(const Entry& entry) {
    if (entries_.size() == kMaxEntries)
      throw std::logic_error("softwave::DataChecks: too many checks");
    if (entries_.empty()) {
      counters_ =
          call_array<Counters>(space_, (label_prefix_ + "checks").c_str(),
                               /*zero=*/false, kMaxEntries);
      reset_counters(space_, counters_.view, label_prefix_);
    }
    entries_.push_back(entry);
    return counters_.view;
  }

  Space space_;
  bool enabled_;
  std::string label_prefix_;
  CallArray<Counters> counters_;
  std::vector<Entry> entries_;
  std::vector<std::shared_ptr<void>> clamped_;
};

// How many entries of `values` (rank 1 or 2) are not finite.
template <class Space, class View>
std::int64_t count_non_finite(const Space& space, const View& values,
                              const std::string& label) {
  std::int64_t bad = 0;
  std::int64_t const columns = View::rank > 1 ? values.extent(1) : 1;
  Kokkos::parallel_reduce(label,
                          Kokkos::RangePolicy<Space>(space, 0, values.size()),
                          checks::SumNonFinite<View>{{values, columns, 1}},
                          Kokkos::Sum<std::int64_t>(bad));
  return bad;
}

// The values of a call whose inputs passed the data checks (`enabled`:
// SoftDTWOptions::check_values): one that is not finite overflowed its type,
// through costs or sums beyond its range or a γ so large that γ·log 3 is.
// Throws naming `inputs` and the cause, so a checked call never returns an
// inf or NaN from finite inputs. One reduction and fence, enabled only
// (unchecked, a NaN input's NaN value is the documented answer).
template <class Space, class View>
void check_finite_results(const Space& space, bool enabled, const View& values,
                          const std::string& family, const char* inputs,
                          double gamma) {
  static_assert(View::rank == 1 || View::rank == 2);
  if (!enabled || values.size() == 0) return;
  std::int64_t const bad = count_non_finite(
      space, values, "softwave::" + family + "::check_results");
  if (bad == 0) return;
  using Value = typename View::non_const_value_type;
  throw_invalid_argument(
      inputs, " give ", bad, " non-finite value(s) of ", values.size(),
      " though every input is finite: the values overflow ",
      sizeof(Value) == 4 ? "float32" : "float64", " at gamma = ", gamma,
      " (rescale the inputs, lower gamma, or use float64)");
}

}  // namespace softwave::impl
