#pragma once
// Shared pieces of the softwave GoogleTest suite: seeded random inputs, host
// batches, views in an execution space's memory (filled and read back through
// host mirrors, so the same tests run on every space of
// execution_spaces.hpp), calls into the library, the float64 reference per
// batch, comparisons that report the worst element, and an exception check.
// Everything that touches the library takes the execution-space instance
// first, as the library's entry points do.

#include <gtest/gtest.h>

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <random>
#include <set>
#include <softwave/softdtw.hpp>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "execution_spaces.hpp"
#include "reference/softdtw_reference.hpp"

namespace swt {

namespace ref = softwave_ref;

// Row-major views in Space's memory, as the library takes them.
template <class T, class Space>
using Dev3 =
    Kokkos::View<T***, Kokkos::LayoutRight, typename Space::memory_space>;
template <class T, class Space>
using Dev2 =
    Kokkos::View<T**, Kokkos::LayoutRight, typename Space::memory_space>;
template <class T, class Space>
using Dev1 = Kokkos::View<T*, typename Space::memory_space>;

inline softwave::Cost to_lib(ref::Cost c) {
  switch (c) {
    case ref::Cost::sqeuclidean:
      return softwave::Cost::sqeuclidean;
    case ref::Cost::l1:
      return softwave::Cost::l1;
    case ref::Cost::cosine:
      return softwave::Cost::cosine;
  }
  return softwave::Cost::sqeuclidean;
}

// ------------------------------------------------------------ randomness

// A fresh seed per test (std::random_device), or SOFTWAVE_TEST_SEED to replay.
inline std::uint64_t fresh_seed() {
  if (const char* s = std::getenv("SOFTWAVE_TEST_SEED"))
    return std::strtoull(s, nullptr, 10);
  std::random_device rd;
  return (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
}

struct Rng {
  std::uint64_t seed = fresh_seed();
  std::mt19937_64 engine{seed};
  double uniform(double lo = 0.0, double hi = 1.0) {
    return std::uniform_real_distribution<double>(lo, hi)(engine);
  }
  int integer(int lo, int hi) {  // inclusive
    return std::uniform_int_distribution<int>(lo, hi)(engine);
  }
  bool coin() { return integer(0, 1) == 1; }
};

// Declares `rng` and attaches its seed to every failure in the scope.
#define SWT_SEEDED_RNG(rng)           \
  ::swt::Rng rng;                     \
  SCOPED_TRACE(::testing::Message()   \
               << "seed " << rng.seed \
               << " (replay: SOFTWAVE_TEST_SEED=" << rng.seed << ")")

// Four typed tests Name<Double|Float|BFloat16|Float16>, one per input type
// the library takes, each calling function<T>(space) on the test's space.
#define SWT_TYPED_TEST_EACH_INPUT(Suite, Name, function)             \
  TYPED_TEST(Suite, Name##Double) { function<double>(TypeParam()); } \
  TYPED_TEST(Suite, Name##Float) { function<float>(TypeParam()); }   \
  TYPED_TEST(Suite, Name##BFloat16) {                                \
    function<softwave::bfloat16>(TypeParam());                       \
  }                                                                  \
  TYPED_TEST(Suite, Name##Float16) { function<softwave::float16>(TypeParam()); }

// ------------------------------------------------------------ host data

// A host batch (B, n, d) of doubles; values may be rounded to T before use so
// that the reference sees exactly what the library sees.
struct Batch {
  int B = 0, n = 0, d = 0;
  std::vector<double> v;

  Batch() = default;
  Batch(int B_, int n_, int d_, double fill = 0.0)
      : B(B_), n(n_), d(d_), v(static_cast<std::size_t>(B_) * n_ * d_, fill) {}
  double& operator()(int b, int i, int k) {
    return v[(static_cast<std::size_t>(b) * n + i) * d + k];
  }
  double operator()(int b, int i, int k) const {
    return v[(static_cast<std::size_t>(b) * n + i) * d + k];
  }
  // Pair b's first `len` points as a reference series.
  ref::Series series(int b, int len) const {
    ref::Series s(len, d);
    for (int i = 0; i < len; ++i)
      for (int k = 0; k < d; ++k) s(i, k) = (*this)(b, i, k);
    return s;
  }
  ref::Table table(int b, int rows, int cols) const {  // for cost tensors
    ref::Table t(rows, cols);
    for (int i = 0; i < rows; ++i)
      for (int j = 0; j < cols; ++j) t(i, j) = (*this)(b, i, j);
    return t;
  }
};

inline Batch random_batch(Rng& rng, int B, int n, int d, double lo = 0.0,
                          double hi = 1.0) {
  Batch out(B, n, d);
  for (double& e : out.v) e = rng.uniform(lo, hi);
  return out;
}

template <class T>
void round_to(Batch& batch) {
  for (double& e : batch.v) e = static_cast<double>(static_cast<T>(e));
}

// The largest |a_i − b_i|, infinite where either is NaN.
inline double worst_difference(const std::vector<double>& a,
                               const std::vector<double>& b) {
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    double const e = std::fabs(a[i] - b[i]);
    if (!(e <= worst)) worst = e == e ? e : INFINITY;
  }
  return worst;
}

// ----------------------------------------------------------- device data

// Views in Space's memory; the instance only picks the space.
template <class T, class Space>
Dev3<T, Space> to_device(const Space&, const Batch& batch,
                         const char* label = "swt::batch") {
  Dev3<T, Space> view(std::string(label), batch.B, batch.n, batch.d);
  auto host = Kokkos::create_mirror_view(view);
  for (int b = 0; b < batch.B; ++b)
    for (int i = 0; i < batch.n; ++i)
      for (int k = 0; k < batch.d; ++k)
        host(b, i, k) = static_cast<T>(batch(b, i, k));
  Kokkos::deep_copy(view, host);
  return view;
}

template <class T, class Space>
Dev1<T, Space> to_device(const Space&, const std::vector<double>& values,
                         const char* label = "swt::vector") {
  Dev1<T, Space> view(std::string(label), values.size());
  auto host = Kokkos::create_mirror_view(view);
  for (std::size_t i = 0; i < values.size(); ++i)
    host(i) = static_cast<T>(values[i]);
  Kokkos::deep_copy(view, host);
  return view;
}

// A row-major (rows × cols) matrix.
template <class T, class Space>
Dev2<T, Space> to_device2(const std::vector<double>& values, int rows, int cols,
                          const char* label = "swt::matrix") {
  Dev2<T, Space> view(std::string(label), rows, cols);
  auto host = Kokkos::create_mirror_view(view);
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < cols; ++j)
      host(i, j) = static_cast<T>(values[std::size_t(i) * cols + j]);
  Kokkos::deep_copy(view, host);
  return view;
}

template <class Space>
Dev1<int, Space> to_device_int(const Space&, const std::vector<int>& values,
                               const char* label) {
  Dev1<int, Space> view(std::string(label), values.size());
  auto host = Kokkos::create_mirror_view(view);
  for (std::size_t i = 0; i < values.size(); ++i) host(i) = values[i];
  Kokkos::deep_copy(view, host);
  return view;
}

// Reads any rank-1..3 view back into a flat row-major vector of doubles,
// after everything queued on any instance (a global fence).
template <class View>
std::vector<double> to_host(const View& view) {
  Kokkos::fence();
  auto host = Kokkos::create_mirror_view(view);
  Kokkos::deep_copy(host, view);
  std::vector<double> out;
  out.reserve(view.size());
  if constexpr (View::rank == 1) {
    for (std::size_t i = 0; i < host.extent(0); ++i) out.push_back(host(i));
  } else if constexpr (View::rank == 2) {
    for (std::size_t i = 0; i < host.extent(0); ++i)
      for (std::size_t j = 0; j < host.extent(1); ++j)
        out.push_back(host(i, j));
  } else {
    for (std::size_t i = 0; i < host.extent(0); ++i)
      for (std::size_t j = 0; j < host.extent(1); ++j)
        for (std::size_t k = 0; k < host.extent(2); ++k)
          out.push_back(host(i, j, k));
  }
  return out;
}

// Outputs are prefilled with this, so cells the library forgets to write show
// up.
constexpr double kSentinel = -777.0;

template <class T, class Space>
Dev3<T, Space> output3(const Space&, const char* label, int a, int b, int c) {
  Dev3<T, Space> view(std::string(label), a, b, c);
  Kokkos::deep_copy(view, static_cast<T>(kSentinel));
  return view;
}
template <class T, class Space>
Dev1<T, Space> output1(const Space&, const char* label, int n) {
  Dev1<T, Space> view(std::string(label), n);
  Kokkos::deep_copy(view, static_cast<T>(kSentinel));
  return view;
}

// -------------------------------------------------------------- settings

// Everything a call takes besides the data. Empty lengths = full length.
struct Config {
  ref::Cost cost = ref::Cost::sqeuclidean;
  double gamma = 1.0;
  std::optional<std::int64_t> band;
  int tile = 0;
  softwave::Kernel kernel = softwave::Kernel::automatic;
  std::vector<int> len_x, len_y;
  std::vector<double> grad_output;  // empty = all ones

  softwave::SoftDTWOptions options() const {
    softwave::SoftDTWOptions o;
    o.gamma = gamma;
    o.cost = to_lib(cost);
    o.band = band;
    o.tile = tile;
    o.kernel = kernel;
    return o;
  }
  ref::Options ref_options() const { return {gamma, cost, band}; }
  template <class Space>
  softwave::Lengths<Space> lengths(const Space& space) const {
    softwave::Lengths<Space> l;
    if (!len_x.empty()) l.x = to_device_int(space, len_x, "swt::lengths.x");
    if (!len_y.empty()) l.y = to_device_int(space, len_y, "swt::lengths.y");
    return l;
  }
  int nx(int b, int n) const { return len_x.empty() ? n : len_x[b]; }
  int ny(int b, int m) const { return len_y.empty() ? m : len_y[b]; }
  double go(int b) const { return grad_output.empty() ? 1.0 : grad_output[b]; }

  std::string str() const {
    std::ostringstream s;
    s << "cost=" << ref::to_string(cost) << " gamma=" << gamma << " band=";
    if (band)
      s << *band;
    else
      s << "none";
    s << " tile=" << tile
      << " lengths=" << (len_x.empty() && len_y.empty() ? "no" : "yes");
    if (!len_x.empty()) {
      s << " len_x={";
      for (int l : len_x) s << l << ",";
      s << "}";
    }
    if (!len_y.empty()) {
      s << " len_y={";
      for (int l : len_y) s << l << ",";
      s << "}";
    }
    if (!grad_output.empty()) s << " grad_output=custom";
    return s.str();
  }
};

inline std::vector<int> random_lengths(Rng& rng, int B, int n) {
  std::vector<int> out(B);
  for (int& l : out) l = rng.integer(1, n);
  return out;
}

// ----------------------------------------------------- results, flattened

// Flat host results in the library's layouts: values (B), grad_x (B, n, d),
// grad_y (B, m, d), alignment (B, n, m). Padding entries are exactly 0.
struct Results {
  std::vector<double> values, grad_x, grad_y, alignment;
};

// The reference for every pair of a padded batch.
inline Results reference(const Batch& x, const Batch& y, const Config& s) {
  const int B = x.B, n = x.n, m = y.n, d = x.d;
  Results out;
  out.values.assign(B, 0.0);
  out.grad_x.assign(static_cast<std::size_t>(B) * n * d, 0.0);
  out.grad_y.assign(static_cast<std::size_t>(B) * m * d, 0.0);
  out.alignment.assign(static_cast<std::size_t>(B) * n * m, 0.0);
  for (int b = 0; b < B; ++b) {
    const int nb = s.nx(b, n), mb = s.ny(b, m);
    const ref::Result r =
        ref::soft_dtw(x.series(b, nb), y.series(b, mb), s.ref_options());
    const double g = s.go(b);
    out.values[b] = r.value;
    for (int i = 0; i < nb; ++i)
      for (int k = 0; k < d; ++k)
        out.grad_x[(static_cast<std::size_t>(b) * n + i) * d + k] =
            g * r.grad_x(i, k);
    for (int j = 0; j < mb; ++j)
      for (int k = 0; k < d; ++k)
        out.grad_y[(static_cast<std::size_t>(b) * m + j) * d + k] =
            g * r.grad_y(j, k);
    for (int i = 0; i < nb; ++i)
      for (int j = 0; j < mb; ++j)
        out.alignment[(static_cast<std::size_t>(b) * n + i) * m + j] =
            r.e(i, j);
  }
  return out;
}

// soft_dtw (values only).
template <class T, class Space>
std::vector<double> library_values(const Space& space, const Batch& x,
                                   const Batch& y, const Config& s) {
  const auto dx = to_device<T>(space, x, "swt::x");
  const auto dy = to_device<T>(space, y, "swt::y");
  auto values = output1<softwave::value_t<T>>(space, "swt::values", x.B);
  softwave::soft_dtw(space, dx, dy, values, s.options(), s.lengths(space));
  return to_host(values);
}

// soft_dtw_value_and_grad with every output requested.
template <class T, class Space>
Results library_value_and_grad(const Space& space, const Batch& x,
                               const Batch& y, const Config& s) {
  const auto dx = to_device<T>(space, x, "swt::x");
  const auto dy = to_device<T>(space, y, "swt::y");
  auto values = output1<softwave::value_t<T>>(space, "swt::values", x.B);
  softwave::SeriesGradients<T, Space> g;
  g.grad_x = output3<T>(space, "swt::grad_x", x.B, x.n, x.d);
  g.grad_y = output3<T>(space, "swt::grad_y", y.B, y.n, y.d);
  g.alignment = output3<T>(space, "swt::alignment", x.B, x.n, y.n);
  if (!s.grad_output.empty())
    g.grad_output = to_device<softwave::value_t<T>>(space, s.grad_output,
                                                    "swt::grad_output");
  softwave::soft_dtw_value_and_grad(space, dx, dy, values, g, s.options(),
                                    s.lengths(space));
  return {to_host(values), to_host(g.grad_x), to_host(g.grad_y),
          to_host(g.alignment)};
}

// soft_dtw_cost / soft_dtw_cost_value_and_grad on a cost tensor c (B, N, M);
// grad_cost comes back in Results::alignment.
template <class T, class Space>
Results library_cost(const Space& space, const Batch& c, const Config& s,
                     bool grads) {
  const auto dc = to_device<T>(space, c, "swt::cost");
  auto values = output1<softwave::value_t<T>>(space, "swt::values", c.B);
  if (!grads) {
    softwave::soft_dtw_cost(space, dc, values, s.options(), s.lengths(space));
    return {to_host(values), {}, {}, {}};
  }
  softwave::CostGradients<T, Space> g;
  g.grad_cost = output3<T>(space, "swt::grad_cost", c.B, c.n, c.d);
  if (!s.grad_output.empty())
    g.grad_output = to_device<softwave::value_t<T>>(space, s.grad_output,
                                                    "swt::grad_output");
  softwave::soft_dtw_cost_value_and_grad(space, dc, values, g, s.options(),
                                         s.lengths(space));
  return {to_host(values), {}, {}, to_host(g.grad_cost)};
}

// The reference on a cost tensor: values and grad_cost = grad_output · E.
inline Results reference_cost(const Batch& c, const Config& s) {
  const int B = c.B, n = c.n, m = c.d;
  Results out;
  out.values.assign(B, 0.0);
  out.alignment.assign(static_cast<std::size_t>(B) * n * m, 0.0);
  for (int b = 0; b < B; ++b) {
    const int nb = s.nx(b, n), mb = s.ny(b, m);
    const ref::Result r =
        ref::soft_dtw_cost(c.table(b, nb, mb), s.gamma, s.band);
    out.values[b] = r.value;
    for (int i = 0; i < nb; ++i)
      for (int j = 0; j < mb; ++j)
        out.alignment[(static_cast<std::size_t>(b) * n + i) * m + j] =
            s.go(b) * r.e(i, j);
  }
  return out;
}

// Central differences of objective(x, y) with respect to every entry of x and
// y inside the pairs' lengths (zero in the padding), laid out like x and y.
template <class Objective>
std::pair<std::vector<double>, std::vector<double>> central_differences(
    const Batch& x, const Batch& y, const Config& s, double h,
    const Objective& objective) {
  std::vector<double> fd_x(x.v.size(), 0.0), fd_y(y.v.size(), 0.0);
  for (int b = 0; b < x.B; ++b)
    for (int k = 0; k < x.d; ++k) {
      for (int i = 0; i < s.len_x[b]; ++i) {
        Batch p = x, q = x;
        p(b, i, k) += h;
        q(b, i, k) -= h;
        fd_x[(static_cast<std::size_t>(b) * x.n + i) * x.d + k] =
            (objective(p, y) - objective(q, y)) / (2 * h);
      }
      for (int j = 0; j < s.len_y[b]; ++j) {
        Batch p = y, q = y;
        p(b, j, k) += h;
        q(b, j, k) -= h;
        fd_y[(static_cast<std::size_t>(b) * y.n + j) * y.d + k] =
            (objective(x, p) - objective(x, q)) / (2 * h);
      }
    }
  return {fd_x, fd_y};
}

// ------------------------------------------------------------ comparisons

// Element-wise: |a − e| ≤ rtol · max(|e|, floor). Reports the worst element.
inline ::testing::AssertionResult near_values(
    const std::vector<double>& actual, const std::vector<double>& expected,
    double rtol, double floor, const char* what) {
  if (actual.size() != expected.size())
    return ::testing::AssertionFailure()
           << what << ": size " << actual.size() << " vs " << expected.size();
  double worst = 0.0;
  std::size_t at = 0;
  bool bad = false;
  for (std::size_t i = 0; i < actual.size(); ++i) {
    const double scale = std::max(std::fabs(expected[i]), floor);
    const double err = std::fabs(actual[i] - expected[i]) / scale;
    if (!(err <= rtol)) bad = true;
    if (!(err <= worst)) {  // NaN counts as worst
      worst = err;
      at = i;
    }
  }
  if (!bad) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << what << ": element " << at << " is " << actual[at] << ", expected "
         << expected[at] << " (relative error " << worst << " > " << rtol
         << ")";
}

inline double max_abs(const std::vector<double>& v) {
  double m = 0.0;
  for (double e : v) m = std::max(m, std::fabs(e));
  return m;
}

// Array-wise: max |a − e| ≤ rtol · max(max |e|, floor). Reports the worst
// element.
inline ::testing::AssertionResult near_arrays(
    const std::vector<double>& actual, const std::vector<double>& expected,
    double rtol, double floor, const char* what) {
  if (actual.size() != expected.size())
    return ::testing::AssertionFailure()
           << what << ": size " << actual.size() << " vs " << expected.size();
  const double scale = std::max(max_abs(expected), floor);
  double worst = 0.0;
  std::size_t at = 0;
  bool bad = false;
  for (std::size_t i = 0; i < actual.size(); ++i) {
    const double err = std::fabs(actual[i] - expected[i]);
    if (!(err <= rtol * scale)) bad = true;
    if (!(err <= worst)) {
      worst = err;
      at = i;
    }
  }
  if (!bad) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << what << ": element " << at << " is " << actual[at] << ", expected "
         << expected[at] << " (error " << worst << " > " << rtol << " x scale "
         << scale << ")";
}

// Relative 2-norm error ‖a − e‖ / ‖e‖.
inline double relative_norm_error(const std::vector<double>& actual,
                                  const std::vector<double>& expected) {
  double num = 0.0, den = 0.0;
  for (std::size_t i = 0; i < actual.size(); ++i) {
    num += (actual[i] - expected[i]) * (actual[i] - expected[i]);
    den += expected[i] * expected[i];
  }
  return std::sqrt(num) / std::sqrt(den);
}

// -------------------------------------------------------------- exceptions

// True when `name` occurs in `message` as a whole argument name: not inside a
// longer identifier ("x" does not match inside "grad_x" or "lengths.x").
inline bool names_argument(const std::string& message,
                           const std::string& name) {
  auto ident = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  };
  for (std::size_t at = message.find(name); at != std::string::npos;
       at = message.find(name, at + 1)) {
    const bool before_ok =
        at == 0 || (!ident(message[at - 1]) && message[at - 1] != '.');
    const std::size_t end = at + name.size();
    const bool after_ok = end == message.size() || !ident(message[end]);
    if (before_ok && after_ok) return true;
  }
  return false;
}

// Runs `call`, expecting softwave::invalid_argument whose what() names `name`.
template <class F>
::testing::AssertionResult throws_naming(const std::string& name, F&& call) {
  try {
    call();
    Kokkos::fence();
  } catch (const softwave::invalid_argument& e) {
    if (names_argument(e.what(), name)) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure()
           << "softwave::invalid_argument was thrown but its message does not "
              "name '"
           << name << "': \"" << e.what() << "\"";
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure()
           << "expected softwave::invalid_argument naming '" << name
           << "', got another exception: \"" << e.what() << "\"";
  } catch (...) {
    return ::testing::AssertionFailure()
           << "expected softwave::invalid_argument naming '" << name
           << "', got a non-std exception";
  }
  return ::testing::AssertionFailure()
         << "expected softwave::invalid_argument naming '" << name
         << "', nothing was thrown";
}

// ------------------------------------------------------------------ sweep

constexpr double kGammas[] = {0.0, 1e-3, 0.01, 0.1, 1.0, 10.0};
constexpr ref::Cost kCosts[] = {ref::Cost::sqeuclidean, ref::Cost::l1,
                                ref::Cost::cosine};

// One randomised case of the reference sweep.
struct Case {
  int B = 1, n = 1, m = 1, d = 1;
  Config setup;
  std::string str() const {
    std::ostringstream s;
    s << "B=" << B << " N=" << n << " M=" << m << " d=" << d << " "
      << setup.str();
    return s.str();
  }
};

// SOFTWAVE_TEST_SHARD="i/n" (0 <= i < n) keeps the sweep cases whose index
// is i modulo n, so that a slow tool can run one sweep as n processes
// (perf/device/sanitize.sh). Every case still draws its parameters, so a
// shard's cases are those of the whole sweep with the same seed.
struct Shard {
  int index = 0, count = 1;
};
inline Shard test_shard() {
  Shard shard;
  const char* text = std::getenv("SOFTWAVE_TEST_SHARD");
  if (!text || !*text) return shard;
  char slash = 0, rest = 0;
  std::istringstream in(text);
  if (!(in >> shard.index >> slash >> shard.count) || slash != '/' ||
      in >> rest || shard.count < 1 || shard.index < 0 ||
      shard.index >= shard.count) {
    ADD_FAILURE() << "SOFTWAVE_TEST_SHARD='" << text
                  << "' is not i/n with 0 <= i < n";
    return Shard{};
  }
  return shard;
}

// Every shape × cost × γ, with d ∈ {1, 3, 64}, B ∈ {1, 7}, band on/off,
// lengths on/off and tile ∈ {0, 4, 7, 32} cycling at different rates so that
// their combinations vary across the sweep; band widths and lengths are drawn
// fresh each run.
inline std::vector<Case> sweep_cases(Rng& rng, bool with_grad_output) {
  static const int shapes[][2] = {
      {1, 1}, {1, 6}, {6, 1},   {1, 40},  {40, 1},  {2, 2},   {3, 8},
      {8, 3}, {5, 5}, {17, 17}, {33, 70}, {70, 33}, {64, 64}, {100, 129}};
  static const int ds[] = {1, 3, 64};
  static const int Bs[] = {1, 7};
  static const int tiles[] = {0, 4, 7, 32};
  const Shard shard = test_shard();
  std::vector<Case> out;
  int c = 0;
  for (const auto& shape : shapes)
    for (ref::Cost cost : kCosts)
      for (double gamma : kGammas) {
        Case k;
        k.n = shape[0];
        k.m = shape[1];
        k.d = ds[c % 3];
        k.B = Bs[(c / 3) % 2];
        k.setup.cost = cost;
        k.setup.gamma = gamma;
        k.setup.tile = tiles[(c / 2) % 4];
        if (c % 4 >= 2) k.setup.band = rng.integer(0, 3);
        if ((c / 5) % 2 == 1) {
          k.setup.len_x = random_lengths(rng, k.B, k.n);
          k.setup.len_y = random_lengths(rng, k.B, k.m);
        }
        if (with_grad_output && c % 3 == 1) {
          k.setup.grad_output.resize(k.B);
          for (double& g : k.setup.grad_output) g = rng.uniform(-2.0, 2.0);
          k.setup.grad_output[0] = 0.0;
        }
        if (c % shard.count == shard.index) out.push_back(k);
        ++c;
      }
  return out;
}

// Inputs for a case; cosine gets signed inputs (on [0, 1) its d = 1 costs are
// all 0). Rounded to T so the reference sees the library's inputs.
template <class T>
std::pair<Batch, Batch> case_inputs(Rng& rng, const Case& k) {
  const double lo = k.setup.cost == ref::Cost::cosine ? -1.0 : 0.0;
  Batch x = random_batch(rng, k.B, k.n, k.d, lo, 1.0);
  Batch y = random_batch(rng, k.B, k.m, k.d, lo, 1.0);
  round_to<T>(x);
  round_to<T>(y);
  return {x, y};
}

// Largest cost of the pair (x_i, y_j) over its valid region.
inline double max_cost(const Batch& x, int i, const Batch& y, int j,
                       const Config& s) {
  const ref::Table t = ref::cost_table(x.series(i, s.nx(i, x.n)),
                                       y.series(j, s.ny(j, y.n)), s.cost);
  double c = 0.0;
  for (double e : t.a) c = std::max(c, std::fabs(e));
  return c;
}
// Largest cost over every pair's valid region (scales tolerances): pairs
// (x_b, y_b), or with all_pairs every (x_i, y_j) as in pairwise matrices.
inline double max_cost(const Batch& x, const Batch& y, const Config& s,
                       bool all_pairs = false) {
  double c = 0.0;
  for (int i = 0; i < x.B; ++i)
    for (int j = all_pairs ? 0 : i; j < (all_pairs ? y.B : i + 1); ++j)
      c = std::max(c, max_cost(x, i, y, j, s));
  return c;
}

// The natural scale of a gradient entry: the largest magnitude of the terms
// that make up one cell's ∂δ/∂x_i or ∂δ/∂y_j, over every pair's valid region.
// Gradients may cancel far below it (a d = 1 cosine cost is flat, its true
// gradient 0 is a difference of two terms of size 1/‖x‖), and rounding is
// then measured against the terms, not against the cancelled result.
inline double max_cost_gradient(const Batch& x, const Batch& y,
                                const Config& s) {
  double g = 0.0;
  for (int b = 0; b < x.B; ++b) {
    const ref::Series xs = x.series(b, s.nx(b, x.n)),
                      ys = y.series(b, s.ny(b, y.n));
    if (s.cost == ref::Cost::l1) return 1.0;
    if (s.cost == ref::Cost::cosine) {
      for (int i = 0; i < xs.n; ++i)
        g = std::max(
            g, 2.0 / std::max(ref::norm(xs.row(i), x.d), ref::kCosineEps));
      for (int j = 0; j < ys.n; ++j)
        g = std::max(
            g, 2.0 / std::max(ref::norm(ys.row(j), y.d), ref::kCosineEps));
      continue;
    }
    for (int i = 0; i < xs.n; ++i)
      for (int j = 0; j < ys.n; ++j)
        for (int k = 0; k < x.d; ++k)
          g = std::max(g, 2.0 * std::fabs(xs(i, k) - ys(j, k)));
  }
  return g;
}

// Tolerances against the float64 reference.
//   values: relative, floor 1.
//   arrays (E, gradients): relative to the array's largest entry. In float64
//   the reference itself carries ~|R|·ε/γ of rounding in the soft-argmin
//   weights (measured against a long-double copy: ≤ 5e-10 at γ = 1e-3 with
//   |R| ≈ 2600), hence the |R|/γ term. In float32 the costs may be evaluated
//   in float, so errors of ~ε_f·C/γ per weight are legitimate.
template <class T>
double value_rtol() {
  return std::is_same_v<T, double> ? 1e-9 : 1e-5;
}
// Floor of the value tolerance: in float32 the costs (and the soft-min's
// exp/log) may be evaluated in float, so each of the ~N+M cells on the path
// legitimately carries ~ε_f·(C + γ) of rounding; a value that cancels to
// near 0 (large γ) is compared against that, not against 1. The allowance,
// 4·ε_f·√(N+M)·(C + γ), sits above the worst seen on the GPU over many
// seeds: 2.7·ε_f·√(N+M)·(C + γ) (specialised cost-tensor path, N = 100,
// M = 257, lengths 6 × 255, γ = 10, seed 16240078000898096068).
template <class T>
double value_floor(int n, int m, double gamma, double cost_scale) {
  if (std::is_same_v<T, double>) return 1.0;
  return std::max(1.0, 0.05 * std::sqrt(double(n + m)) * (cost_scale + gamma));
}
template <class T>
double value_floor(const Case& k, double cost_scale) {
  return value_floor<T>(k.n, k.m, k.setup.gamma, cost_scale);
}
// 16-bit outputs add their own rounding, half an ulp of the largest entry:
// at most 2^-8 of it for bfloat16, 2^-11 for float16 (8 and 11 significant
// bits; they are accumulated in float).
template <class T>
double array_rtol(double gamma, double value_scale, double cost_scale, int n,
                  int m) {
  if (std::is_same_v<T, double>)
    return 1e-9 + (gamma > 0.0 ? 2e-15 * value_scale / gamma : 0.0);
  double const rounding = std::is_same_v<T, softwave::bfloat16>  ? 0x1p-8
                          : std::is_same_v<T, softwave::float16> ? 0x1p-11
                                                                 : 0.0;
  return 1e-4 + rounding +
         (gamma > 0.0 ? 3e-7 * std::sqrt(double(n + m)) * cost_scale / gamma
                      : 0.0);
}

// Values only (soft_dtw) against the reference.
template <class T, class Space>
void check_values(const Space& space, const Case& k, const Batch& x,
                  const Batch& y) {
  const Results want = reference(x, y, k.setup);
  const std::vector<double> got = library_values<T>(space, x, y, k.setup);
  EXPECT_TRUE(near_values(got, want.values, value_rtol<T>(),
                          value_floor<T>(k, max_cost(x, y, k.setup)),
                          "values"));
}

// Whether E and the gradients are comparable: hard DTW picks one path, and a
// near-tie that float rounding (or exact ties of d = 1 cosine costs, ±1) can
// flip makes the path, not the code, differ.
template <class T>
bool arrays_comparable(const Case& k) {
  if (k.setup.gamma > 0.0) return true;
  if (!std::is_same_v<T, double>) return false;
  return !(k.setup.cost == ref::Cost::cosine && k.d == 1);
}

// Everything soft_dtw_value_and_grad returns, against the reference. The
// alignment is compared only when grad_output is all ones (E is defined
// without it; AlignmentIgnoresGradOutput checks the scaled case).
template <class T, class Space>
void check_value_and_grad(const Space& space, const Case& k, const Batch& x,
                          const Batch& y) {
  const Results want = reference(x, y, k.setup);
  const Results got = library_value_and_grad<T>(space, x, y, k.setup);
  EXPECT_TRUE(near_values(got.values, want.values, value_rtol<T>(),
                          value_floor<T>(k, max_cost(x, y, k.setup)),
                          "values"));
  if (!arrays_comparable<T>(k)) return;
  const double tol = array_rtol<T>(k.setup.gamma, max_abs(want.values),
                                   max_cost(x, y, k.setup), k.n, k.m);
  if (k.setup.grad_output.empty()) {
    EXPECT_TRUE(
        near_arrays(got.alignment, want.alignment, tol, 1.0, "alignment"));
  }
  const double gscale = std::max(
      max_cost_gradient(x, y, k.setup) * max_abs(k.setup.grad_output.empty()
                                                     ? std::vector<double>{1.0}
                                                     : k.setup.grad_output),
      1e-300);
  EXPECT_TRUE(near_arrays(got.grad_x, want.grad_x, tol, gscale, "grad_x"));
  EXPECT_TRUE(near_arrays(got.grad_y, want.grad_y, tol, gscale, "grad_y"));
}

// A cost tensor of case k (fresh entries in [0, 2), rounded to T): the
// values and grad_cost of soft_dtw_cost against the reference. grad_cost
// is skipped for hard DTW below double, where rounding may flip a near-tie.
template <class T, class Space>
void check_cost_tensor(const Space& space, Rng& rng, const Case& k) {
  Batch c = random_batch(rng, k.B, k.n, k.m, 0.0, 2.0);
  round_to<T>(c);
  const Results want = reference_cost(c, k.setup);
  const Results got = library_cost<T>(space, c, k.setup, true);
  EXPECT_TRUE(near_values(got.values, want.values, value_rtol<T>(),
                          value_floor<T>(k, 2.0), "values"));
  if (k.setup.gamma == 0.0 && !std::is_same_v<T, double>) return;
  const double tol =
      array_rtol<T>(k.setup.gamma, max_abs(want.values), 2.0, k.n, k.m);
  EXPECT_TRUE(
      near_arrays(got.alignment, want.alignment, tol, 1.0, "grad_cost"));
}

// The gradients in `got` against central differences of
// Σ_b grad_output[b] · values(x, y)[b], the objective they are gradients of.
template <class Values>
void expect_central_differences(const Results& got, const Batch& x,
                                const Batch& y, const Config& s, double h,
                                const Values& values) {
  auto objective = [&](const Batch& xx, const Batch& yy) {
    const std::vector<double> v = values(xx, yy);
    double sum = 0;
    for (std::size_t b = 0; b < v.size(); ++b) sum += s.grad_output[b] * v[b];
    return sum;
  };
  const auto [fd_x, fd_y] = central_differences(x, y, s, h, objective);
  EXPECT_TRUE(near_arrays(got.grad_x, fd_x, 1e-5, 1e-3,
                          "grad_x vs finite differences"));
  EXPECT_TRUE(near_arrays(got.grad_y, fd_y, 1e-5, 1e-3,
                          "grad_y vs finite differences"));
}

// The labels a Kokkos tool callback records while `call` runs: install()
// sets the callback (which adds to recorded_labels()), for the call only.
inline std::set<std::string>& recorded_labels() {
  static std::set<std::string> labels;
  return labels;
}
template <class Install, class F>
std::set<std::string> labels_during(const Install& install, F&& call) {
  namespace tools = Kokkos::Tools::Experimental;
  recorded_labels().clear();
  Kokkos::fence();
  tools::EventSet const saved = tools::get_callbacks();
  install();
  call();
  Kokkos::fence();
  tools::set_callbacks(saved);
  return recorded_labels();
}

// The labels of the kernels `call` launches.
template <class F>
std::set<std::string> kernel_labels(F&& call) {
  return labels_during(
      [] {
        Kokkos::Tools::Experimental::set_begin_parallel_for_callback(
            [](const char* label, std::uint32_t, std::uint64_t*) {
              recorded_labels().insert(label);
            });
      },
      call);
}

// The labels of the arrays `call` allocates.
template <class F>
std::set<std::string> allocation_labels(F&& call) {
  return labels_during(
      [] {
        Kokkos::Tools::Experimental::set_allocate_data_callback(
            [](Kokkos::Profiling::SpaceHandle, const char* label, const void*,
               std::uint64_t) { recorded_labels().insert(label); });
      },
      call);
}

}  // namespace swt
