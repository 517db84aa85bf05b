"""JAX front end: Soft-DTW, entropic OT (``sinkhorn``,
``sinkhorn_divergence``), DEER (``deer_rnn``, ``deer_gru``, ``deer_lstm``,
``deer_neural_ode``) and its scan (``linear_recurrence``) with
``custom_vjp``, usable under ``jit``.

The compiled core is called as an XLA FFI target (``jax.ffi.ffi_call``):
inside a jitted program it runs on XLA's own buffers, on the CPU or, in a
CUDA build of softwave, on the GPU on XLA's stream, with no copy and no host
callback. A build made without jaxlib's FFI headers (see
bindings/python/CMakeLists.txt), or a backend the build has no target for,
reaches the core through ``jax.pure_callback`` instead (on a GPU backend a
device-to-host copy each way). ``softwave.jax.uses_ffi()`` tells which.
float32 runs as float32, float64 (with ``jax_enable_x64``) as float64;
bfloat16 and float16 are read as they are and accumulated in float32.
Series are (B, N, d), (N, d) or (N,), as in ``softwave.numpy`` (B = 0 gives
empty results; N = 0 or d = 0 is a ValueError, raised while tracing). First
derivatives only: ``jax.grad`` and ``jax.vjp`` work, while second derivatives
(``jax.hessian``, ``jax.grad`` of ``jax.grad``) raise NotImplementedError.

Example::

    import jax, jax.numpy as jnp
    from softwave.jax import soft_dtw
    x, y = jnp.ones((4, 50, 2)), jnp.zeros((4, 60, 2))
    loss = lambda x: soft_dtw(x, y, gamma=0.1).sum()
    g = jax.jit(jax.grad(loss))(x)
"""

from __future__ import annotations

from functools import partial
from typing import Any, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
from jax.custom_derivatives import SymbolicZero

from . import _core, _engine
from . import numpy as _swn
from ._common import Options, bandwidth_of, check_batches, check_extents, options

__all__ = ["soft_dtw", "soft_dtw_divergence", "soft_dtw_cost", "soft_dtw_alignment", "pairwise", "dtw", "sinkhorn",
           "sinkhorn_divergence", "SinkhornOutput", "deer_rnn", "deer_gru", "deer_lstm", "deer_neural_ode",
           "DeerOutput", "linear_recurrence", "uses_ffi"]


def _register_ffi_targets():
    """Registers the core's XLA FFI handlers with JAX; returns the
    platforms ("cpu", "cuda") each target name has."""
    platforms = {}
    if not hasattr(jax, "ffi"):  # JAX before 0.4.38
        return platforms
    for name, platform, capsule in _core.jax_ffi_targets():
        jax.ffi.register_ffi_target(name, capsule, platform=platform)
        platforms.setdefault(name, set()).add(platform.lower())
    return platforms


_FFI_PLATFORMS = _register_ffi_targets()


def uses_ffi(backend=None) -> bool:
    """Whether calls on `backend` (default: JAX's default backend) run as
    XLA FFI targets (True) or through jax.pure_callback (False)."""
    backend = backend or jax.default_backend()
    platform = "cuda" if backend == "gpu" else backend
    return bool(_FFI_PLATFORMS) and all(platform in p for p in _FFI_PLATFORMS.values())


def _value_dtype(dtype):
    """The core's dtype of values for inputs of dtype (float32 for 16-bit)."""
    return jnp.float32 if jnp.dtype(dtype).itemsize == 2 else jnp.dtype(dtype)


def _attributes(opts: Options, **more):
    return dict(gamma=np.float64(opts.gamma), dist=opts.dist, band=np.int64(opts.band), kernel=opts.kernel, **more)


def _call(target, shapes, operands, host, attributes):
    """The core's FFI `target` on `operands` (a tuple of results shaped as
    `shapes`), or host(*operands) through pure_callback where this backend
    has no FFI target."""
    if uses_ffi():
        return tuple(jax.ffi.ffi_call(target, tuple(shapes), vmap_method="sequential")(*operands, **attributes))
    return tuple(_callback(host, tuple(shapes), *operands))


def _callback(function, shapes, *args):
    """pure_callback, batched pair by pair under vmap."""
    try:
        return jax.pure_callback(function, shapes, *args, vmap_method="sequential")
    except TypeError:  # JAX before 0.4.34 spells it `vectorized`
        return jax.pure_callback(function, shapes, *args, vectorized=False)


def _float(name, a):
    a = jnp.asarray(a)
    if not jnp.issubdtype(a.dtype, jnp.floating):
        a = a.astype(jnp.result_type(float))
    return a


def _lengths(lengths, batch):
    """Lengths as an int32 (B,) array, or a (0,) placeholder for 'full'."""
    if lengths is None:
        return jnp.zeros((0,), jnp.int32)
    return jnp.asarray(lengths, dtype=jnp.int32).reshape(batch)


def _host_lengths(lengths):
    lengths = np.asarray(lengths)
    return None if lengths.size == 0 else lengths


def _batched(x, y):
    x, y = _float("x", x), _float("y", y)
    dtype = jnp.promote_types(x.dtype, y.dtype)
    if x.ndim != y.ndim or x.ndim not in (1, 2, 3):
        raise ValueError(
            f"softwave: x and y must both be (B, N, d), (N, d) or (N,) (got {x.ndim} and {y.ndim} dimensions)"
        )
    single = x.ndim < 3
    if x.ndim == 1:
        x, y = x[None, :, None], y[None, :, None]
    elif x.ndim == 2:
        x, y = x[None], y[None]
    check_batches(x.shape, y.shape)  # shapes are static: refused here, not inside the callback
    return x.astype(dtype), y.astype(dtype), single


_SECOND_ORDER = (
    "softwave: second derivatives (jax.hessian, jax.grad of jax.grad, or any derivative of a softwave "
    "gradient) are not supported: the gradients come from the compiled core, which has no derivative of its own. "
    "Wrap the gradient in jax.lax.stop_gradient to use it as a value"
)


def _first_order_only(nondiff_argnums):
    """A custom_vjp's forward pass (values and gradients from the core) behind
    a custom_jvp that refuses to be differentiated: differentiating a
    softwave gradient then fails with softwave's message instead of JAX's
    advice about pure callbacks."""

    def wrap(function):
        function = jax.custom_jvp(function, nondiff_argnums=nondiff_argnums)

        @function.defjvp
        def _refuse(*args):
            raise NotImplementedError(_SECOND_ORDER)

        return function

    return wrap


# --- series ---------------------------------------------------------------


def _series_values(opts: Options, divergence: bool, x, y, lx, ly):
    def host(x, y, lx, ly):
        function = _swn.soft_dtw_divergence if divergence else _swn.soft_dtw
        return (np.asarray(function(np.asarray(x), np.asarray(y), opts.gamma, bandwidth=_bw(opts), dist=opts.dist,
                                    lengths_x=_host_lengths(lx), lengths_y=_host_lengths(ly), kernel=opts.kernel),
                           dtype=_value_dtype(x.dtype)),)

    shapes = (jax.ShapeDtypeStruct((x.shape[0],), _value_dtype(x.dtype)),)
    (values,) = _call("softwave_soft_dtw", shapes, (x, y, lx, ly), host, _attributes(opts, divergence=divergence))
    return values.astype(x.dtype)


@_first_order_only(nondiff_argnums=(0, 1))
def _series_value_and_grad(opts: Options, divergence: bool, x, y, lx, ly):
    def host(x, y, lx, ly):
        function = _swn.soft_dtw_divergence_value_and_grad if divergence else _swn.soft_dtw_value_and_grad
        v, gx, gy = function(np.asarray(x), np.asarray(y), opts.gamma, bandwidth=_bw(opts), dist=opts.dist,
                             lengths_x=_host_lengths(lx), lengths_y=_host_lengths(ly), kernel=opts.kernel)
        return np.asarray(v, dtype=_value_dtype(x.dtype)), gx, gy

    shapes = (jax.ShapeDtypeStruct((x.shape[0],), _value_dtype(x.dtype)), jax.ShapeDtypeStruct(x.shape, x.dtype),
              jax.ShapeDtypeStruct(y.shape, y.dtype))
    values, gx, gy = _call("softwave_soft_dtw", shapes, (x, y, lx, ly), host,
                           _attributes(opts, divergence=divergence))
    return values.astype(x.dtype), gx, gy


def _bw(opts: Options):
    """opts' band as the bandwidth argument of softwave.numpy (which reads 0 as no band)."""
    return bandwidth_of(opts.band)


@partial(jax.custom_vjp, nondiff_argnums=(0, 1))
def _series(opts, divergence, x, y, lx, ly):
    return _series_values(opts, divergence, x, y, lx, ly)


def _series_fwd(opts, divergence, x, y, lx, ly):
    values, gx, gy = _series_value_and_grad(opts, divergence, x, y, lx, ly)
    return values, (gx, gy)


def _series_bwd(opts, divergence, residuals, g):
    gx, gy = residuals
    scale = g[:, None, None]
    return gx * scale, gy * scale, None, None


_series.defvjp(_series_fwd, _series_bwd)


def soft_dtw(x, y, gamma: float = 1.0, *, bandwidth=None, dist: str = "sqeuclidean", lengths_x=None,
             lengths_y=None, kernel: str = "automatic"):
    """Soft-DTW values (B,) (a scalar for one pair), differentiable w.r.t. x
    and y with ``jax.grad``/``jax.vjp``; works under ``jit`` and ``vmap``."""
    opts = options(gamma, bandwidth, dist, kernel)
    x3, y3, single = _batched(x, y)
    values = _series(opts, False, x3, y3, _lengths(lengths_x, x3.shape[0]), _lengths(lengths_y, x3.shape[0]))
    return values[0] if single else values


def soft_dtw_divergence(x, y, gamma: float = 1.0, *, bandwidth=None, dist: str = "sqeuclidean", lengths_x=None,
                        lengths_y=None, kernel: str = "automatic"):
    """Soft-DTW divergence (≥ 0, zero iff x = y), differentiable."""
    opts = options(gamma, bandwidth, dist, kernel)
    x3, y3, single = _batched(x, y)
    values = _series(opts, True, x3, y3, _lengths(lengths_x, x3.shape[0]), _lengths(lengths_y, x3.shape[0]))
    return values[0] if single else values


# --- cost tensor ----------------------------------------------------------


def _cost_outputs(opts, cost, lx, ly, want_grad):
    def host(cost, lx, ly):
        lengths = dict(lengths_x=_host_lengths(lx), lengths_y=_host_lengths(ly), bandwidth=_bw(opts),
                       kernel=opts.kernel)
        if not want_grad:
            return (np.asarray(_swn.soft_dtw_cost(np.asarray(cost), opts.gamma, **lengths),
                               dtype=_value_dtype(cost.dtype)),)
        v, gc = _swn.soft_dtw_cost_value_and_grad(np.asarray(cost), opts.gamma, **lengths)
        return np.asarray(v, dtype=_value_dtype(cost.dtype)), gc

    shapes = [jax.ShapeDtypeStruct((cost.shape[0],), _value_dtype(cost.dtype))]
    if want_grad:
        shapes.append(jax.ShapeDtypeStruct(cost.shape, cost.dtype))
    outputs = _call("softwave_soft_dtw_cost", shapes, (cost, lx, ly), host, _attributes(opts))
    return (outputs[0].astype(cost.dtype),) + outputs[1:]


@partial(jax.custom_vjp, nondiff_argnums=(0,))
def _cost(opts, cost, lx, ly):
    return _cost_outputs(opts, cost, lx, ly, False)[0]


@_first_order_only(nondiff_argnums=(0,))
def _cost_value_and_grad(opts, cost, lx, ly):
    return _cost_outputs(opts, cost, lx, ly, True)


def _cost_fwd(opts, cost, lx, ly):
    values, gc = _cost_value_and_grad(opts, cost, lx, ly)
    return values, gc


def _cost_bwd(opts, gc, g):
    return gc * g[:, None, None], None, None


_cost.defvjp(_cost_fwd, _cost_bwd)


def soft_dtw_cost(cost, gamma: float = 1.0, *, bandwidth=None, lengths_x=None, lengths_y=None,
                  kernel: str = "automatic"):
    """Soft-DTW on a cost tensor (B, N, M) or (N, M); differentiable w.r.t.
    the cost (its gradient is the expected alignment)."""
    opts = options(gamma, bandwidth, "sqeuclidean", kernel)
    cost = _float("cost", cost)
    if cost.ndim not in (2, 3):
        raise ValueError(f"softwave: cost must be (B, N, M) or (N, M) (got {cost.ndim} dimensions)")
    single = cost.ndim == 2
    c3 = cost[None] if single else cost
    check_extents("cost", c3.shape, ("N", "M"))
    values = _cost(opts, c3, _lengths(lengths_x, c3.shape[0]), _lengths(lengths_y, c3.shape[0]))
    return values[0] if single else values


# --- not differentiated ---------------------------------------------------


def soft_dtw_alignment(x, y, gamma: float = 1.0, *, bandwidth=None, dist: str = "sqeuclidean", lengths_x=None,
                       lengths_y=None, kernel: str = "automatic"):
    """Expected alignment E (B, N, M) (or (N, M)); not differentiated."""
    opts = options(gamma, bandwidth, dist, kernel)
    x3, y3, single = _batched(jax.lax.stop_gradient(x), jax.lax.stop_gradient(y))

    def host(x, y, lx, ly):
        values, *_, e = _engine.soft_dtw(_swn._adapter, np.ascontiguousarray(x), np.ascontiguousarray(y), opts,
                                         alignment=True, lengths_x=_host_lengths(lx), lengths_y=_host_lengths(ly))
        return values, e

    shapes = (jax.ShapeDtypeStruct((x3.shape[0],), _value_dtype(x3.dtype)),
              jax.ShapeDtypeStruct((x3.shape[0], x3.shape[1], y3.shape[1]), x3.dtype))
    operands = (x3, y3, _lengths(lengths_x, x3.shape[0]), _lengths(lengths_y, x3.shape[0]))
    _, e = _call("softwave_soft_dtw", shapes, operands, host, _attributes(opts, divergence=False))
    return e[0] if single else e


def pairwise(x, y=None, gamma: float = 1.0, *, divergence: bool = False, bandwidth=None, dist: str = "sqeuclidean",
             lengths_x=None, lengths_y=None, kernel: str = "automatic"):
    """All-pairs matrix (B1, B2) of values or divergences; not differentiated
    (use softwave.torch.pairwise for gradients)."""
    opts = options(gamma, bandwidth, dist, kernel)
    if y is None:
        y, lengths_y = x, (lengths_x if lengths_y is None else lengths_y)
    x, y = jax.lax.stop_gradient(_float("x", x)), jax.lax.stop_gradient(_float("y", y))
    dtype = jnp.promote_types(x.dtype, y.dtype)
    for name, a, labels in (("x", x, ("N", "d")), ("y", y, ("M", "d"))):
        if a.ndim not in (2, 3):
            raise ValueError(f"softwave: {name} must be (B, N, d) or (B, N) (got {a.ndim} dimensions)")
        check_extents(name, a.shape, labels)

    def host(x, y, lx, ly):
        return (_swn.pairwise(np.asarray(x), np.asarray(y), opts.gamma, divergence=divergence, bandwidth=_bw(opts),
                              dist=opts.dist, lengths_x=_host_lengths(lx), lengths_y=_host_lengths(ly),
                              kernel=opts.kernel).astype(_value_dtype(dtype)),)

    x3 = x[..., None] if x.ndim == 2 else x
    y3 = y[..., None] if y.ndim == 2 else y
    shapes = (jax.ShapeDtypeStruct((x.shape[0], y.shape[0]), _value_dtype(dtype)),)
    operands = (x3.astype(dtype), y3.astype(dtype), _lengths(lengths_x, x.shape[0]), _lengths(lengths_y, y.shape[0]))
    (matrix,) = _call("softwave_pairwise", shapes, operands, host, _attributes(opts, divergence=divergence))
    return matrix.astype(dtype)


def dtw(x, y, *, bandwidth=None, dist: str = "sqeuclidean", lengths_x=None, lengths_y=None):
    """Hard DTW: values (differentiable along the optimal path) and the
    paths as a padded int32 array (B, N + M − 1, 2) with −1 past each path's
    length, plus the lengths (B,) (fixed shapes, so it works under jit)."""
    opts = options(0.0, bandwidth, dist)
    values = soft_dtw(x, y, 0.0, bandwidth=bandwidth, dist=dist, lengths_x=lengths_x, lengths_y=lengths_y)
    x3, y3, single = _batched(jax.lax.stop_gradient(x), jax.lax.stop_gradient(y))
    batch, n, m = x3.shape[0], x3.shape[1], y3.shape[1]

    def host(x, y, lx, ly):
        return _engine.dtw_path(_swn._adapter, np.ascontiguousarray(x), np.ascontiguousarray(y), opts,
                                lengths_x=_host_lengths(lx), lengths_y=_host_lengths(ly))

    shapes = (jax.ShapeDtypeStruct((batch,), _value_dtype(x3.dtype)),
              jax.ShapeDtypeStruct((batch, n + m - 1, 2), jnp.int32), jax.ShapeDtypeStruct((batch,), jnp.int32))
    operands = (x3, y3, _lengths(lengths_x, batch), _lengths(lengths_y, batch))
    attributes = dict(dist=opts.dist, band=np.int64(opts.band), kernel="automatic")
    _, path, length = _call("softwave_dtw_path", shapes, operands, host, attributes)
    if single:
        return values, path[0], length[0]
    return values, path, length


# --- entropic optimal transport -------------------------------------------


class SinkhornOutput(NamedTuple):
    """What ``sinkhorn`` returns (a leading B axis when the inputs had one).
    ``value`` (the dual objective, OT_ε at convergence) is differentiable
    w.r.t. x, y, a and b; the potentials and the diagnostics are constants
    to autodiff (their derivatives are zero)."""

    value: Any
    f: Any
    g: Any
    transport_cost: Any
    marginal_error: Any  # (…, 2): ‖π1 − a‖₁, ‖πᵀ1 − b‖₁
    iterations: Any
    converged: Any


_OT_SOLVE = ("f", "g", "value", "transport_cost", "marginal_error", "iterations", "converged")


def _ot_problem(x, y, a, b, cost_matrix=None):
    """Batched operands (names, arrays) and whether the inputs were single:
    point clouds x, y or a cost_matrix, then the weights given."""
    if (cost_matrix is None) == (x is None):
        raise ValueError("softwave: give point clouds x and y, or a cost_matrix; exactly one")
    if cost_matrix is not None:
        cost = _float("cost_matrix", cost_matrix)
        if cost.ndim not in (2, 3):
            raise ValueError(f"softwave: cost_matrix must be (B, N, K) or (N, K) (got shape {tuple(cost.shape)})")
        single = cost.ndim == 2
        cost = cost[None] if single else cost
        dtype, batch, rows, columns = cost.dtype, cost.shape[0], cost.shape[1], cost.shape[2]
        names, arrays = ["cost"], [cost]
    else:
        if y is None:
            raise ValueError("softwave: y is required with x")
        x, y = _float("x", x), _float("y", y)
        dtype = jnp.promote_types(x.dtype, y.dtype)
        if x.ndim != y.ndim or x.ndim not in (2, 3):
            raise ValueError(
                f"softwave: x and y must both be (B, N, d) or (N, d) (got {x.ndim} and {y.ndim} dimensions)")
        single = x.ndim == 2
        if single:
            x, y = x[None], y[None]
        batch, rows, columns = x.shape[0], x.shape[1], y.shape[1]
        names, arrays = ["x", "y"], [x.astype(dtype), y.astype(dtype)]
    for name, w, count in (("a", a, rows), ("b", b, columns)):
        if w is None:
            continue
        w = _float(name, w).astype(dtype)
        w = w[None] if single else w
        if w.shape != (batch, count):
            raise ValueError(f"softwave: {name} must have shape {(batch, count)[single:]} "
                             f"(got {tuple(w.shape[single:])})")
        names.append(name)
        arrays.append(w)
    return tuple(names), tuple(arrays), single


def _named_call(target, core_function, operation, names, arrays, results, attributes, host_settings):
    """The core's `target` taking arrays by name (optimal_transport, deer_rnn):
    operands `names` (with `arrays`), results (name, ShapeDtypeStruct) pairs,
    returned in order; on the host core_function(operation, arrays,
    host_settings) where this backend has no FFI target."""

    def host(*operands):
        out = {name: np.empty(shape.shape, shape.dtype) for name, shape in results}
        given = {name: np.ascontiguousarray(v) for name, v in zip(names, operands)}
        core_function(operation, dict(given, **out), host_settings)
        return tuple(out[name] for name, _ in results)

    attributes = dict(attributes, operation=operation, operands=",".join(names),
                      results=",".join(name for name, _ in results))
    return _call(target, [shape for _, shape in results], arrays, host, attributes)


def _ot_run(settings, operation, names, arrays, results):
    settings = dict(settings)
    attributes = dict(epsilon=np.float64(settings["epsilon"]), epsilon_relative=bool(settings["epsilon_relative"]),
                      epsilon_scaling=np.float64(settings["epsilon_scaling"]), rho_a=np.float64(settings["rho_a"]),
                      rho_b=np.float64(settings["rho_b"]), max_iterations=np.int64(settings["max_iterations"]),
                      tolerance=np.float64(settings["tolerance"]), check_every=np.int64(settings["check_every"]),
                      cost=settings["cost"], kernel=settings["kernel"])
    return _named_call("softwave_optimal_transport", _core.optimal_transport, operation, names, arrays, results,
                       attributes, dict(settings, check=True))


def _ot_solve_shapes(names, arrays):
    if names[0] == "cost":
        B, N, K = arrays[0].shape
    else:
        B, N, K = arrays[0].shape[0], arrays[0].shape[1], arrays[1].shape[1]
    real, integer = arrays[0].dtype, jnp.int32
    shapes = ((B, N), (B, K), (B,), (B,), (B, 2), (B,), (B,))
    return [(name, jax.ShapeDtypeStruct(shape, integer if name in ("iterations", "converged") else real))
            for name, shape in zip(_OT_SOLVE, shapes)]


@jax.tree_util.register_pytree_node_class
class _Static:
    """A hashable Python value carried in a custom_vjp's residuals (as
    pytree structure, not as an array)."""

    def __init__(self, value):
        self.value = value

    def tree_flatten(self):
        return (), self.value

    @classmethod
    def tree_unflatten(cls, value, children):
        return cls(value)


def _named_vjp(run, backward):
    """run(settings, names, *arrays) (settings and names static) as a
    custom_vjp whose backward(settings, names, arrays, outputs, cotangents,
    wanted) returns the arrays' cotangents, None where wanted (one bool an
    array, from JAX's symbolic zeros) says the array is not being
    differentiated: the core then computes no gradient that nobody reads
    (a Sinkhorn loss against a fixed target needs one side's). Its forward
    pass refuses to be differentiated (first derivatives only)."""
    first_order = _first_order_only(nondiff_argnums=(0, 1))(run)

    @partial(jax.custom_vjp, nondiff_argnums=(0, 1))
    def function(settings, names, *arrays):
        return run(settings, names, *arrays)

    def forward(settings, names, *arrays):
        values = tuple(a.value for a in arrays)
        outputs = first_order(settings, names, *values)
        return outputs, (values, outputs, _Static(tuple(bool(a.perturbed) for a in arrays)))

    def reverse(settings, names, residuals, cotangents):
        arrays, outputs, wanted = residuals
        return backward(settings, names, arrays, outputs, cotangents, wanted.value)

    function.defvjp(forward, reverse, symbolic_zeros=True)
    return function


def _wanted_gradients(gradients, wanted):
    """The backward's cotangents: the core's `gradients` (one per wanted
    array, in order) and None for the others."""
    gradients = iter(gradients)
    return tuple(next(gradients) if w else None for w in wanted)


@_first_order_only(nondiff_argnums=(0, 1, 2))
def _ot_gradients(settings, names, wanted, f, g, grad_value, *arrays):
    results = [("grad_" + name, jax.ShapeDtypeStruct(a.shape, a.dtype))
               for name, a, w in zip(names, arrays, wanted) if w]
    return _ot_run(settings, "gradients", names + ("f", "g", "grad_output"), arrays + (f, g, grad_value), results)


def _ot_solve_backward(settings, names, arrays, outputs, cotangents, wanted):
    f, g = outputs[0], outputs[1]
    grad_value = cotangents[_OT_SOLVE.index("value")]
    if isinstance(grad_value, SymbolicZero) or not any(wanted):
        return (None,) * len(arrays)
    return _wanted_gradients(_ot_gradients(settings, names, wanted, f, g, grad_value, *arrays), wanted)


_ot_solve = _named_vjp(lambda settings, names, *arrays: _ot_run(settings, "solve", names, arrays,
                                                                 _ot_solve_shapes(names, arrays)),
                       _ot_solve_backward)


def _ot_settings(cost, epsilon, epsilon_relative, epsilon_scaling, rho, rho_a, rho_b, max_iterations, tolerance,
                 check_every, kernel):
    """softwave.ot's checked settings, as a hashable tuple (a static argument)."""
    from . import ot as _ot

    settings = _ot._settings(_ot._Frame(np.zeros(1)), epsilon=epsilon, epsilon_relative=epsilon_relative,
                             epsilon_scaling=epsilon_scaling, rho=rho, rho_a=rho_a, rho_b=rho_b,
                             max_iterations=max_iterations, tolerance=tolerance, check_every=check_every, cost=cost,
                             check_inputs=True, kernel=kernel)
    settings.pop("check")
    return tuple(sorted(settings.items()))


def sinkhorn(x=None, y=None, a=None, b=None, *, cost_matrix=None, cost: str = "sqeuclidean",
             epsilon: float = 0.05,
             epsilon_relative: bool = False, epsilon_scaling: float = 0.0, rho=None, rho_a=None, rho_b=None,
             max_iterations: int = 1000, tolerance: float = 1e-6, check_every: int = 10,
             kernel: str = "automatic") -> SinkhornOutput:
    """Entropic OT between point clouds x (N, d) and y (K, d), or batches
    (B, N, d) and (B, K, d), or for a cost_matrix (…, N, K), with weights
    a (…, N) and b (…, K) (None: uniform): softwave.ot.sinkhorn's solve and
    options, under ``jit``, as an XLA FFI target on XLA's stream. ``value``
    is differentiable w.r.t. x, y (or the cost matrix: its gradient is the
    plan), a and b (the envelope theorem's gradients from the solved
    potentials)."""
    settings = _ot_settings(cost, epsilon, epsilon_relative, epsilon_scaling, rho, rho_a, rho_b, max_iterations,
                            tolerance, check_every, kernel)
    names, arrays, single = _ot_problem(x, y, a, b, cost_matrix)
    out = _ot_solve(settings, names, *arrays)
    named = dict(zip(_OT_SOLVE, out))
    fields = {k: (v if k == "value" else jax.lax.stop_gradient(v)) for k, v in named.items()}
    if single:
        fields = {k: v[0] for k, v in fields.items()}
    return SinkhornOutput(**fields)


def _ot_divergence_run(settings, names, arrays, with_gradients):
    x = arrays[0]
    results = [("values", jax.ShapeDtypeStruct((x.shape[0],), x.dtype)),
               ("converged", jax.ShapeDtypeStruct((x.shape[0],), jnp.int32))]
    if with_gradients:
        results += [("grad_" + name, jax.ShapeDtypeStruct(a.shape, a.dtype)) for name, a in zip(names, arrays)]
    return _ot_run(settings, "divergence", names, arrays, results)


@partial(jax.custom_vjp, nondiff_argnums=(0, 1))
def _ot_divergence(settings, names, *arrays):
    return _ot_divergence_run(settings, names, arrays, False)[0]


@_first_order_only(nondiff_argnums=(0, 1))
def _ot_divergence_value_and_grad(settings, names, *arrays):
    return _ot_divergence_run(settings, names, arrays, True)


def _ot_divergence_fwd(settings, names, *arrays):
    values, _, *grads = _ot_divergence_value_and_grad(settings, names, *arrays)
    return values, tuple(grads)


def _ot_divergence_bwd(settings, names, grads, g):
    return tuple(grad * g.reshape((-1,) + (1,) * (grad.ndim - 1)) for grad in grads)


_ot_divergence.defvjp(_ot_divergence_fwd, _ot_divergence_bwd)


def sinkhorn_divergence(x, y, a=None, b=None, *, cost: str = "sqeuclidean", epsilon: float = 0.05,
                        epsilon_relative: bool = False, epsilon_scaling: float = 0.0, rho=None, rho_a=None,
                        rho_b=None, max_iterations: int = 1000, tolerance: float = 1e-6, check_every: int = 10,
                        kernel: str = "automatic"):
    """The Sinkhorn divergence S_ε(x, y) = OT_ε(x, y) − ½ OT_ε(x, x) −
    ½ OT_ε(y, y) (B,) (a scalar for one pair), as softwave.ot's, under
    ``jit``; differentiable w.r.t. x, y, a and b."""
    settings = _ot_settings(cost, epsilon, epsilon_relative, epsilon_scaling, rho, rho_a, rho_b, max_iterations,
                            tolerance, check_every, kernel)
    names, arrays, single = _ot_problem(x, y, a, b)
    values = _ot_divergence(settings, names, *arrays)
    return values[0] if single else values


# --- recurrences in parallel over time (DEER) ------------------------------


class DeerOutput(NamedTuple):
    """What the DEER functions return: the states ``y`` (B, T, n)
    (differentiable w.r.t. x, h0, the weights and biases), and per sequence
    the Newton iterations run and the path its states took, as int32 codes
    of softwave.deer's paths (0 "deer", 1 "fallback", 2 "sequential",
    3 "damped")."""

    y: Any
    iterations: Any
    path: Any


def _deer_run(settings, operation, names, arrays, results):
    settings = dict(settings)
    nan = np.float64(np.nan)
    attributes = dict(cell=settings["cell"], method=settings["method"], jacobian=settings["jacobian"],
                      kernel=settings["kernel"],
                      atol=nan if settings["atol"] is None else np.float64(settings["atol"]),
                      rtol=nan if settings["rtol"] is None else np.float64(settings["rtol"]),
                      max_iterations=np.int64(settings["max_iterations"]), chunk=np.int64(settings["chunk"]),
                      start_warm_up=np.int64(-1 if settings["start_warm_up"] is None
                                             else settings["start_warm_up"]),
                      damping=np.float64(settings["damping"]), block_size=np.int64(settings["block_size"]),
                      block_layout=settings["block_layout"], diagonal=bool(settings["diagonal"]))
    from . import deer as _deer_module

    host_settings = _deer_module._core_settings(dict(settings, check=True))
    return _named_call("softwave_deer_rnn", _core.deer_rnn, operation, names, arrays, results, attributes,
                       host_settings)


def _deer_forward_run(settings, names, *arrays):
    from . import deer as _deer_module

    cell = dict(settings)["cell"]
    x, weight_hh = arrays[0], arrays[names.index(_deer_module.weight_names(cell)[1])]
    n = _deer_module._state_size(cell, weight_hh, dict(settings)["diagonal"])
    B, T = x.shape[0], x.shape[1]
    results = [("y", jax.ShapeDtypeStruct((B, T, n), x.dtype)), ("iterations", jax.ShapeDtypeStruct((B,), jnp.int32)),
               ("path", jax.ShapeDtypeStruct((B,), jnp.int32))]
    return _deer_run(settings, "forward", names, arrays, results)


@_first_order_only(nondiff_argnums=(0, 1, 2))
def _deer_gradients(settings, names, wanted, y, grad_y, *arrays):
    results = [("grad_" + name, jax.ShapeDtypeStruct(a.shape, a.dtype))
               for name, a, w in zip(names, arrays, wanted) if w]
    return _deer_run(settings, "gradients", names + ("y", "grad_y"), arrays + (y, grad_y), results)


def _deer_backward(settings, names, arrays, outputs, cotangents, wanted):
    y, grad_y = outputs[0], cotangents[0]
    wanted = tuple(w and name != "lengths" for name, w in zip(names, wanted))
    if isinstance(grad_y, SymbolicZero) or not any(wanted):
        return (None,) * len(arrays)
    return _wanted_gradients(_deer_gradients(settings, names, wanted, y, grad_y.astype(y.dtype), *arrays), wanted)


_deer = _named_vjp(_deer_forward_run, _deer_backward)


def deer_rnn(x, h0=None, weight_ih=None, weight_hh=None, bias_ih=None, bias_hh=None, *, cell: str = "gru",
             lengths=None, method: str = "auto", jacobian: str = "full", kernel: str = "automatic", atol=None,
             rtol=None, max_iter: int = 100, chunk: int = 0, damping: float = 0.0,
             block_size: int = 2, block_layout: str = "contiguous", diagonal: bool = False,
             peephole=None, start_warm_up: Optional[int] = None) -> DeerOutput:
    """softwave.deer.rnn under ``jit``: the states of a one-layer Elman, GRU
    or LSTM cell (PyTorch's definitions and weight layouts), or ParaRNN's
    LSTM (cell="cifg_lstm" with its peepholes (2H,)), over every step,
    x (B, T, m) or (T, m), h0 (B, n) or None (zeros), lengths (B,) or
    None; the same options (diagonal=True: weight_hh (G·H, 1), the gates'
    diagonal hidden weights; weight_ih None: x holds the input projections
    (B, T, G·H)). The states' gradients (implicit differentiation, the
    adjoint solved the same way) reach x, h0, the weights, the biases and
    the peepholes. On a GPU the Newton loop reads its convergence back
    every iteration, inside the call."""
    from . import deer as _deer_module

    if weight_hh is None:
        raise ValueError("softwave: weight_hh is required")
    settings = _deer_module._settings(cell, method, jacobian, kernel, atol, rtol, max_iter, chunk, True, False,
                                      damping, block_size, block_layout, diagonal, start_warm_up)
    settings.pop("check")
    settings = tuple(sorted(settings.items()))
    x = _float("x", x)
    if x.ndim not in (2, 3):
        raise ValueError(f"softwave: x must be (B, T, m) or (T, m) (got shape {tuple(x.shape)})")
    for name, w in (("weight_ih", weight_ih), ("weight_hh", weight_hh)):
        if w is not None and np.ndim(w) != 2:
            raise ValueError(f"softwave: {name} must be 2-dimensional (gates·hidden size, "
                             f"{'m' if name == 'weight_ih' else ('1' if diagonal else 'hidden size')}) "
                             f"(got shape {np.shape(w)})")
    single = x.ndim == 2
    if single:
        x = x[None]
        h0 = None if h0 is None else jnp.asarray(h0)[None]
    return _deer_call(settings, x, h0, lengths, single,
                      (weight_ih, weight_hh, bias_ih, bias_hh, peephole))


def _deer_call(settings, x, h0, lengths, single, weights) -> DeerOutput:
    """The DEER target on x (B, T, ·), h0 and lengths (or None) and the
    cell's five weight arrays (None where not given)."""
    from . import deer as _deer_module

    if lengths is not None and np.size(lengths) != x.shape[0]:
        raise ValueError(f"softwave: lengths must have one entry per sequence ({x.shape[0]}), "
                         f"got {np.size(lengths)}")
    names, arrays = ["x"], [x]
    if h0 is not None:
        names.append("y0")
        arrays.append(jnp.asarray(h0, x.dtype))
    if lengths is not None:
        names.append("lengths")
        arrays.append(jnp.asarray(lengths, jnp.int32).reshape(x.shape[0]))
    for name, w in zip(_deer_module.weight_names(dict(settings)["cell"]), weights):
        if w is not None:
            names.append(name)
            arrays.append(jnp.asarray(w, x.dtype))
    y, iterations, path = _deer(settings, tuple(names), *arrays)
    iterations, path = jax.lax.stop_gradient(iterations), jax.lax.stop_gradient(path)
    if single:
        return DeerOutput(y[0], iterations[0], path[0])
    return DeerOutput(y, iterations, path)


def deer_neural_ode(steps, y0, weight_hidden, weight_out, bias_hidden=None, bias_out=None, *, inputs=None,
                    lengths=None, method: str = "auto", jacobian: str = "full", kernel: str = "automatic",
                    atol=None, rtol=None, max_iter: int = 100, chunk: int = 0, damping: float = 0.0,
                    start_warm_up: Optional[int] = None) -> DeerOutput:
    """softwave.deer.neural_ode under ``jit``: the states y(t_1) .. y(t_T) of
    dy/dt = W_out tanh(W_hidden [y; u] + b_hidden) + b_out from y0 (B, n)
    (or (n,)), one RK4 step per interval; steps (B, T) or (T,) the
    intervals, inputs (B, T, m) or None, weight_hidden (h, n + m),
    weight_out (n, h), biases or None. Gradients reach steps, y0, inputs
    and the weights."""
    from . import deer as _deer_module

    if weight_hidden is None or weight_out is None:
        raise ValueError("softwave: weight_hidden and weight_out are required")
    settings = _deer_module._settings("neural_ode", method, jacobian, kernel, atol, rtol, max_iter, chunk, True,
                                      False, damping, 2, "contiguous", False, start_warm_up)
    settings.pop("check")
    settings = tuple(sorted(settings.items()))
    y0 = _float("y0", y0)
    x, y0, single = _deer_module.ode_grid(y0, steps, inputs, lambda a: jnp.asarray(a, y0.dtype), jnp.concatenate,
                                          lambda a, B: jnp.broadcast_to(a, (B, a.shape[0])))
    return _deer_call(settings, x, y0, lengths, single, (weight_hidden, weight_out, bias_hidden, bias_out, None))


def deer_gru(x, h0, weight_ih, weight_hh, bias_ih=None, bias_hh=None, **kwargs) -> DeerOutput:
    """torch.nn.GRU's recurrence (gates r, z, n) through deer_rnn."""
    return deer_rnn(x, h0, weight_ih, weight_hh, bias_ih, bias_hh, cell="gru", **kwargs)


def deer_lstm(x, state, weight_ih, weight_hh, bias_ih=None, bias_hh=None, **kwargs):
    """torch.nn.LSTM's recurrence (gates i, f, g, o). state: None or (h0, c0),
    each (…, H). Returns (h, c, DeerOutput) with h and c (…, T, H)."""
    h0 = None if state is None else jnp.concatenate([jnp.asarray(state[0]), jnp.asarray(state[1])], -1)
    out = deer_rnn(x, h0, weight_ih, weight_hh, bias_ih, bias_hh, cell="lstm", **kwargs)
    hidden = out.y.shape[-1] // 2
    return out.y[..., :hidden], out.y[..., hidden:], out


# --- the (a, b) scan --------------------------------------------------------


def _scan_run(settings, operation, names, arrays, results):
    settings = dict(settings)
    attributes = dict(reverse=bool(settings["reverse"]), kernel=settings["kernel"])
    return _named_call("softwave_linear_recurrence", _core.linear_recurrence, operation, names, arrays, results,
                       attributes, dict(settings, check=True))


def _scan_forward_run(settings, names, *arrays):
    a = arrays[0]
    return _scan_run(settings, "forward", names, arrays, [("y", jax.ShapeDtypeStruct(a.shape, a.dtype))])


@_first_order_only(nondiff_argnums=(0, 1, 2))
def _scan_gradients(settings, names, wanted, y, grad_y, *arrays):
    """grad_b, then grad_a and grad_y0 where wanted (names: a, b[, y0])."""
    a = arrays[0]
    given = dict(zip(names, arrays))
    operands = tuple(n for n in ("a", "y0") if n in given)
    results = [("grad_b", jax.ShapeDtypeStruct(a.shape, a.dtype))]
    if wanted[0]:
        results.append(("grad_a", jax.ShapeDtypeStruct(a.shape, a.dtype)))
    if len(wanted) > 2 and wanted[2]:
        results.append(("grad_y0", jax.ShapeDtypeStruct(a.shape[:1], a.dtype)))
    return _scan_run(settings, "gradients", operands + ("y", "grad_y"),
                     tuple(given[n] for n in operands) + (y, grad_y), results)


def _scan_backward(settings, names, arrays, outputs, cotangents, wanted):
    y, grad_y = outputs[0], cotangents[0]
    if isinstance(grad_y, SymbolicZero) or not any(wanted):
        return (None,) * len(arrays)
    grad_b, *rest = _scan_gradients(settings, names, wanted, y, grad_y.astype(y.dtype), *arrays)
    rest = iter(rest)
    grad_a = next(rest) if wanted[0] else None
    grads = [grad_a, grad_b if wanted[1] else None]
    if len(arrays) > 2:
        grads.append(next(rest) if wanted[2] else None)
    return tuple(grads)


_scan = _named_vjp(_scan_forward_run, _scan_backward)


def linear_recurrence(a, b, y0=None, *, reverse: bool = False, kernel: str = "automatic"):
    """softwave.deer.linear_recurrence under ``jit``: y[..., t] = a[..., t] ·
    y[..., t−1] + b[..., t] along the last axis from y0 (shape (...), or
    zeros); with ``reverse`` from the last step back. Differentiable in a, b
    and y0 (the gradients are the same scan run backwards)."""
    from . import deer as _deer_module

    a, b = _float("a", a), _float("b", b)
    dtype = jnp.promote_types(a.dtype, b.dtype)
    rows, T = _deer_module._recurrence_rows(a, b, None if y0 is None else jnp.asarray(y0))
    if kernel not in ("automatic", "portable", "specialised"):
        raise ValueError(f"softwave: kernel must be 'automatic', 'portable' or 'specialised' (got {kernel!r})")
    names, arrays = ["a", "b"], [a.astype(dtype).reshape(rows, T), b.astype(dtype).reshape(rows, T)]
    if y0 is not None:
        names.append("y0")
        arrays.append(jnp.asarray(y0).astype(dtype).reshape(rows))
    settings = (("kernel", kernel), ("reverse", bool(reverse)))
    (y,) = _scan(settings, tuple(names), *arrays)
    return y.reshape(a.shape)
