"""Figures for alignments and barycenters (needs matplotlib).

Inputs may be NumPy arrays, torch tensors (any device) or JAX arrays; they
are copied to the host for drawing. Each function draws into ``ax`` (a new
figure when omitted) and returns the Axes.
"""

from __future__ import annotations

import numpy as np


def _host(a):
    if a is None:
        return None
    if hasattr(a, "detach"):  # torch
        a = a.detach().cpu()
    return np.asarray(a, dtype=np.float64)


def _pyplot():
    try:
        import matplotlib.pyplot as plt
    except ImportError as error:  # pragma: no cover - depends on the machine
        raise ImportError("softwave.plot needs matplotlib (pip install matplotlib)") from error
    return plt


def alignment(x, y, E=None, *, gamma: float = 1.0, dist: str = "sqeuclidean", show_path: bool = True, ax=None,
              cmap: str = "viridis"):
    """Heat map of the expected alignment E between one pair of series
    x (N,) / (N, d) and y (M,) / (M, d), with the series along the axes and the
    hard-DTW warping path on top. E defaults to softwave's expected alignment
    at ``gamma``."""
    from . import numpy as swn

    plt = _pyplot()
    x, y = _host(x), _host(y)
    if x.ndim not in (1, 2) or y.ndim != x.ndim:
        raise ValueError("softwave: alignment() draws one pair: x (N,) or (N, d), y (M,) or (M, d)")
    E = swn.soft_dtw_alignment(x, y, gamma, dist=dist) if E is None else _host(E)
    if E.shape != (x.shape[0], y.shape[0]):
        raise ValueError(f"softwave: E must be ({x.shape[0]}, {y.shape[0]}) (got {E.shape})")
    colorbar_ax = None
    if ax is None:
        fig = plt.figure(figsize=(6.4, 6))
        grid = fig.add_gridspec(2, 3, width_ratios=(1, 4, 0.15), height_ratios=(1, 4), wspace=0.05, hspace=0.05)
        ax = fig.add_subplot(grid[1, 1])
        colorbar_ax = fig.add_subplot(grid[1, 2])
        top = fig.add_subplot(grid[0, 1], sharex=ax)
        left = fig.add_subplot(grid[1, 0], sharey=ax)
        top.plot(np.arange(y.shape[0]), y.reshape(y.shape[0], -1), color="tab:orange", lw=1)
        top.set_axis_off()
        left.plot(x.reshape(x.shape[0], -1), np.arange(x.shape[0]), color="tab:blue", lw=1)
        left.invert_xaxis()
        left.set_axis_off()
        top.set_title(f"expected alignment, γ = {gamma:g}")
    image = ax.imshow(E, origin="upper", aspect="auto", cmap=cmap, vmin=0.0, vmax=1.0, interpolation="nearest")
    if show_path:
        _, path = swn.dtw(x, y, dist=dist)
        ax.plot(path[:, 1], path[:, 0], color="white", lw=1.0, ls="--", label="hard DTW path")
        ax.legend(loc="lower left", fontsize="small", framealpha=0.6)
    ax.set_xlabel("y index j")
    ax.set_ylabel("x index i")
    if colorbar_ax is None:
        ax.set_title(f"expected alignment, γ = {gamma:g}")
        ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.02)
    else:
        ax.figure.colorbar(image, cax=colorbar_ax)
    return ax


def barycenter(X, b, *, ax=None, lengths=None, label: str = "Soft-DTW barycenter"):
    """The series of X ((B, N), (B, N, 1) or a list of series) in light grey
    and the barycenter b ((L,) or (L, 1)) on top. Multivariate series draw
    their first channel."""
    plt = _pyplot()
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 3.5))
    series = [_host(s) for s in X] if isinstance(X, (list, tuple)) else list(_host(X))
    if lengths is not None:
        series = [s[: int(n)] for s, n in zip(series, _host(lengths))]
    for s in series:
        s = s.reshape(s.shape[0], -1)[:, 0]
        ax.plot(np.arange(s.shape[0]), s, color="0.75", lw=0.8)
    b = _host(b)
    b = b.reshape(b.shape[0], -1)[:, 0]
    ax.plot(np.arange(b.shape[0]), b, color="tab:red", lw=2.0, label=label)
    ax.set_xlabel("time step")
    ax.legend(loc="best", fontsize="small")
    return ax
