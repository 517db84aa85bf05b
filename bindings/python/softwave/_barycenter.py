"""Soft-DTW barycenters (Cuturi & Blondel 2017) for NumPy, torch and JAX data.

The optimiser (L-BFGS or Adam) runs in the C++ core on the data's device;
this layer only shapes the inputs, picks the start and converts the result
back to the caller's array type.
"""

from __future__ import annotations

from typing import Any, Tuple

import numpy as np

from . import _engine
from ._common import check_method, optional_int, options


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


def _start(X: np.ndarray, lengths, init, length: int, opts, weights) -> np.ndarray:
    """The starting barycenter (L, d) on the host."""
    batch = X.shape[0]
    n_b = np.full(batch, X.shape[1]) if lengths is None else np.asarray(lengths)
    if isinstance(init, str):
        if init == "mean":
            w = np.full(batch, 1.0 / batch) if weights is None else np.asarray(weights, dtype=np.float64)
            w = w / w.sum()
            return sum(w[b] * _resample(X[b, : n_b[b]], length) for b in range(batch))
        if init == "medoid":
            from . import numpy as swn

            D = swn.pairwise(X, X, opts.gamma if opts.gamma > 0 else 1.0, dist=opts.dist,
                             lengths_x=lengths, lengths_y=lengths)
            medoid = int(np.argmin(D.sum(axis=1)))
            return _resample(X[medoid, : n_b[medoid]], length)
        raise ValueError(f"softwave: init must be 'mean', 'medoid' or an (L, d) array (got {init!r})")
    start = np.asarray(init, dtype=np.float64)
    if start.ndim == 1:
        start = start[:, None]
    if start.ndim != 2 or start.shape[1] != X.shape[2]:
        raise ValueError(f"softwave: init must be (L, {X.shape[2]}) (got shape {tuple(start.shape)})")
    return start


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
    list of series of different lengths (N_i, d). weights: (B,) ≥ 0 (default
    uniform). lengths: per-series lengths of a padded batch. init: 'mean'
    or None (weighted mean of the series resampled to L), 'medoid' (the
    series with the smallest summed Soft-DTW to the others) or an (L, d)
    array (a torch tensor may be on CUDA). length:
    L (default N, or init's length). method: 'lbfgs' or 'adam'. Returns z as
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
    elif _framework(init) == "torch":  # the start is computed on the host
        init = init.detach().cpu().numpy()

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
    if host.dtype not in (np.float32, np.float64):
        host = host.astype(np.float64)
    if lengths is not None:
        lengths = np.asarray(lengths.cpu() if hasattr(lengths, "cpu") else lengths)
    if length is None:
        length = host.shape[1] if isinstance(init, str) else np.asarray(init).shape[0]
    optional_int("length", length, 1)
    host_weights = None if weights is None else np.asarray(weights.cpu() if hasattr(weights, "cpu") else weights)
    start = _start(host, lengths, init, length, opts, host_weights)

    if framework == "torch":
        import torch

        from .torch import _adapter

        dtype = torch.float32 if host.dtype == np.float32 else torch.float64

        def place(a):
            return torch.as_tensor(a, dtype=dtype, device=X.device).contiguous()

        batch = X.detach().reshape(host.shape).to(dtype).contiguous()
    else:
        from .numpy import _adapter

        def place(a):
            return np.ascontiguousarray(a, dtype=host.dtype)

        batch = np.ascontiguousarray(host)
    z = place(start)
    report = _engine.barycenter(_adapter, batch, z, opts, weights=None if weights is None else place(host_weights),
                                lengths=lengths, method=method, max_iter=max_iter, tol=tol, history=history,
                                learning_rate=learning_rate)
    result = z
    if framework == "jax":
        import jax.numpy as jnp

        result = jnp.asarray(z)
    if univariate:  # (B, N) or a list of (N_i,) series: an (L,) barycenter
        result = result.reshape(-1)
    return (result, dict(report)) if return_report else result
