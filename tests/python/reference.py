"""Plain float64 Soft-DTW (Cuturi & Blondel 2017) for the Python tests: a
direct dynamic programme, no shortcuts, small sizes only."""

import math

import numpy as np


def cost_matrix(x, y, dist="sqeuclidean"):
    x = np.asarray(x, dtype=np.float64).reshape(len(x), -1)
    y = np.asarray(y, dtype=np.float64).reshape(len(y), -1)
    if dist == "sqeuclidean":
        return ((x[:, None, :] - y[None, :, :]) ** 2).sum(-1)
    if dist == "l1":
        return np.abs(x[:, None, :] - y[None, :, :]).sum(-1)
    if dist == "cosine":
        nx = np.maximum(np.linalg.norm(x, axis=1), 1e-8)
        ny = np.maximum(np.linalg.norm(y, axis=1), 1e-8)
        return 1.0 - (x @ y.T) / (nx[:, None] * ny[None, :])
    raise ValueError(dist)


def in_band(i, j, n, m, band):
    """softwave's Sakoe–Chiba band (softdtw.hpp): the cells the diagonal of
    the n×m rectangle crosses, widened by `band` along the longer side."""
    if band is None or band < 0:
        return True
    if n > m:
        return in_band(j, i, m, n, band)
    lo = (i * m) // n - band
    hi = -((-(i + 1) * m) // n) - 1 + band
    return lo <= j <= hi


def softmin(values, gamma):
    values = [v for v in values if v != math.inf]
    if not values:
        return math.inf
    if gamma == 0:
        return min(values)
    low = min(values)
    return low - gamma * math.log(sum(math.exp(-(v - low) / gamma) for v in values))


def sdtw_cost(C, gamma, band=None):
    n, m = C.shape
    R = np.full((n + 1, m + 1), math.inf)
    R[0, 0] = 0.0
    for i in range(1, n + 1):
        for j in range(1, m + 1):
            if in_band(i - 1, j - 1, n, m, band):
                R[i, j] = C[i - 1, j - 1] + softmin((R[i - 1, j - 1], R[i - 1, j], R[i, j - 1]), gamma)
    return R[n, m]


def sdtw(x, y, gamma=1.0, dist="sqeuclidean", band=None):
    return sdtw_cost(cost_matrix(x, y, dist), gamma, band)


def divergence(x, y, gamma=1.0, dist="sqeuclidean", band=None):
    return sdtw(x, y, gamma, dist, band) - 0.5 * (sdtw(x, x, gamma, dist, band) + sdtw(y, y, gamma, dist, band))


def numerical_grad(f, a, step=1e-6):
    """Central differences of the scalar f at every entry of a."""
    a = np.array(a, dtype=np.float64)
    grad = np.zeros_like(a)
    for index in np.ndindex(a.shape):
        up, down = a.copy(), a.copy()
        up[index] += step
        down[index] -= step
        grad[index] = (f(up) - f(down)) / (2 * step)
    return grad
