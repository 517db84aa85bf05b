"""JAX front end: Soft-DTW functions with ``custom_vjp``, usable under ``jit``.

The compiled core is reached through ``jax.pure_callback``: under ``jit``
the arrays are handed to the host for the call (on a GPU backend that is a
device-to-host copy; the CUDA path is reached from PyTorch or C++).
float32 runs as float32, float64 (with ``jax_enable_x64``) as float64.
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

import jax
import jax.numpy as jnp
import numpy as np

from . import numpy as _swn
from ._common import Options, bandwidth_of, check_batches, check_extents, options

__all__ = ["soft_dtw", "soft_dtw_divergence", "soft_dtw_cost", "soft_dtw_alignment", "pairwise", "dtw"]


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
        return np.asarray(function(np.asarray(x), np.asarray(y), opts.gamma, bandwidth=_bw(opts), dist=opts.dist,
                                   lengths_x=_host_lengths(lx), lengths_y=_host_lengths(ly), kernel=opts.kernel),
                          dtype=x.dtype)

    return _callback(host, jax.ShapeDtypeStruct((x.shape[0],), x.dtype), x, y, lx, ly)


@_first_order_only(nondiff_argnums=(0, 1))
def _series_value_and_grad(opts: Options, divergence: bool, x, y, lx, ly):
    def host(x, y, lx, ly):
        function = _swn.soft_dtw_divergence_value_and_grad if divergence else _swn.soft_dtw_value_and_grad
        v, gx, gy = function(np.asarray(x), np.asarray(y), opts.gamma, bandwidth=_bw(opts), dist=opts.dist,
                             lengths_x=_host_lengths(lx), lengths_y=_host_lengths(ly), kernel=opts.kernel)
        return np.asarray(v, dtype=x.dtype), gx, gy

    shapes = (jax.ShapeDtypeStruct((x.shape[0],), x.dtype), jax.ShapeDtypeStruct(x.shape, x.dtype),
              jax.ShapeDtypeStruct(y.shape, y.dtype))
    return _callback(host, shapes, x, y, lx, ly)


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


def _cost_host(opts, want_grad):
    def host(cost, lx, ly):
        lengths = dict(lengths_x=_host_lengths(lx), lengths_y=_host_lengths(ly), bandwidth=_bw(opts),
                       kernel=opts.kernel)
        if not want_grad:
            return np.asarray(_swn.soft_dtw_cost(np.asarray(cost), opts.gamma, **lengths), dtype=cost.dtype)
        v, gc = _swn.soft_dtw_cost_value_and_grad(np.asarray(cost), opts.gamma, **lengths)
        return np.asarray(v, dtype=cost.dtype), gc

    return host


@partial(jax.custom_vjp, nondiff_argnums=(0,))
def _cost(opts, cost, lx, ly):
    return _callback(_cost_host(opts, False), jax.ShapeDtypeStruct((cost.shape[0],), cost.dtype), cost, lx, ly)


@_first_order_only(nondiff_argnums=(0,))
def _cost_value_and_grad(opts, cost, lx, ly):
    shapes = (jax.ShapeDtypeStruct((cost.shape[0],), cost.dtype), jax.ShapeDtypeStruct(cost.shape, cost.dtype))
    return _callback(_cost_host(opts, True), shapes, cost, lx, ly)


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
        return _swn.soft_dtw_alignment(np.asarray(x), np.asarray(y), opts.gamma, bandwidth=_bw(opts), dist=opts.dist,
                                       lengths_x=_host_lengths(lx), lengths_y=_host_lengths(ly), kernel=opts.kernel)

    shape = jax.ShapeDtypeStruct((x3.shape[0], x3.shape[1], y3.shape[1]), x3.dtype)
    e = _callback(host, shape, x3, y3, _lengths(lengths_x, x3.shape[0]), _lengths(lengths_y, x3.shape[0]))
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
        return _swn.pairwise(np.asarray(x), np.asarray(y), opts.gamma, divergence=divergence, bandwidth=_bw(opts),
                             dist=opts.dist, lengths_x=_host_lengths(lx), lengths_y=_host_lengths(ly),
                             kernel=opts.kernel).astype(dtype)

    shape = jax.ShapeDtypeStruct((x.shape[0], y.shape[0]), dtype)
    return _callback(host, shape, x.astype(dtype), y.astype(dtype), _lengths(lengths_x, x.shape[0]),
                     _lengths(lengths_y, y.shape[0]))


def dtw(x, y, *, bandwidth=None, dist: str = "sqeuclidean", lengths_x=None, lengths_y=None):
    """Hard DTW: values (differentiable along the optimal path) and the
    paths as a padded int32 array (B, N + M − 1, 2) with −1 past each path's
    length, plus the lengths (B,) (fixed shapes, so it works under jit)."""
    opts = options(0.0, bandwidth, dist)
    values = soft_dtw(x, y, 0.0, bandwidth=bandwidth, dist=dist, lengths_x=lengths_x, lengths_y=lengths_y)
    x3, y3, single = _batched(jax.lax.stop_gradient(x), jax.lax.stop_gradient(y))
    batch, n, m = x3.shape[0], x3.shape[1], y3.shape[1]

    def host(x, y, lx, ly):
        from ._engine import dtw_path

        _, path, length = dtw_path(_swn._adapter, np.ascontiguousarray(x), np.ascontiguousarray(y), opts,
                                   lengths_x=_host_lengths(lx), lengths_y=_host_lengths(ly))
        return path, length

    shapes = (jax.ShapeDtypeStruct((batch, n + m - 1, 2), jnp.int32), jax.ShapeDtypeStruct((batch,), jnp.int32))
    path, length = _callback(host, shapes, x3, y3, _lengths(lengths_x, batch), _lengths(lengths_y, batch))
    if single:
        return values, path[0], length[0]
    return values, path, length
