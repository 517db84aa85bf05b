"""Recurrent networks evaluated in parallel over time (DEER, Lim et al.
2023): Newton's method on the whole trajectory, each linearised step solved
by a parallel scan, gradients by implicit differentiation (softwave/deer.hpp
has the algorithm). Cells exactly as PyTorch defines them (``torch.nn.RNN``
with tanh, ``torch.nn.GRU``, ``torch.nn.LSTM``; one layer, batch first), with
PyTorch's weight layouts, for torch tensors (autograd, CPU or CUDA on the
current stream) and NumPy arrays.

Example::

    import torch, softwave.deer as deer
    gru = deer.GRU(8, 32).cuda()                 # torch.nn.GRU's parameters
    y, h_n = gru(torch.randn(16, 100_000, 8, device="cuda"))
    y.square().mean().backward()
    print(gru.last_report.iterations, gru.last_report.path)

``method``: "auto" (DEER where it is expected to beat the sequential loop,
else that loop), "deer" or "sequential". ``jacobian``: "full" (Newton),
"diagonal" (quasi-DEER: cheaper iterations, more of them) or "block" (the
Jacobian's diagonal blocks of ``block_size``, which divides the state size:
heads, or ParaRNN's 2×2 / 3×3). ``damping``: 0
(plain Newton) or the starting λ of Levenberg–Marquardt steps (quasi-ELK,
Gonzalez et al. 2024; with jacobian="diagonal"): each update is the
smoothed mean of a Kalman smoother, so Jacobian products that make Newton
overflow stay finite; λ then halves after an update that lowered the
residual and returns to its start after one that did not. Damped runs stop on the
residual: their default atol / rtol are a hundredth of Newton's. A
sequence whose iterations do not converge (or overflow) is evaluated
sequentially; the report's ``path`` says so ("deer", "damped", "fallback"
or "sequential"). ``kernel``:
"automatic" (on CUDA, one fused kernel per Newton iteration for diagonal
Jacobians, and full ones at n = 1, with n <= 16), "portable" or
"specialised" (the fused kernel, or an error saying why it cannot run).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

import numpy as np

from . import _core

__all__ = ["rnn", "gru", "lstm", "GRU", "LSTM", "DeerReport"]

_GATES = {"elman": 1, "gru": 3, "lstm": 4}
_PATHS = ("deer", "fallback", "sequential", "damped")


@dataclass
class DeerReport:
    """Per sequence: Newton iterations run and the path its states took."""

    iterations: List[int]
    path: List[str]


def _is_torch(a) -> bool:
    return type(a).__module__.startswith("torch")


def _settings(cell, method, jacobian, kernel, atol, rtol, max_iter, chunk, check_inputs, stream, on_cuda,
              damping=0.0, block_size=2):
    if cell not in _GATES:
        raise ValueError(f"softwave: cell must be one of {', '.join(_GATES)} (got {cell!r})")
    s = {"cell": cell, "method": str(method), "jacobian": str(jacobian), "kernel": str(kernel),
         "max_iterations": int(max_iter), "chunk": int(chunk), "damping": float(damping),
         "block_size": int(block_size), "stream": stream,
         "check": (not on_cuda) if check_inputs is None else bool(check_inputs)}
    if atol is not None:
        s["atol"] = float(atol)
    if rtol is not None:
        s["rtol"] = float(rtol)
    return s


def _report(iterations, path) -> DeerReport:
    its = [int(i) for i in np.asarray(iterations).reshape(-1)]
    return DeerReport(iterations=its, path=[_PATHS[int(p)] for p in np.asarray(path).reshape(-1)])


def _forward_numpy(x, h0, weights, lengths, settings, y=None):
    x = np.ascontiguousarray(x)
    if x.dtype not in (np.float32, np.float64):
        x = x.astype(np.float64)
    dtype = x.dtype
    w = [None if a is None else np.ascontiguousarray(a, dtype=dtype) for a in weights]
    rows, hidden = w[1].shape if w[1].ndim == 2 else (0, 0)
    n = 2 * hidden if settings["cell"] == "lstm" else hidden
    B, T = x.shape[0], x.shape[1] if x.ndim == 3 else 0
    out = {"x": x, "y0": None if h0 is None else np.ascontiguousarray(h0, dtype=dtype),
           "lengths": None if lengths is None else np.ascontiguousarray(lengths, dtype=np.int32),
           "weight_ih": w[0], "weight_hh": w[1], "bias_ih": w[2], "bias_hh": w[3],
           "y": np.empty((B, T, n), dtype=dtype) if y is None else y,
           "iterations": np.empty((B,), dtype=np.int32), "path": np.empty((B,), dtype=np.int32)}
    _core.deer_rnn("forward", out, settings)
    return out


def _torch_function():
    import torch

    class _Deer(torch.autograd.Function):
        @staticmethod
        def forward(ctx, settings, lengths, n, x, h0, w_ih, w_hh, b_ih, b_hh):
            B, T = x.shape[0], x.shape[1]
            arrays = {"x": x.detach().contiguous(),
                      "y0": None if h0 is None else h0.detach().contiguous(),
                      "lengths": lengths,
                      "weight_ih": w_ih.detach().contiguous(), "weight_hh": w_hh.detach().contiguous(),
                      "bias_ih": None if b_ih is None else b_ih.detach().contiguous(),
                      "bias_hh": None if b_hh is None else b_hh.detach().contiguous(),
                      "y": x.new_empty((B, T, n)),
                      "iterations": torch.empty((B,), dtype=torch.int32, device=x.device),
                      "path": torch.empty((B,), dtype=torch.int32, device=x.device)}
            _core.deer_rnn("forward", arrays, settings)
            ctx.arrays = arrays
            ctx.settings = settings
            ctx.has = (h0 is not None, b_ih is not None, b_hh is not None)
            ctx.mark_non_differentiable(arrays["iterations"], arrays["path"])
            return arrays["y"], arrays["iterations"], arrays["path"]

        @staticmethod
        def backward(ctx, grad_y, _iterations, _path):
            a = dict(ctx.arrays)
            has_h0, has_bih, has_bhh = ctx.has
            need = ctx.needs_input_grad
            grads = {"grad_y": grad_y.contiguous(),
                     "grad_x": torch.empty_like(a["x"]) if need[3] else None,
                     "grad_y0": a["x"].new_empty((a["x"].shape[0], grad_y.shape[2]))
                     if has_h0 and need[4] else None,
                     "grad_weight_ih": torch.empty_like(a["weight_ih"]) if need[5] else None,
                     "grad_weight_hh": torch.empty_like(a["weight_hh"]) if need[6] else None,
                     "grad_bias_ih": torch.empty_like(a["bias_ih"]) if has_bih and need[7] else None,
                     "grad_bias_hh": torch.empty_like(a["bias_hh"]) if has_bhh and need[8] else None}
            del a["iterations"], a["path"]
            a.update(grads)
            settings = dict(ctx.settings)
            settings["warm_start"] = False
            _core.deer_rnn("gradients", a, settings)
            return (None, None, None, grads["grad_x"], grads["grad_y0"], grads["grad_weight_ih"],
                    grads["grad_weight_hh"], grads["grad_bias_ih"], grads["grad_bias_hh"])

    return _Deer


_DEER_FUNCTION = None


def rnn(x, h0=None, weight_ih=None, weight_hh=None, bias_ih=None, bias_hh=None, *, cell: str = "gru",
        lengths=None, method: str = "auto", jacobian: str = "full", kernel: str = "automatic",
        atol: Optional[float] = None,
        rtol: Optional[float] = None, max_iter: int = 100, chunk: int = 0, damping: float = 0.0,
        block_size: int = 2, check_inputs: Optional[bool] = None):
    """The states of a one-layer recurrent cell over every step.

    x: (B, T, m) (or (T, m)); h0: (B, n) initial state (n = H, or 2H for
    LSTM: h then c), None for zeros; the weights in PyTorch's layouts
    (weight_ih (G·H, m), weight_hh (G·H, H), biases (G·H,) or None; G = 1, 3,
    4 for elman, gru, lstm). lengths: (B,) steps of each sequence (states
    past a length are zero). atol / rtol: Newton's stopping tolerances
    (defaults 1e-4 / 1e-3 in float32, 1e-10 / 1e-8 in float64). damping:
    the starting λ of damped (quasi-ELK) steps, 0 for Newton's.
    block_size: the blocks' side with jacobian="block". Returns
    (y, report): y (B, T, n) with autograd for torch tensors.
    """
    if weight_ih is None or weight_hh is None:
        raise ValueError("softwave: weight_ih and weight_hh are required")
    single = x.ndim == 2
    if single:
        x = x[None]
        h0 = None if h0 is None else h0[None]
    if cell not in _GATES:
        raise ValueError(f"softwave: cell must be one of {', '.join(_GATES)} (got {cell!r})")
    hidden = weight_hh.shape[-1]
    n = 2 * hidden if cell == "lstm" else hidden
    if _is_torch(x):
        import torch

        global _DEER_FUNCTION
        if _DEER_FUNCTION is None:
            _DEER_FUNCTION = _torch_function()
        on_cuda = x.device.type == "cuda"
        stream = int(torch.cuda.current_stream(x.device).cuda_stream) if on_cuda else 0
        settings = _settings(cell, method, jacobian, kernel, atol, rtol, max_iter, chunk, check_inputs,
                             stream, on_cuda, damping, block_size)
        if lengths is not None:
            lengths = torch.as_tensor(lengths, dtype=torch.int32, device=x.device).contiguous()
        y, iterations, path = _DEER_FUNCTION.apply(settings, lengths, n, x, h0, weight_ih, weight_hh,
                                                   bias_ih, bias_hh)
        report = _report(iterations.cpu().numpy(), path.cpu().numpy())
    else:
        settings = _settings(cell, method, jacobian, kernel, atol, rtol, max_iter, chunk, check_inputs, 0,
                             False, damping, block_size)
        out = _forward_numpy(x, h0, (weight_ih, weight_hh, bias_ih, bias_hh), lengths, settings)
        y = out["y"]
        report = _report(out["iterations"], out["path"])
    return (y[0] if single else y), report


def gru(x, h0, weight_ih, weight_hh, bias_ih=None, bias_hh=None, **kwargs):
    """torch.nn.GRU's recurrence (gates r, z, n): (y (B, T, H), report)."""
    return rnn(x, h0, weight_ih, weight_hh, bias_ih, bias_hh, cell="gru", **kwargs)


def lstm(x, state, weight_ih, weight_hh, bias_ih=None, bias_hh=None, **kwargs):
    """torch.nn.LSTM's recurrence (gates i, f, g, o). state: None or (h0, c0),
    each (B, H). Returns (h (B, T, H), c (B, T, H), report)."""
    h0 = None
    if state is not None:
        h, c = state
        h0 = (np.concatenate if not _is_torch(h) else __import__("torch").cat)((h, c), -1)
    y, report = rnn(x, h0, weight_ih, weight_hh, bias_ih, bias_hh, cell="lstm", **kwargs)
    hidden = y.shape[-1] // 2
    return y[..., :hidden], y[..., hidden:], report


def _module_classes():
    import torch

    class _Recurrent(torch.nn.Module):
        """One layer, batch first, with torch.nn.GRU / LSTM's parameter names
        (weight_ih_l0, weight_hh_l0, bias_ih_l0, bias_hh_l0) and
        initialisation, so that their state dicts load as they are."""

        cell = "gru"

        def __init__(self, input_size, hidden_size, bias=True, *, method="auto", jacobian="full",
                     kernel="automatic", atol=None, rtol=None, max_iter=100, damping=0.0, block_size=2,
                     device=None, dtype=None):
            super().__init__()
            rows = _GATES[self.cell] * hidden_size
            kw = {"device": device, "dtype": dtype}
            self.input_size, self.hidden_size = input_size, hidden_size
            self.weight_ih_l0 = torch.nn.Parameter(torch.empty(rows, input_size, **kw))
            self.weight_hh_l0 = torch.nn.Parameter(torch.empty(rows, hidden_size, **kw))
            if bias:
                self.bias_ih_l0 = torch.nn.Parameter(torch.empty(rows, **kw))
                self.bias_hh_l0 = torch.nn.Parameter(torch.empty(rows, **kw))
            else:
                self.register_parameter("bias_ih_l0", None)
                self.register_parameter("bias_hh_l0", None)
            self.options = {"method": method, "jacobian": jacobian, "kernel": kernel, "atol": atol, "rtol": rtol,
                            "max_iter": max_iter, "damping": damping, "block_size": block_size}
            self.last_report = None
            bound = 1.0 / hidden_size ** 0.5
            with torch.no_grad():
                for p in self.parameters():
                    p.uniform_(-bound, bound)

        def _run(self, x, h0, lengths):
            y, self.last_report = rnn(x, h0, self.weight_ih_l0, self.weight_hh_l0, self.bias_ih_l0,
                                      self.bias_hh_l0, cell=self.cell, lengths=lengths, **self.options)
            return y

    class GRU(_Recurrent):
        """Drop-in for ``torch.nn.GRU(input_size, hidden_size, batch_first=True)``:
        forward(x, h0=None, lengths=None) -> (output (B, T, H), h_n (1, B, H)),
        h_n being each sequence's last state (at its length)."""

        cell = "gru"

        def forward(self, x, h0=None, lengths=None):
            y = self._run(x, None if h0 is None else h0.reshape(x.shape[0], -1), lengths)
            return y, _last(y, lengths)[None]

    class LSTM(_Recurrent):
        """Drop-in for ``torch.nn.LSTM(input_size, hidden_size, batch_first=True)``:
        forward(x, (h0, c0)=None, lengths=None) -> (output, (h_n, c_n))."""

        cell = "lstm"

        def forward(self, x, state=None, lengths=None):
            h0 = None
            if state is not None:
                h, c = state
                h0 = torch.cat((h.reshape(x.shape[0], -1), c.reshape(x.shape[0], -1)), -1)
            y = self._run(x, h0, lengths)
            H = self.hidden_size
            last = _last(y, lengths)
            return y[..., :H], (last[None, :, :H], last[None, :, H:])

    def _last(y, lengths):
        if lengths is None:
            return y[:, -1]
        index = torch.as_tensor(lengths, device=y.device).long() - 1
        return y[torch.arange(y.shape[0], device=y.device), index]

    return GRU, LSTM


def __getattr__(name):
    if name in ("GRU", "LSTM"):
        classes = dict(zip(("GRU", "LSTM"), _module_classes()))
        globals().update(classes)
        return classes[name]
    raise AttributeError(f"module 'softwave.deer' has no attribute {name!r}")
