"""Soft-DTW barycenters (Cuturi & Blondel 2017) for NumPy, torch and JAX data.

The optimiser (L-BFGS or Adam) runs in the C++ core on the data's device;
this layer only shapes the inputs, picks the start and converts the result
back to the caller's array type.
"""

from __future__ import annotations

from typing import Any, Tuple

import numpy as np

from . import _engine
from ._common import check_extents, check_method, optional_int, options


def _framework(X) -> str:
    module = type(X).__module__
    if module.startswith("torch"):
        return "torch"
    if module.startswith("jax"):
        return "jax"
    return "numpy"


def _pad(series, lengths):
    """A list of (N_i, d) / (N_i,) series becomes a zero-padded (B, N, d)
    batch and its lengths."""
    if lengths is not None:
        raise ValueError("softwave: lengths is for padded (B, N, d) input; a list of series carries its own")
    arrays = [np.asarray(s, dtype=np.float64 if np.asarray(s).dtype != np.float32 else np.float32) for s in series]
    if not arrays:
        raise ValueError("softwave: X holds no series")
    arrays = [a[:, None] if a.ndim == 1 else a for a in arrays]
    if any(a.ndim != 2 for a in arrays):
        raise ValueError("softwave: each series in X must be (N_i, d) or (N_i,)")
    for i, a in enumerate(arrays):
        check_extents(f"X[{i}]", (1, *a.shape), ("N", "d"))
    dims = {a.shape[1] for a in arrays}
    if len(dims) != 1:
        raise ValueError(f"softwave: the series in X have different dimensions d: {sorted(dims)}")
    dtype = np.result_type(*arrays)
    batch = np.zeros((len(arrays), max(a.shape[0] for a in arrays), dims.pop()), dtype=dtype)
    for b, a in enumerate(arrays):
        batch[b, : a.shape[0]] = a
    return batch, np.array([a.shape[0] for a in arrays], dtype=np.int32)


def _resample(series: np.ndarray, length: int) -> np.ndarray:
    """Linear interpolation of a (n, d) series onto `length` points."""
    n = series.shape[0]
    if n == length:
        return series.astype(np.float64)
    source = np.linspace(0.0, 1.0, n) if n > 1 else np.zeros(1)
    target = np.linspace(0.0, 1.0, length)
    return np.stack([np.interp(target, source, series[:, k]) for k in range(series.shape[1])], axis=1)


def _host(a):
    """A torch tensor (on any device, requiring grad or not) or any array-like, as NumPy."""
    if _framework(a) == "torch":
        return a.detach().cpu().numpy()
    return np.asarray(a)


def _checked_lengths(lengths, batch: int, n: int):
    """Per-series lengths of a padded batch: integers in [1, N], one per series."""
    lengths = _host(lengths)
    if lengths.dtype.kind not in "iu":
        raise TypeError(f"softwave: lengths must be integers (got {lengths.dtype})")
    if lengths.shape != (batch,):
        raise ValueError(f"softwave: lengths must have one entry per series of X, shape ({batch},) "
                         f"(got shape {lengths.shape})")
    bad = np.flatnonzero((lengths < 1) | (lengths > n))
    if bad.size:
        first = bad[0]
        why = ": every series needs at least one time step" if lengths[first] < 1 else ""
        raise ValueError(f"softwave: lengths must be between 1 and N = {n} (got {lengths[first]} for series "
                         f"{first}){why}")
    return lengths


def _checked_weights(weights, batch: int):
    """The weights as float64 (B,) normalised by their sum (None: uniform).
    Only their ratios matter: [1e-6] * B is uniform."""
    if weights is None:
        return None
    w = _host(weights)
    if w.dtype.kind not in "fiub":
        raise TypeError(f"softwave: weights must be real numbers (got dtype {w.dtype})")
    w = w.astype(np.float64)
    if w.shape != (batch,):
        raise ValueError(f"softwave: weights must have one entry per series of X, shape ({batch},) "
                         f"(got shape {w.shape})")
    bad = int(np.count_nonzero(~np.isfinite(w) | (w < 0)))
    if bad:
        raise ValueError(f"softwave: weights has {bad} negative or non-finite value(s): weights must be finite "
                         f"and >= 0")
    with np.errstate(over="ignore"):
        total = w.sum()
    if total == 0:
        raise ValueError("softwave: weights are all zero: at least one must be > 0")
    if not np.isfinite(total):
        raise ValueError("softwave: weights sum to more than the largest float64 (the sum overflows): scale them "
                         "down, only their ratios matter")
    return w / total


def _checked_init(init, d: int):
    """init: 'mean', 'medoid' or a finite (L, d) array, L >= 1."""
    if isinstance(init, str):
        if init not in ("mean", "medoid"):
            raise ValueError(f"softwave: init must be 'mean', 'medoid' or an (L, d) array (got {init!r})")
        return init
    start = _host(init)
    if start.dtype.kind not in "fiub":
        raise TypeError(f"softwave: init must be 'mean', 'medoid' or an (L, d) array of real numbers "
                        f"(got dtype {start.dtype})")
    start = start.astype(np.float64)
    if start.ndim == 1:
        start = start[:, None]
    if start.ndim != 2 or start.shape[1] != d:
        raise ValueError(f"softwave: init must be (L, {d}) (got shape {tuple(start.shape)})")
    check_extents("init", (1, *start.shape), ("L", "d"))
    bad = int(np.count_nonzero(~np.isfinite(start)))
    if bad:
        raise ValueError(f"softwave: init has {bad} non-finite value(s) (NaN or inf): the start must be finite")
    return start


def _start(X: np.ndarray, lengths, init, length: int, opts, weights) -> np.ndarray:
    """The starting barycenter (L, d) on the host; arguments already checked
    (weights: None or normalised float64)."""
    batch = X.shape[0]
    n_b = np.full(batch, X.shape[1]) if lengths is None else np.asarray(lengths)
    if isinstance(init, str):
        if init == "mean":
            w = np.full(batch, 1.0 / batch) if weights is None else weights
            return sum(w[b] * _resample(X[b, : n_b[b]], length) for b in range(batch))
        from . import numpy as swn

        D = swn.pairwise(X, X, opts.gamma if opts.gamma > 0 else 1.0, dist=opts.dist,
                         lengths_x=lengths, lengths_y=lengths)
        medoid = int(np.argmin(D.sum(axis=1)))
        return _resample(X[medoid, : n_b[medoid]], length)
    return init


def barycenter(
    X: Any,
    gamma: float = 1.0,
    weights: Any = None,
    lengths: Any = None,
    method: str = "lbfgs",
    max_iter: int = 100,
    tol: float = 1e-5,
    init: Any = "mean",
    *,
    length: int | None = None,
    bandwidth=None,
    dist: str = "sqeuclidean",
    history: int = 10,
    learning_rate: float = 1e-2,
    kernel: str = "automatic",
    return_report: bool = False,
) -> Any | Tuple[Any, dict]:
    """Soft-DTW barycenter: the z (L, d) minimising Σ_b w_b sdtw_γ(z, X_b).

    X: (B, N, d) or (B, N) array (NumPy, torch on CPU or CUDA, or JAX), or a
    list of series of different lengths (N_i, d); B ≥ 1, N ≥ 1, d ≥ 1.
    weights: (B,) finite, ≥ 0 and not all zero (default uniform); only their
    ratios matter (they are normalised by their sum). lengths: per-series
    lengths of a padded batch, in [1, N]. init: 'mean' or None (weighted mean
    of the series resampled to L), 'medoid' (the series with the smallest
    summed Soft-DTW to the others) or a finite (L, d) array (a torch tensor
    may be on CUDA). length: L (default N, or init's length; both given must
    agree). method: 'lbfgs' or 'adam'. Returns z as
    the input's array type and device (float32 input stays float32), and
    with return_report also a dict (iterations, evaluations, objective,
    converged).
    """
    opts = options(gamma, bandwidth, dist, kernel, allow_zero_gamma=False)
    check_method(method)
    optional_int("max_iter", max_iter, 1)
    optional_int("history", history, 1)
    framework = "list" if isinstance(X, (list, tuple)) else _framework(X)
    if init is None:  # the default's spelling in tslearn and sdtw-cuda-torch
        init = "mean"

    # The start is computed on the host (a copy of X for CUDA tensors); the
    # optimisation then runs where X lives.
    if framework == "list":
        univariate = all(np.ndim(s) == 1 for s in X)
        host, lengths = _pad(X, lengths)
    else:
        host = X.detach().cpu().numpy() if framework == "torch" else np.asarray(X)
        univariate = host.ndim == 2
    if host.ndim == 2:
        host = host[..., None]
    if host.ndim != 3:
        raise ValueError(f"softwave: X must be (B, N, d), (B, N) or a list of series (got {host.ndim} dimensions)")
    # Every argument is checked, by name, before any work on the data.
    if host.shape[0] == 0:
        raise ValueError("softwave: X holds no series (B = 0): a barycenter needs at least one")
    check_extents("X", host.shape, ("N", "d"))
    if host.dtype not in (np.float32, np.float64):
        host = host.astype(np.float64)
    if lengths is not None:
        lengths = _checked_lengths(lengths, host.shape[0], host.shape[1])
    init = _checked_init(init, host.shape[2])
    if length is None:
        length = host.shape[1] if isinstance(init, str) else init.shape[0]
    optional_int("length", length, 1)
    if not isinstance(init, str) and init.shape[0] != length:
        raise ValueError(f"softwave: init has L = {init.shape[0]} time steps but length = {length}: "
                         "pass one of them, or equal values")
    host_weights = _checked_weights(weights, host.shape[0])
    start = _start(host, lengths, init, length, opts, host_weights)

    if framework == "torch":
        import torch

        from ._torch_ops import adapter

        dtype = torch.float32 if host.dtype == np.float32 else torch.float64

        def place(a):
            return torch.as_tensor(a, dtype=dtype, device=X.device).contiguous()

        batch = X.detach().reshape(host.shape).to(dtype).contiguous()
    else:
        from .numpy import _adapter as adapter

        def place(a):
            return np.ascontiguousarray(a, dtype=host.dtype)

        batch = np.ascontiguousarray(host)
    z = place(start)
    report = _engine.barycenter(adapter, batch, z, opts,
                                weights=None if host_weights is None else place(host_weights), lengths=lengths,
                                method=method, max_iter=max_iter, tol=tol, history=history,
                                learning_rate=learning_rate)
    result = z
    if framework == "jax":
        import jax.numpy as jnp

        result = jnp.asarray(z)
    if univariate:  # (B, N) or a list of (N_i,) series: an (L,) barycenter
        result = result.reshape(-1)
    return (result, dict(report)) if return_report else result
