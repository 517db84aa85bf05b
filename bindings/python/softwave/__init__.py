"""softwave: differentiable sequence alignment (Soft-DTW) and optimal transport
(Sinkhorn) on CPUs and GPUs.

Front ends (imported on demand, so ``import softwave`` needs only NumPy):

- ``softwave.torch``: ``SoftDTW`` module and functions with autograd, CPU and
  CUDA tensors, on the current CUDA stream.
- ``softwave.jax``: the same functions with ``custom_vjp``, usable under jit.
- ``softwave.numpy``: plain functions returning values and gradients.
- ``softwave.barycenter``: Soft-DTW barycenters of NumPy, torch or JAX data.
- ``softwave.plot``: alignment and barycenter figures (needs matplotlib).
- ``softwave.ot``: entropic optimal transport (log-domain Sinkhorn, the
  Sinkhorn divergence, GeomLoss's ``SamplesLoss``, sampled Gromov–Wasserstein)
  for NumPy and torch.
- ``softwave.deer``: recurrent networks (Elman, GRU, LSTM as PyTorch defines
  them) evaluated in parallel over time by DEER, with autograd; drop-in
  ``GRU`` / ``LSTM`` modules.

The compiled core runs on Kokkos: OpenMP on CPUs, plus CUDA in a CUDA build
(``softwave.default_space()`` says which).
"""

from __future__ import annotations

import atexit

from . import _core
from ._barycenter import barycenter

__version__ = "0.1.0"
__all__ = ["barycenter", "default_space", "host_space", "has_cuda", "__version__"]

_core.initialize()
# Kokkos must be finalised before the interpreter (and the CUDA runtime) go.
atexit.register(_core.finalize)


def default_space() -> str:
    """Kokkos' default execution space of this build ("OpenMP", "Cuda", ...)."""
    return _core.default_space()


def host_space() -> str:
    """The Kokkos execution space that CPU arrays run on."""
    return _core.host_space()


def has_cuda() -> bool:
    """Whether this build runs CUDA arrays (a CUDA build of Kokkos)."""
    return _core.has_cuda()


def __getattr__(name):
    # Front ends load on first use: softwave.torch imports torch, and so on.
    if name in ("torch", "jax", "numpy", "plot", "ot", "deer"):
        import importlib

        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'softwave' has no attribute {name!r}")
