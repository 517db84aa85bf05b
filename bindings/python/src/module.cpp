// softwave._core: the nanobind glue. Arrays arrive through DLPack (numpy,
// torch, jax, cupy: anything nanobind's ndarray accepts) and are passed on
// as Borrowed descriptors, zero copy. The pure-Python package (softwave/)
// allocates outputs with the caller's framework, so memory stays in its
// allocator (torch's caching allocator on CUDA) and on its stream.
// softwave::invalid_argument derives from std::invalid_argument, which
// nanobind raises as ValueError with the same message.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <optional>
#include <stdexcept>
#include <string>

#include "dispatch.hpp"
#include "torch_bridge.hpp"
#ifdef SOFTWAVE_JAX_FFI
#include "jax_ffi.hpp"
#endif

namespace nb = nanobind;
using namespace nb::literals;

namespace softwave::python {
namespace {

// Any dtype, device and layout: checked below, so a bad array gets an
// error naming its argument instead of nanobind's generic overload error.
using AnyArray = nb::ndarray<nb::ro>;
using Optional = std::optional<AnyArray>;

DType dtype_of(const nb::dlpack::dtype& dtype) {
  if (dtype == nb::dtype<float>()) return DType::float32;
  if (dtype == nb::dtype<double>()) return DType::float64;
  if (dtype == nb::dtype<std::int32_t>()) return DType::int32;
  if (dtype == nb::dtype<std::int64_t>()) return DType::int64;
  if (dtype.bits == 16 && dtype.lanes == 1) {
    if (dtype.code == std::uint8_t(nb::dlpack::dtype_code::Bfloat))
      return DType::bfloat16;
    if (dtype.code == std::uint8_t(nb::dlpack::dtype_code::Float))
      return DType::float16;
  }
  return DType::other;
}

Borrowed borrow(const char* name, const Optional& array) {
  Borrowed b;
  b.name = name;
  if (!array) return b;
  const AnyArray& a = *array;
  b.dtype = dtype_of(a.dtype());
  const int device = a.device_type();
  b.device = device == nb::device::cpu::value    ? Device::cpu
             : device == nb::device::cuda::value ? Device::cuda
                                                 : Device::other;
  b.device_id = a.device_id();
  b.shape.resize(a.ndim());
  // C-contiguous: strides (in elements) are the suffix products of the
  // shape; extents of 1 may carry any stride, and so may every extent of an
  // empty array (torch gives (2, 0, 3) the strides (3, 3, 1)), which holds
  // nothing to lay out.
  bool empty = false;
  for (std::size_t i = 0; i < a.ndim(); ++i) empty = empty || a.shape(i) == 0;
  std::int64_t expected = 1;
  for (std::size_t i = a.ndim(); i-- > 0;) {
    b.shape[i] = static_cast<std::int64_t>(a.shape(i));
    if (!empty && a.shape(i) != 1 && a.stride(i) != expected)
      throw std::invalid_argument(std::string("softwave: ") + name +
                                  " must be C-contiguous");
    expected *= static_cast<std::int64_t>(a.shape(i));
  }
  // An empty array has no data pointer to speak of; the library's own
  // extent checks then report it by name.
  b.data = const_cast<void*>(a.data());
  if (b.data == nullptr) b.data = &b;  // "given", never dereferenced
  return b;
}

// Every array of a call's dict (None: absent) by its name. Each
// Borrowed::name points into its map key, which a move of the map keeps
// in place.
OTArrays borrow_all(const nb::dict& arrays) {
  OTArrays borrowed;
  for (auto [key, value] : arrays) {
    if (value.is_none()) continue;
    std::string const name = nb::cast<std::string>(key);
    auto const at = borrowed.emplace(name, Borrowed{}).first;
    at->second = borrow(at->first.c_str(), nb::cast<AnyArray>(value));
  }
  return borrowed;
}

Settings settings_of(double gamma, const std::string& dist, std::int64_t band,
                     const std::string& kernel, std::uintptr_t stream,
                     bool check = true) {
  Settings s;
  s.gamma = gamma;
  s.cost = dist;
  s.band = band;
  s.kernel = kernel;
  s.stream = stream;
  s.check_values = check;
  return s;
}

}  // namespace
}  // namespace softwave::python

NB_MODULE(_core, m) {
  using namespace softwave::python;
  m.doc() =
      "softwave's compiled core. Use the softwave.torch, softwave.numpy and "
      "softwave.jax front ends; these functions take preallocated, "
      "C-contiguous outputs and check shapes, dtypes and devices.";

  m.def(
      "soft_dtw",
      [](AnyArray x, AnyArray y, AnyArray values, Optional grad_x,
         Optional grad_y, Optional alignment, Optional grad_output,
         Optional lengths_x, Optional lengths_y, double gamma,
         const std::string& dist, std::int64_t band, const std::string& kernel,
         bool divergence, std::uintptr_t stream, bool check) {
        const auto bx = borrow("x", x), by = borrow("y", y),
                   bv = borrow("values", values), gx = borrow("grad_x", grad_x),
                   gy = borrow("grad_y", grad_y),
                   ba = borrow("alignment", alignment),
                   go = borrow("grad_output", grad_output),
                   lx = borrow("lengths_x", lengths_x),
                   ly = borrow("lengths_y", lengths_y);
        nb::gil_scoped_release release;
        soft_dtw(settings_of(gamma, dist, band, kernel, stream, check), bx, by,
                 bv, gx, gy, ba, go, lx, ly, divergence);
      },
      "x"_a, "y"_a, "values"_a, "grad_x"_a.none(), "grad_y"_a.none(),
      "alignment"_a.none(), "grad_output"_a.none(), "lengths_x"_a.none(),
      "lengths_y"_a.none(), "gamma"_a, "dist"_a, "band"_a, "kernel"_a,
      "divergence"_a, "stream"_a, "check"_a = true);

  m.def(
      "soft_dtw_cost",
      [](AnyArray cost, AnyArray values, Optional grad_cost,
         Optional grad_output, Optional lengths_x, Optional lengths_y,
         double gamma, std::int64_t band, const std::string& kernel,
         std::uintptr_t stream, bool check) {
        const auto bc = borrow("cost", cost), bv = borrow("values", values),
                   gc = borrow("grad_cost", grad_cost),
                   go = borrow("grad_output", grad_output),
                   lx = borrow("lengths_x", lengths_x),
                   ly = borrow("lengths_y", lengths_y);
        nb::gil_scoped_release release;
        soft_dtw_cost(
            settings_of(gamma, "sqeuclidean", band, kernel, stream, check), bc,
            bv, gc, go, lx, ly);
      },
      "cost"_a, "values"_a, "grad_cost"_a.none(), "grad_output"_a.none(),
      "lengths_x"_a.none(), "lengths_y"_a.none(), "gamma"_a, "band"_a,
      "kernel"_a, "stream"_a, "check"_a = true);

  m.def(
      "pairwise",
      [](AnyArray x, AnyArray y, AnyArray matrix, Optional lengths_x,
         Optional lengths_y, double gamma, const std::string& dist,
         std::int64_t band, const std::string& kernel, bool divergence,
         std::uintptr_t stream, bool check) {
        const auto bx = borrow("x", x), by = borrow("y", y),
                   bm = borrow("matrix", matrix),
                   lx = borrow("lengths_x", lengths_x),
                   ly = borrow("lengths_y", lengths_y);
        nb::gil_scoped_release release;
        pairwise(settings_of(gamma, dist, band, kernel, stream, check), bx, by,
                 bm, lx, ly, divergence);
      },
      "x"_a, "y"_a, "matrix"_a, "lengths_x"_a.none(), "lengths_y"_a.none(),
      "gamma"_a, "dist"_a, "band"_a, "kernel"_a, "divergence"_a, "stream"_a,
      "check"_a = true);

  m.def(
      "nearest_neighbours",
      [](AnyArray queries, AnyArray references, AnyArray indices,
         AnyArray distances, Optional lengths_x, Optional lengths_y,
         const std::string& dist, std::int64_t band, std::uintptr_t stream,
         bool check) {
        const auto bq = borrow("x", queries), br = borrow("y", references),
                   bi = borrow("indices", indices),
                   bd = borrow("distances", distances),
                   lx = borrow("lengths_x", lengths_x),
                   ly = borrow("lengths_y", lengths_y);
        nb::gil_scoped_release release;
        return nearest_neighbours(
            settings_of(0.0, dist, band, "automatic", stream, check), bq, br,
            bi, bd, lx, ly);
      },
      "x"_a, "y"_a, "indices"_a, "distances"_a, "lengths_x"_a.none(),
      "lengths_y"_a.none(), "dist"_a, "band"_a, "stream"_a, "check"_a = true);

  m.def(
      "dtw_path",
      [](AnyArray x, AnyArray y, AnyArray values, AnyArray path,
         AnyArray path_length, Optional lengths_x, Optional lengths_y,
         const std::string& dist, std::int64_t band, std::uintptr_t stream,
         bool check) {
        const auto bx = borrow("x", x), by = borrow("y", y),
                   bv = borrow("values", values), bp = borrow("path", path),
                   bl = borrow("path_length", path_length),
                   lx = borrow("lengths_x", lengths_x),
                   ly = borrow("lengths_y", lengths_y);
        nb::gil_scoped_release release;
        dtw_path(settings_of(0.0, dist, band, "automatic", stream, check), bx,
                 by, bv, bp, bl, lx, ly);
      },
      "x"_a, "y"_a, "values"_a, "path"_a, "path_length"_a, "lengths_x"_a.none(),
      "lengths_y"_a.none(), "dist"_a, "band"_a, "stream"_a, "check"_a = true);

  m.def(
      "barycenter",
      [](AnyArray X, AnyArray z, Optional weights, Optional lengths,
         double gamma, const std::string& dist, std::int64_t band,
         const std::string& kernel, const std::string& method, int max_iter,
         double tol, int history, double learning_rate, std::uintptr_t stream) {
        const auto bX = borrow("X", X), bz = borrow("init", z),
                   bw = borrow("weights", weights),
                   bl = borrow("lengths", lengths);
        BarycenterSettings optimiser;
        optimiser.method = method;
        optimiser.max_iter = max_iter;
        optimiser.tol = tol;
        optimiser.history = history;
        optimiser.learning_rate = learning_rate;
        BarycenterResult result;
        {
          nb::gil_scoped_release release;
          result = barycenter(settings_of(gamma, dist, band, kernel, stream),
                              optimiser, bX, bz, bw, bl);
        }
        nb::dict report;
        report["iterations"] = result.iterations;
        report["evaluations"] = result.evaluations;
        report["objective"] = result.objective;
        report["converged"] = result.converged;
        return report;
      },
      "X"_a, "z"_a, "weights"_a.none(), "lengths"_a.none(), "gamma"_a, "dist"_a,
      "band"_a, "kernel"_a, "method"_a, "max_iter"_a, "tol"_a, "history"_a,
      "learning_rate"_a, "stream"_a);

  // [(name, platform, capsule)] of the XLA FFI handlers for
  // jax.ffi.register_ffi_target; empty in a build without jaxlib's headers.

  m.def(
      "optimal_transport",
      [](const std::string& operation, nb::dict arrays, nb::dict settings) {
        OTSettings s;
        for (auto [key, value] : settings) {
          std::string const name = nb::cast<std::string>(key);
          if (name == "epsilon")
            s.epsilon = nb::cast<double>(value);
          else if (name == "epsilon_relative")
            s.epsilon_relative = nb::cast<bool>(value);
          else if (name == "epsilon_scaling")
            s.epsilon_scaling = nb::cast<double>(value);
          else if (name == "rho_a")
            s.rho_a = nb::cast<double>(value);
          else if (name == "rho_b")
            s.rho_b = nb::cast<double>(value);
          else if (name == "max_iterations")
            s.max_iterations = nb::cast<int>(value);
          else if (name == "tolerance")
            s.tolerance = nb::cast<double>(value);
          else if (name == "check_every")
            s.check_every = nb::cast<int>(value);
          else if (name == "warm_start")
            s.warm_start = nb::cast<bool>(value);
          else if (name == "check")
            s.check_values = nb::cast<bool>(value);
          else if (name == "cost")
            s.cost = nb::cast<std::string>(value);
          else if (name == "kernel")
            s.kernel = nb::cast<std::string>(value);
          else if (name == "seed")
            s.seed = nb::cast<std::uint64_t>(value);
          else if (name == "stream")
            s.stream = nb::cast<std::uintptr_t>(value);
          else
            throw std::invalid_argument("softwave: unknown setting '" + name +
                                        "'");
        }
        OTArrays const borrowed = borrow_all(arrays);
        nb::gil_scoped_release release;
        optimal_transport(operation, s, borrowed);
      },
      "operation"_a, "arrays"_a, "settings"_a);

  m.def(
      "sinkhorn_plan_vjp",
      [](nb::dict arrays, double epsilon, double rho_a, double rho_b,
         const std::string& mode, int iterations, double tolerance, bool check,
         std::uintptr_t stream) {
        OTSettings s;
        s.epsilon = epsilon;
        s.rho_a = rho_a;
        s.rho_b = rho_b;
        s.check_values = check;
        s.stream = stream;
        OTArrays const borrowed = borrow_all(arrays);
        PlanVjpReport r;
        {
          nb::gil_scoped_release release;
          r = plan_vjp(s, mode, iterations, tolerance, borrowed);
        }
        nb::dict report;
        report["iterations"] = r.iterations;
        report["residual"] = r.residual;
        report["converged"] = r.converged;
        return report;
      },
      "arrays"_a, "epsilon"_a, "rho_a"_a, "rho_b"_a, "mode"_a, "iterations"_a,
      "tolerance"_a, "check"_a, "stream"_a);

  m.def(
      "gromov_wasserstein",
      [](nb::dict arrays, nb::dict settings) {
        GwSettings s;
        for (auto [key, value] : settings) {
          std::string const name = nb::cast<std::string>(key);
          if (name == "distance_mode")
            s.distance_mode = nb::cast<std::string>(value);
          else if (name == "k")
            s.k = nb::cast<int>(value);
          else if (name == "n_landmarks")
            s.n_landmarks = nb::cast<int>(value);
          else if (name == "anchors")
            s.anchors = nb::cast<int>(value);
          else if (name == "alpha")
            s.alpha = nb::cast<double>(value);
          else if (name == "max_iterations")
            s.max_iterations = nb::cast<int>(value);
          else if (name == "min_iterations")
            s.min_iterations = nb::cast<int>(value);
          else if (name == "tolerance")
            s.tolerance = nb::cast<double>(value);
          else if (name == "check_every")
            s.check_every = nb::cast<int>(value);
          else if (name == "check_rows")
            s.check_rows = nb::cast<int>(value);
          else if (name == "epsilon")
            s.epsilon = nb::cast<double>(value);
          else if (name == "rho_a")
            s.rho_a = nb::cast<double>(value);
          else if (name == "rho_b")
            s.rho_b = nb::cast<double>(value);
          else if (name == "sinkhorn_iterations")
            s.sinkhorn_iterations = nb::cast<int>(value);
          else if (name == "sinkhorn_tolerance")
            s.sinkhorn_tolerance = nb::cast<double>(value);
          else if (name == "early_sinkhorn_iterations")
            s.early_sinkhorn_iterations = nb::cast<int>(value);
          else if (name == "mixed_precision")
            s.mixed_precision = nb::cast<bool>(value);
          else if (name == "seed")
            s.seed = nb::cast<std::uint64_t>(value);
          else if (name == "restarts")
            s.restarts = nb::cast<int>(value);
          else if (name == "restart_iterations")
            s.restart_iterations = nb::cast<int>(value);
          else if (name == "fused_alpha")
            s.fused_alpha = nb::cast<double>(value);
          else if (name == "cost_ema_beta")
            s.cost_ema_beta = nb::cast<double>(value);
          else if (name == "exact_iterations")
            s.exact_iterations = nb::cast<int>(value);
          else if (name == "polish_anchors")
            s.polish_anchors = nb::cast<int>(value);
          else if (name == "coupling_rank")
            s.coupling_rank = nb::cast<int>(value);
          else if (name == "coupling_step")
            s.coupling_step = nb::cast<double>(value);
          else if (name == "coupling_iterations")
            s.coupling_iterations = nb::cast<int>(value);
          else if (name == "dykstra_iterations")
            s.dykstra_iterations = nb::cast<int>(value);
          else if (name == "dykstra_tolerance")
            s.dykstra_tolerance = nb::cast<double>(value);
          else if (name == "exact_objective_entries")
            s.exact_objective_entries = nb::cast<std::int64_t>(value);
          else if (name == "dense_cost_entries")
            s.dense_cost_entries = nb::cast<std::int64_t>(value);
          else if (name == "objective_samples")
            s.objective_samples = nb::cast<int>(value);
          else if (name == "warm_start")
            s.warm_start = nb::cast<bool>(value);
          else if (name == "multiscale_points")
            s.multiscale_points = nb::cast<int>(value);
          else if (name == "check")
            s.check_values = nb::cast<bool>(value);
          else if (name == "objective")
            s.compute_objective = nb::cast<bool>(value);
          else if (name == "kernel")
            s.kernel = nb::cast<std::string>(value);
          else if (name == "shortest_paths")
            s.shortest_paths = nb::cast<std::string>(value);
          else if (name == "stream")
            s.stream = nb::cast<std::uintptr_t>(value);
          else
            throw std::invalid_argument("softwave: unknown setting '" + name +
                                        "'");
        }
        OTArrays const borrowed = borrow_all(arrays);
        GwReport r;
        {
          nb::gil_scoped_release release;
          r = gromov_wasserstein(s, borrowed);
        }
        nb::list changes, restart_objectives, source_anchors, target_anchors;
        for (double c : r.changes) changes.append(c);
        for (double c : r.restart_objectives) restart_objectives.append(c);
        for (int i : r.source_anchors) source_anchors.append(i);
        for (int i : r.target_anchors) target_anchors.append(i);
        nb::dict report;
        report["iterations"] = r.iterations;
        report["converged"] = r.converged;
        report["seed"] = r.seed;
        report["objective"] = r.objective;
        report["objective_error"] = r.objective_error;
        report["linear_objective"] = r.linear_objective;
        report["linear_objective_error"] = r.linear_objective_error;
        report["last_change"] = r.last_change;
        report["changes"] = changes;
        report["restart_objectives"] = restart_objectives;
        report["source_scale"] = r.source_scale;
        report["target_scale"] = r.target_scale;
        report["final_epsilon"] = r.final_epsilon;
        report["dense_solves"] = r.dense_solves;
        report["polish_anchors"] = r.polish_anchors;
        report["last_plan_weight"] = r.last_plan_weight;
        report["source_anchors"] = source_anchors;
        report["target_anchors"] = target_anchors;
        report["joined_components"] = r.joined_components;
        return report;
      },
      "arrays"_a, "settings"_a);

  // The graph's arrays as bytes (one copy, read with numpy.frombuffer): a
  // graph of N points has about 2kN edges, too many for Python lists.
  m.def(
      "knn_graph",
      [](nb::dict arrays, int k, std::uintptr_t stream) {
        KnnGraphReport graph;
        {
          OTArrays const borrowed = borrow_all(arrays);
          nb::gil_scoped_release release;
          graph = knn_graph(borrowed, k, stream);
        }
        auto bytes = [](const auto& v) {
          return nb::bytes(reinterpret_cast<const char*>(v.data()),
                           v.size() * sizeof(v[0]));
        };
        return nb::make_tuple(bytes(graph.offsets), bytes(graph.targets),
                              bytes(graph.lengths), graph.joined_components);
      },
      "arrays"_a, "k"_a, "stream"_a);

  m.def(
      "deer_rnn",
      [](const std::string& operation, nb::dict arrays, nb::dict settings) {
        DeerSettings s;
        for (auto [key, value] : settings) {
          std::string const name = nb::cast<std::string>(key);
          if (name == "cell")
            s.cell = nb::cast<std::string>(value);
          else if (name == "method")
            s.method = nb::cast<std::string>(value);
          else if (name == "jacobian")
            s.jacobian = nb::cast<std::string>(value);
          else if (name == "kernel")
            s.kernel = nb::cast<std::string>(value);
          else if (name == "atol")
            s.atol = nb::cast<double>(value), s.atol_given = true;
          else if (name == "rtol")
            s.rtol = nb::cast<double>(value), s.rtol_given = true;
          else if (name == "max_iterations")
            s.max_iterations = nb::cast<int>(value);
          else if (name == "chunk")
            s.chunk = nb::cast<int>(value);
          else if (name == "start_warm_up")
            s.start_warm_up = nb::cast<int>(value);
          else if (name == "damping")
            s.damping = nb::cast<double>(value);
          else if (name == "block_size")
            s.block_size = nb::cast<int>(value);
          else if (name == "block_layout")
            s.block_layout = nb::cast<std::string>(value);
          else if (name == "diagonal")
            s.diagonal = nb::cast<bool>(value);
          else if (name == "warm_start")
            s.warm_start = nb::cast<bool>(value);
          else if (name == "check")
            s.check_values = nb::cast<bool>(value);
          else if (name == "check_every")
            s.check_every = nb::cast<int>(value);
          else if (name == "stream")
            s.stream = nb::cast<std::uintptr_t>(value);
          else
            throw std::invalid_argument("softwave: unknown setting '" + name +
                                        "'");
        }
        OTArrays const borrowed = borrow_all(arrays);
        nb::gil_scoped_release release;
        deer_rnn(operation, s, borrowed);
      },
      "operation"_a, "arrays"_a, "settings"_a);

  m.def(
      "linear_recurrence",
      [](const std::string& operation, nb::dict arrays, nb::dict settings) {
        ScanSettings s;
        for (auto [key, value] : settings) {
          std::string const name = nb::cast<std::string>(key);
          if (name == "reverse")
            s.reverse = nb::cast<bool>(value);
          else if (name == "kernel")
            s.kernel = nb::cast<std::string>(value);
          else if (name == "check")
            s.check_values = nb::cast<bool>(value);
          else if (name == "stream")
            s.stream = nb::cast<std::uintptr_t>(value);
          else
            throw std::invalid_argument("softwave: unknown setting '" + name +
                                        "'");
        }
        OTArrays const borrowed = borrow_all(arrays);
        nb::gil_scoped_release release;
        linear_recurrence(operation, s, borrowed);
      },
      "operation"_a, "arrays"_a, "settings"_a);

  m.def("jax_ffi_targets", []() {
    nb::list targets;
#ifdef SOFTWAVE_JAX_FFI
    for (const FfiTarget& t : ffi_targets())
      targets.append(
          nb::make_tuple(t.name, t.platform, nb::capsule(t.handler)));
#endif
    return targets;
  });

  // The table softwave._torch_native's operators call the core through.
  m.def("torch_bridge", []() {
    return nb::capsule(torch_bridge::table(), torch_bridge::capsule_name);
  });

  m.def("initialize", &initialize);
  m.def("finalize", &finalize);
  m.def("default_space", &default_space);
  m.def("host_space", &host_space);
  m.def("has_cuda", &has_cuda);
  m.def("cuda_device", &cuda_device);
  m.def(
      "synchronize",
      [](std::uintptr_t stream) {
        nb::gil_scoped_release release;
        synchronize(stream);
      },
      "stream"_a);
}
