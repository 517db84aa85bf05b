"""Recurrent networks evaluated in parallel over time (DEER, Lim et al.
2023): Newton's method on the whole trajectory, each linearised step solved
by a parallel scan, gradients by implicit differentiation (softwave/deer.hpp
has the algorithm). Cells exactly as PyTorch defines them (``torch.nn.RNN``
with tanh, ``torch.nn.GRU``, ``torch.nn.LSTM``; one layer, batch first), with
PyTorch's weight layouts, and ParaRNN's cells (Danieli et al. 2025:
``ParaGRU``, ``ParaLSTM`` with its parameters; ``cell="cifg_lstm"``, its LSTM
with coupled input and forget gates and peepholes), for torch tensors
(autograd, CPU or CUDA on the current stream) and NumPy arrays.

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
heads, or ParaRNN's 2×2 / 3×3; ``block_layout="strided"`` groups states
q, q + n/k, … instead of consecutive ones). ``diagonal=True``: each gate's
hidden-side matrix is diagonal, as in ParaRNN's cells (weight_hh is
(G·H, 1)); a unit then sees only its own past, so jacobian="diagonal" is
exact Newton for elman and gru, and for lstm and cifg_lstm
jacobian="block", block_size=2, block_layout="strided" (each unit's (h, c)
pair). ``damping``: 0
(plain Newton) or the starting λ of Levenberg–Marquardt steps (Gonzalez et
al. 2024: quasi-ELK with jacobian="diagonal", ELK with jacobian="full",
O(n³) a step): each update is the
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

from typing import List, Optional

import numpy as np

from . import _core

__all__ = ["rnn", "gru", "lstm", "cifg_lstm", "neural_ode", "linear_recurrence", "GRU", "LSTM", "ParaGRU", "ParaLSTM", "NeuralODE",
           "DeerReport"]

_GATES = {"elman": 1, "gru": 3, "lstm": 4, "cifg_lstm": 3}
# The cells whose state is (h, c).
_CELL_STATE = ("lstm", "cifg_lstm")
_PATHS = ("deer", "fallback", "sequential", "damped")


class DeerReport:
    """Per sequence: Newton iterations run (``iterations``) and the path its
    states took (``path``). Read when first asked for: reading copies the
    counts from the device, which waits for it, so a forward whose report
    nobody reads never waits (and traces under torch.compile)."""

    def __init__(self, iterations, path):
        self._counts = (iterations, path)
        self._read = None

    def _lists(self):
        if self._read is None:
            iterations, path = (np.asarray(a.cpu() if _is_torch(a) else a).reshape(-1) for a in self._counts)
            self._read = ([int(i) for i in iterations], [_PATHS[int(p)] for p in path])
        return self._read

    @property
    def iterations(self) -> List[int]:
        return self._lists()[0]

    @property
    def path(self) -> List[str]:
        return self._lists()[1]

    def __eq__(self, other):
        return isinstance(other, DeerReport) and self._lists() == other._lists()

    def __repr__(self):
        return f"DeerReport(iterations={self.iterations}, path={self.path})"


def _is_torch(a) -> bool:
    return type(a).__module__.startswith("torch")


def _settings(cell, method, jacobian, kernel, atol, rtol, max_iter, chunk, check_inputs, on_cuda,
              damping=0.0, block_size=2, block_layout="contiguous", diagonal=False, start_warm_up=None):
    """The core's settings; atol, rtol and start_warm_up None: the core's
    defaults. The stream is added where the core is called."""
    if cell not in _GATES and cell != "neural_ode":
        raise ValueError(f"softwave: cell must be one of {', '.join(_GATES)} (got {cell!r})")
    if start_warm_up is not None and int(start_warm_up) < 0:
        raise ValueError(f"softwave: start_warm_up must be >= 0 or None (got {start_warm_up})")
    return {"cell": cell, "method": str(method), "jacobian": str(jacobian), "kernel": str(kernel),
            "atol": None if atol is None else float(atol), "rtol": None if rtol is None else float(rtol),
            "max_iterations": int(max_iter), "chunk": int(chunk),
            "start_warm_up": None if start_warm_up is None else int(start_warm_up), "damping": float(damping),
            "block_size": int(block_size), "block_layout": str(block_layout), "diagonal": bool(diagonal),
            "check": (not on_cuda) if check_inputs is None else bool(check_inputs)}


def weight_names(cell: str) -> tuple:
    """The core's names of the five weight arrays a cell takes, in the
    order the front ends pass them: PyTorch's for the recurrent cells, and
    for neural_ode (weight_hidden, weight_out, bias_hidden, bias_out), the
    fifth unused."""
    if cell == "neural_ode":
        return ("weight_hidden", "weight_out", "bias_hidden", "bias_out", "peephole")
    return ("weight_ih", "weight_hh", "bias_ih", "bias_hh", "peephole")


def _state_size(cell: str, weight_hh, diagonal: bool) -> int:
    """n from weight_hh's shape: (G·H, H), or (G·H, 1) diagonal; for
    neural_ode from weight_out's, (n, h) (passed in weight_hh's place)."""
    if cell == "neural_ode":
        return weight_hh.shape[0]
    hidden = weight_hh.shape[0] // _GATES[cell] if diagonal else weight_hh.shape[-1]
    return 2 * hidden if cell in _CELL_STATE else hidden


def _core_settings(settings: dict, stream: int = 0, **extra) -> dict:
    """What _core.deer_rnn takes: the settings given (atol and rtol left out
    where None) on `stream`."""
    return dict({k: v for k, v in settings.items() if v is not None}, stream=stream, **extra)


def _forward_numpy(x, h0, weights, lengths, settings, y=None):
    x = np.ascontiguousarray(x)
    if x.dtype not in (np.float32, np.float64):
        x = x.astype(np.float64)
    dtype = x.dtype
    w = [None if a is None else np.ascontiguousarray(a, dtype=dtype) for a in weights]
    n = _state_size(settings["cell"], w[1], settings["diagonal"]) if w[1].ndim == 2 else 0
    B, T = x.shape[0], x.shape[1] if x.ndim == 3 else 0
    out = {"x": x, "y0": None if h0 is None else np.ascontiguousarray(h0, dtype=dtype),
           "lengths": None if lengths is None else np.ascontiguousarray(lengths, dtype=np.int32),
           **dict(zip(weight_names(settings["cell"]), w)),
           "y": np.empty((B, T, n), dtype=dtype) if y is None else y,
           "iterations": np.empty((B,), dtype=np.int32), "path": np.empty((B,), dtype=np.int32)}
    _core.deer_rnn("forward", out, _core_settings(settings))
    return out


def rnn(x, h0=None, weight_ih=None, weight_hh=None, bias_ih=None, bias_hh=None, *, cell: str = "gru",
        lengths=None, method: str = "auto", jacobian: str = "full", kernel: str = "automatic",
        atol: Optional[float] = None,
        rtol: Optional[float] = None, max_iter: int = 100, chunk: int = 0, damping: float = 0.0,
        block_size: int = 2, block_layout: str = "contiguous", diagonal: bool = False,
        peephole=None, start_warm_up: Optional[int] = None, check_inputs: Optional[bool] = None):
    """The states of a one-layer recurrent cell over every step.

    x: (B, T, m) (or (T, m)); h0: (B, n) initial state (n = H, or 2H for
    lstm and cifg_lstm: h then c), None for zeros; the weights in PyTorch's
    layouts (weight_ih (G·H, m), weight_hh (G·H, H), biases (G·H,) or None;
    G = 1, 3, 4, 3 for elman, gru, lstm, cifg_lstm; with diagonal=True
    weight_hh is (G·H, 1), the diagonals of the gates' hidden-side
    matrices); peephole: cifg_lstm's (2H,) C_f then C_o (softwave/deer.hpp
    has its equations). weight_ih None: x holds the input projections
    W_ih x + b_ih, (B, T, G·H) (formed by the caller's own matrix product;
    bias_ih, if given, is still added). lengths: (B,) steps of each sequence (states
    past a length are zero). atol / rtol: Newton's stopping tolerances on
    each update (defaults 1e-4 / 1e-3 in float32, 1e-10 / 1e-8 in
    float64); quasi-Newton (diagonal or block Jacobians) converges linearly,
    and where it converges slowly the error left is several times the last
    update (softwave/deer.hpp): a smaller tolerance bounds it. damping:
    the starting λ of damped steps (ELK with jacobian="full", quasi-ELK with
    "diagonal"), 0 for Newton's.
    block_size, block_layout: the blocks with jacobian="block".
    start_warm_up: Newton starts from the states evaluated chunk by chunk,
    each chunk from zeros this many steps before it (a cell that forgets
    its past is then close to its answer, and Newton takes fewer
    iterations); 0 starts from zeros, as the DEER paper does; None: 32
    (on a GPU's fused iteration 16 at n > 1, zeros for full Jacobians of a
    state of 2). Returns
    (y, report): y (B, T, n) with autograd for torch tensors.
    """
    if weight_hh is None:
        raise ValueError("softwave: weight_hh is required")
    single = x.ndim == 2
    if single:
        x = x[None]
        h0 = None if h0 is None else h0[None]
    if cell not in _GATES:
        raise ValueError(f"softwave: cell must be one of {', '.join(_GATES)} (got {cell!r})")
    y, report = _solve(x, h0, (weight_ih, weight_hh, bias_ih, bias_hh, peephole), lengths,
                       (cell, method, jacobian, kernel, atol, rtol, max_iter, chunk, check_inputs),
                       (damping, block_size, block_layout, diagonal, start_warm_up))
    return (y[0] if single else y), report


def _solve(x, h0, weights, lengths, settings_head, settings_tail):
    """(y, report) for torch tensors (differentiable) or NumPy arrays; the
    settings as _settings takes them, around whether x is on a GPU."""
    cell = settings_head[0]
    n = _state_size(cell, weights[1], settings_tail[3])
    if _is_torch(x):
        import torch

        from . import _torch_deer

        settings = _settings(*settings_head, x.device.type == "cuda", *settings_tail)
        if lengths is not None:
            lengths = torch.as_tensor(lengths, dtype=torch.int32, device=x.device).contiguous()
        y, iterations, path = _torch_deer.rnn(settings, lengths, n, x, h0, *weights)
        return y, DeerReport(iterations, path)
    settings = _settings(*settings_head, False, *settings_tail)
    out = _forward_numpy(x, h0, weights, lengths, settings)
    return out["y"], DeerReport(out["iterations"], out["path"])


def gru(x, h0, weight_ih, weight_hh, bias_ih=None, bias_hh=None, **kwargs):
    """torch.nn.GRU's recurrence (gates r, z, n): (y (B, T, H), report)."""
    return rnn(x, h0, weight_ih, weight_hh, bias_ih, bias_hh, cell="gru", **kwargs)


def lstm(x, state, weight_ih, weight_hh, bias_ih=None, bias_hh=None, **kwargs):
    """torch.nn.LSTM's recurrence (gates i, f, g, o). state: None or (h0, c0),
    each (B, H). Returns (h (B, T, H), c (B, T, H), report)."""
    return _split_cell_state(rnn(x, _joined_state(state), weight_ih, weight_hh, bias_ih, bias_hh, cell="lstm",
                                 **kwargs))


def cifg_lstm(x, state, weight_ih, weight_hh, peephole, bias_ih=None, bias_hh=None, **kwargs):
    """ParaRNN's LSTM (gates f, o, c; the input gate coupled to the forget
    gate; peepholes (2H,) C_f, C_o), usually with diagonal=True. state: None
    or (h0, c0), each (B, H). Returns (h (B, T, H), c (B, T, H), report)."""
    return _split_cell_state(rnn(x, _joined_state(state), weight_ih, weight_hh, bias_ih, bias_hh,
                                 cell="cifg_lstm", peephole=peephole, **kwargs))


def neural_ode(steps, y0, weight_hidden, weight_out, bias_hidden=None, bias_out=None, *, inputs=None,
               lengths=None, method: str = "auto", jacobian: str = "full", kernel: str = "automatic",
               atol: Optional[float] = None, rtol: Optional[float] = None, max_iter: int = 100, chunk: int = 0,
               damping: float = 0.0, block_size: int = 2, block_layout: str = "contiguous",
               start_warm_up: Optional[int] = None, check_inputs: Optional[bool] = None):
    """The states y(t_1) .. y(t_T) of the neural ODE

        dy/dt = W_out tanh(W_hidden [y; u] + b_hidden) + b_out

    from y(t_0) = y0 (Chen et al. 2018's field: Linear, Tanh, Linear), one
    classical Runge–Kutta (RK4) step per interval of the grid, all steps
    solved at once by DEER (softwave/deer_ode.hpp: Newton on the RK4
    recurrence, so the result is the plain RK4 loop's to rounding).

    steps: the intervals Δ_t = t_k − t_{k−1}, (B, T) or (T,) for every
    sequence alike (``torch.diff`` of the time points; they may differ
    between steps and sequences, and be negative). y0: (B, n), or (n,) for
    one sequence. weight_hidden: (h, n + m), the columns of y then of u;
    weight_out: (n, h); biases (h,) and (n,) or None. inputs: (B, T, m),
    u_t held over interval t, or None (m = 0). lengths and the solver's
    options as :func:`rnn`'s (jacobian="diagonal": quasi-Newton on the
    chained stages' diagonals, exact only for a diagonal field). Returns
    (y (B, T, n), report); for torch tensors y is differentiable in steps,
    y0, inputs and the weights (the adjoint recurrence, then each step's
    four stages).
    """
    if weight_hidden is None or weight_out is None:
        raise ValueError("softwave: weight_hidden and weight_out are required")
    torch_input = _is_torch(y0)
    if torch_input:
        import torch

        cat, like = torch.cat, lambda a: torch.as_tensor(a, dtype=y0.dtype, device=y0.device)
    else:
        y0 = np.asarray(y0)
        if y0.dtype not in (np.float32, np.float64):
            y0 = y0.astype(np.float64)
        cat, like = np.concatenate, lambda a: np.asarray(a, dtype=y0.dtype)
    x, y0, single = ode_grid(y0, steps, inputs, like, cat,
                             lambda a, B: a[None].expand(B, -1) if torch_input else np.broadcast_to(
                                 a, (B, a.shape[0])))
    y, report = _solve(x, y0, (weight_hidden, weight_out, bias_hidden, bias_out, None), lengths,
                       ("neural_ode", method, jacobian, kernel, atol, rtol, max_iter, chunk, check_inputs),
                       (damping, block_size, block_layout, False, start_warm_up))
    return (y[0] if single else y), report


def ode_grid(y0, steps, inputs, like, cat, broadcast):
    """(x (B, T, 1 + m): Δ_t then u_t, y0 (B, n), single) of a neural-ODE
    call, in y0's array framework: like(a) converts to it, cat joins on the
    last axis, broadcast(a (T,), B) gives (B, T)."""
    single = y0.ndim == 1
    if single:
        y0 = y0[None]
    if y0.ndim != 2:
        raise ValueError(f"softwave: y0 must be (B, n) or (n,) (got shape {tuple(y0.shape)})")
    B = y0.shape[0]
    steps = like(steps)
    if steps.ndim == 1:
        steps = broadcast(steps, B)
    if steps.ndim != 2 or steps.shape[0] != B:
        raise ValueError(f"softwave: steps must be (T,) or (B, T) with B = {B} (y0's sequences) "
                         f"(got shape {tuple(steps.shape)})")
    x = steps[..., None]
    if inputs is not None:
        inputs = like(inputs)
        if single and inputs.ndim == 2:
            inputs = inputs[None]
        if inputs.ndim != 3 or tuple(inputs.shape[:2]) != tuple(steps.shape):
            raise ValueError(f"softwave: inputs must be (B, T, m) with (B, T) = {tuple(steps.shape)} "
                             f"(got shape {tuple(inputs.shape)})")
        x = cat((x, inputs), -1)
    return x, y0, single


def _recurrence_rows(a, b, y0):
    """(rows, T) of a and b's shape (..., T), checked; y0 of shape (...)."""
    if a.ndim < 1:
        raise ValueError("softwave: a must have at least one axis (..., T)")
    if tuple(b.shape) != tuple(a.shape):
        raise ValueError(f"softwave: b has shape {tuple(b.shape)}, expected a's shape {tuple(a.shape)}")
    if y0 is not None and tuple(y0.shape) != tuple(a.shape[:-1]):
        raise ValueError(f"softwave: y0 has shape {tuple(y0.shape)}, expected a's shape without its last axis "
                         f"{tuple(a.shape[:-1])}")
    return int(np.prod(a.shape[:-1], dtype=np.int64)), int(a.shape[-1])


def linear_recurrence(a, b, y0=None, *, reverse: bool = False, kernel: str = "automatic",
                      check_inputs: bool = True):
    """y[..., t] = a[..., t] · y[..., t−1] + b[..., t] along the last axis,
    from y[..., −1] = y0 (or 0); with ``reverse`` from the last step back,
    y[..., t] = a[..., t] · y[..., t+1] + b[..., t]. a and b have one shape
    (..., T), y0 that shape without T. Every row is split across the device
    by a parallel scan (on CUDA one pass reading a and b and writing y), so
    one long sequence runs as fast per step as many short ones: the linear
    step of DEER with diagonal Jacobians, and the recurrence of diagonal
    linear RNNs and state-space layers (a (B, D, T) tensor scans its B·D
    channels). torch tensors (differentiable in a, b and y0; CPU or CUDA on
    the current stream) or NumPy arrays (float32 or float64)."""
    if _is_torch(a):
        from . import _torch_deer
        return _torch_deer.linear_recurrence(a, b, y0, reverse, kernel, check_inputs)
    a, b = np.asarray(a), np.asarray(b)
    dtype = np.float32 if a.dtype == np.float32 and b.dtype == np.float32 else np.float64
    rows, T = _recurrence_rows(a, b, None if y0 is None else np.asarray(y0))
    arrays = {"a": np.ascontiguousarray(a, dtype=dtype).reshape(rows, T),
              "b": np.ascontiguousarray(b, dtype=dtype).reshape(rows, T),
              "y0": None if y0 is None else np.ascontiguousarray(y0, dtype=dtype).reshape(rows),
              "y": np.empty((rows, T), dtype=dtype)}
    _core.linear_recurrence("forward", arrays, {"reverse": reverse, "kernel": kernel, "check": check_inputs})
    return arrays["y"].reshape(a.shape)


def _joined_state(state):
    """(h0, c0) as one (…, 2H) state, or None."""
    if state is None:
        return None
    h, c = state
    return (np.concatenate if not _is_torch(h) else __import__("torch").cat)((h, c), -1)


def _split_cell_state(out):
    y, report = out
    hidden = y.shape[-1] // 2
    return y[..., :hidden], y[..., hidden:], report


def _exact_newton(cell: str, diagonal: bool):
    """(jacobian, block_size, block_layout): the cheapest Jacobian mode in
    which Newton is exact for the cell."""
    if not diagonal:
        return "full", 2, "contiguous"
    return ("block", 2, "strided") if cell in _CELL_STATE else ("diagonal", 2, "contiguous")


def _module_classes():
    import torch

    class _Recurrent(torch.nn.Module):
        """One layer, batch first, with torch.nn.GRU / LSTM's parameter names
        (weight_ih_l0, weight_hh_l0, bias_ih_l0, bias_hh_l0) and
        initialisation, so that their state dicts load as they are.
        diagonal=True: ParaRNN-style diagonal hidden weights (weight_hh_l0
        (G·H, 1)), solved by exact Newton on the Jacobian's structure
        unless jacobian is given."""

        cell = "gru"

        def __init__(self, input_size, hidden_size, bias=True, *, method="auto", jacobian=None,
                     kernel="automatic", atol=None, rtol=None, max_iter=100, damping=0.0, block_size=None,
                     block_layout=None, diagonal=False, start_warm_up=None, device=None, dtype=None):
            super().__init__()
            rows = _GATES[self.cell] * hidden_size
            kw = {"device": device, "dtype": dtype}
            self.input_size, self.hidden_size = input_size, hidden_size
            self.weight_ih_l0 = torch.nn.Parameter(torch.empty(rows, input_size, **kw))
            self.weight_hh_l0 = torch.nn.Parameter(torch.empty(rows, 1 if diagonal else hidden_size, **kw))
            if bias:
                self.bias_ih_l0 = torch.nn.Parameter(torch.empty(rows, **kw))
                self.bias_hh_l0 = torch.nn.Parameter(torch.empty(rows, **kw))
            else:
                self.register_parameter("bias_ih_l0", None)
                self.register_parameter("bias_hh_l0", None)
            exact = _exact_newton(self.cell, diagonal)
            jacobian, block_size, block_layout = (given if given is not None else default for given, default in
                                                  zip((jacobian, block_size, block_layout), exact))
            self.options = {"method": method, "jacobian": jacobian, "kernel": kernel, "atol": atol, "rtol": rtol,
                            "max_iter": max_iter, "damping": damping, "block_size": block_size,
                            "block_layout": block_layout, "diagonal": diagonal, "start_warm_up": start_warm_up}
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

    class _ParaRecurrent(torch.nn.Module):
        """ParaRNN's cells (Danieli et al. 2025) with its parameters, so that
        its state dicts load as they are: A (3, H) the gates' diagonal hidden
        weights, B (heads, m/heads, 3, H/heads) the input weights (block-
        diagonal over the heads), b (3, H) the biases; ParaLSTM also C (2, H),
        its peepholes. Its default nonlinearities (σ gates, tanh state).
        Solved by exact Newton on the Jacobian's structure (each unit a
        sequence of its own), to atol / rtol rather than ParaRNN's fixed
        three iterations. Initialised uniform in ±1/√H (ParaRNN's own
        initialisers come with its state dicts)."""

        cell = "gru"

        def __init__(self, input_size, hidden_size, num_heads=1, *, method="auto", kernel="automatic", atol=None,
                     rtol=None, max_iter=100, start_warm_up=None, device=None, dtype=None):
            super().__init__()
            if num_heads < 1 or input_size % num_heads or hidden_size % num_heads:
                raise ValueError(f"softwave: num_heads ({num_heads}) must divide input_size ({input_size}) and "
                                 f"hidden_size ({hidden_size})")
            kw = {"device": device, "dtype": dtype}
            self.input_size, self.hidden_size, self.num_heads = input_size, hidden_size, num_heads
            self.A = torch.nn.Parameter(torch.empty(3, hidden_size, **kw))
            self.B = torch.nn.Parameter(torch.empty(num_heads, input_size // num_heads, 3, hidden_size // num_heads,
                                                    **kw))
            self.b = torch.nn.Parameter(torch.empty(3, hidden_size, **kw))
            if self.cell == "cifg_lstm":
                self.C = torch.nn.Parameter(torch.empty(2, hidden_size, **kw))
            jacobian, block_size, block_layout = _exact_newton(self.cell, True)
            self.options = {"method": method, "jacobian": jacobian, "kernel": kernel, "atol": atol, "rtol": rtol,
                            "max_iter": max_iter, "block_size": block_size, "block_layout": block_layout,
                            "diagonal": True, "start_warm_up": start_warm_up}
            self.last_report = None
            bound = 1.0 / hidden_size ** 0.5
            with torch.no_grad():
                for p in self.parameters():
                    p.uniform_(-bound, bound)

        def _projections(self, x, weight, bias):
            """weight x + bias per head (weight and bias shaped as B and b), by
            torch's matrix products (the core's projection kernel would take
            the heads' block-diagonal W_ih whole): (…, T, 3·H), gate v's unit
            h·(H/heads) + j at v·H + h·(H/heads) + j. One head: one product
            with the bias added in it, since every torch operation costs the
            host more than these products cost the device."""
            m = x.shape[-1]
            if self.num_heads == 1:
                p = torch.addmm(bias.reshape(-1), x.reshape(-1, m), weight[0].reshape(m, -1))
                return p.reshape(*x.shape[:-1], -1)
            heads = x.reshape(*x.shape[:-1], self.num_heads, -1)
            p = torch.einsum("...hi,hivj->...vhj", heads, weight)
            return (p.reshape(*x.shape[:-1], 3, self.hidden_size) + bias).flatten(-2)

        def _run(self, p, h0, lengths, weight_hh, peephole=None):
            y, self.last_report = rnn(p, h0, None, weight_hh, cell=self.cell, lengths=lengths,
                                      peephole=peephole, **self.options)
            return y

    class ParaGRU(_ParaRecurrent):
        """ParaRNN's GRU: z, r = σ(A_z ⊙ h + B_z x + b_z), σ(A_r ⊙ h + B_r x + b_r),
        ĥ = tanh(A_h ⊙ h ⊙ r + B_h x + b_h), h' = z ⊙ ĥ + (1 − z) ⊙ h: PyTorch's GRU
        with diagonal hidden weights, b_hn = 0 and the update gate's weights
        and biases negated (its z is PyTorch's 1 − z), which is how it runs.
        forward(x (B, T, m), h0=None (B, H), lengths=None) -> states (B, T, H)."""

        cell = "gru"

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            # ParaRNN's gates (z, r, h) as PyTorch's (r, z, n), z negated
            # (σ(−a) = 1 − σ(a)): applied to the parameters, which are smaller
            # than the projections. Buffers, so that they follow the module's
            # device and dtype, left out of its state dict.
            p = self.A
            self.register_buffer("_gate_order", torch.tensor([1, 0, 2], device=p.device), persistent=False)
            self.register_buffer("_gate_sign", torch.tensor([[1.0], [-1.0], [1.0]], device=p.device,
                                                            dtype=p.dtype), persistent=False)

        def _pytorch_gates(self):
            """B, b and A in PyTorch's gate order and signs: (weight, bias,
            weight_hh (3·H, 1))."""
            order, sign = self._gate_order, self._gate_sign
            weight = self.B.index_select(2, order) * sign
            bias = self.b.index_select(0, order) * sign
            return weight, bias, (self.A.index_select(0, order) * sign).reshape(-1, 1)

        def forward(self, x, h0=None, lengths=None):
            weight, bias, weight_hh = self._pytorch_gates()
            return self._run(self._projections(x, weight, bias), h0, lengths, weight_hh)

    class ParaLSTM(_ParaRecurrent):
        """ParaRNN's LSTM (cell="cifg_lstm", softwave/deer.hpp): gates f, o, c,
        the input gate coupled to the forget gate, peepholes C = (C_f, C_o).
        forward(x (B, T, m), state=None ((h0, c0), each (B, H)), lengths=None)
        -> hidden states h (B, T, H), as ParaRNN's module returns; the cell
        states are in deer.cifg_lstm's output."""

        cell = "cifg_lstm"

        def forward(self, x, state=None, lengths=None):
            y = self._run(self._projections(x, self.B, self.b), _joined_state(state), lengths,
                          self.A.reshape(-1, 1), self.C.reshape(-1))
            return y[..., :self.hidden_size]

    class NeuralODE(torch.nn.Module):
        """A neural ODE, dy/dt = W_out tanh(W_hidden [y; u] + b_hidden) + b_out,
        integrated by RK4 on the grid given and solved by DEER
        (:func:`neural_ode`). Parameters weight_hidden (h, n + m),
        bias_hidden (h), weight_out (n, h), bias_out (n), initialised as
        torch.nn.Linear's; ``from_linear(hidden, out)`` takes a field built
        as ``Sequential(Linear(n + m, h), Tanh(), Linear(h, n))``.
        forward(y0 (B, n), steps (B, T) or (T,), inputs=None (B, T, m),
        lengths=None) -> y (B, T, n), the states at t_1 .. t_T."""

        def __init__(self, state_size, hidden_size, input_size=0, bias=True, *, method="auto", jacobian="full",
                     kernel="automatic", atol=None, rtol=None, max_iter=100, damping=0.0, start_warm_up=None,
                     device=None, dtype=None):
            super().__init__()
            kw = {"device": device, "dtype": dtype}
            self.state_size, self.hidden_size, self.input_size = state_size, hidden_size, input_size
            hidden = torch.nn.Linear(state_size + input_size, hidden_size, bias=bias, **kw)
            out = torch.nn.Linear(hidden_size, state_size, bias=bias, **kw)
            for name, p in (("weight_hidden", hidden.weight), ("bias_hidden", hidden.bias),
                            ("weight_out", out.weight), ("bias_out", out.bias)):
                self.register_parameter(name, p)
            self.options = {"method": method, "jacobian": jacobian, "kernel": kernel, "atol": atol, "rtol": rtol,
                            "max_iter": max_iter, "damping": damping, "start_warm_up": start_warm_up}
            self.last_report = None

        @classmethod
        def from_linear(cls, hidden, out, **options):
            """The field of ``Sequential(hidden, Tanh(), out)`` (two
            torch.nn.Linear), its parameters copied."""
            n, h = out.weight.shape
            module = cls(n, h, hidden.weight.shape[1] - n, device=out.weight.device, dtype=out.weight.dtype,
                         **options)
            with torch.no_grad():
                for name, given in (("weight_hidden", hidden.weight), ("weight_out", out.weight),
                                    ("bias_hidden", hidden.bias), ("bias_out", out.bias)):
                    if given is None:  # a layer without a bias: none here either
                        module.register_parameter(name, None)
                    else:
                        getattr(module, name).copy_(given)
            return module

        def forward(self, y0, steps, inputs=None, lengths=None):
            y, self.last_report = neural_ode(steps, y0, self.weight_hidden, self.weight_out, self.bias_hidden,
                                             self.bias_out, inputs=inputs, lengths=lengths, **self.options)
            return y

    return GRU, LSTM, ParaGRU, ParaLSTM, NeuralODE


_MODULES = ("GRU", "LSTM", "ParaGRU", "ParaLSTM", "NeuralODE")


def __getattr__(name):
    if name in _MODULES:
        classes = dict(zip(_MODULES, _module_classes()))
        globals().update(classes)
        return classes[name]
    raise AttributeError(f"module 'softwave.deer' has no attribute {name!r}")
