"""Optimal transport: log-domain Sinkhorn and sampled Gromov–Wasserstein
(``sampled_gw``) for NumPy arrays and torch tensors.

Between point clouds (costs formed on the fly, never stored), a cost matrix,
or a low-rank cost ``C = u 1ᵀ + 1 vᵀ − P Qᵀ``; balanced, semi-relaxed or
unbalanced (KL penalties ``rho_a``, ``rho_b``); ε given, relative to the
cost scale, or annealed; one problem or a batch of B problems in one call.
torch tensors stay where they are (CPU, or CUDA in a CUDA build) and CUDA
work runs on the current stream; ``value`` and the divergence carry autograd
to the points, weights, cost matrix and factors (envelope theorem: nothing is
differentiated through the iterations).

Example::

    import torch, softwave.ot as ot
    x = torch.randn(10000, 3, device="cuda", requires_grad=True)
    y = torch.randn(12000, 3, device="cuda")
    r = ot.sinkhorn(x, y, epsilon=0.01)
    r.value.backward()                  # ∇x in x.grad
    print(r.converged, r.iterations, r.marginal_error)
    matches = r.row_argmax()            # without forming the plan

``SamplesLoss`` takes GeomLoss's arguments, so ``from softwave.ot import
SamplesLoss`` replaces ``from geomloss import SamplesLoss`` for the Sinkhorn
loss with p = 2.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field
from typing import Any, Optional, Tuple

import numpy as np

from . import _core
from ._embedding import joint_embedding

__all__ = ["sinkhorn", "sinkhorn_divergence", "SinkhornResult", "SamplesLoss", "sampled_gw",
           "sampled_lowrank_gw", "GwResult",
           "knn_graph", "KnnGraph", "joint_embedding"]

_POINT_COSTS = ("sqeuclidean", "half_sqeuclidean")


def _is_torch(a) -> bool:
    return type(a).__module__.startswith("torch")


class _Frame:
    """The array framework of one call: allocation, contiguity, streams."""

    def __init__(self, like):
        self.torch = _is_torch(like)
        self.like = like
        if self.torch:
            import torch

            self.t = torch
            if not like.dtype.is_floating_point or like.dtype not in (torch.float32, torch.float64):
                raise TypeError(f"softwave: the data must be float32 or float64 (got {like.dtype})")
            self.dtype = like.dtype
            self.device = like.device
        else:
            a = np.asarray(like)
            self.dtype = a.dtype if a.dtype in (np.float32, np.float64) else np.dtype(np.float64)

    def array(self, name, a, keep_graph=False):
        """a as a contiguous array of the data's dtype and device; torch
        tensors detached unless keep_graph (under torch.compile the
        operators' autograd starts from the arrays; softwave._torch_ot
        detaches what the core reads)."""
        if a is None:
            return None
        if self.torch:
            t = self.t
            if not isinstance(a, t.Tensor):
                a = t.as_tensor(a, dtype=self.dtype, device=self.device)
            if a.device != self.device:
                raise ValueError(f"softwave: {name} is on {a.device} but the data are on {self.device}")
            if a.dtype != self.dtype:
                raise TypeError(f"softwave: {name} is {a.dtype} but the data are {self.dtype}")
            return a.contiguous() if keep_graph else a.detach().contiguous()
        a = np.asarray(a)
        if a.dtype.kind not in "fiub":
            raise TypeError(f"softwave: {name} must be a real array (got dtype {a.dtype})")
        return np.ascontiguousarray(a, dtype=self.dtype)

    def empty(self, shape, integer=False):
        if self.torch:
            dtype = self.t.int32 if integer else self.dtype
            return self.t.empty(tuple(shape), dtype=dtype, device=self.device)
        return np.empty(tuple(shape), dtype=np.int32 if integer else self.dtype)

    def zeros(self, shape):
        z = self.empty(shape)
        z[...] = 0
        return z

    def stream(self) -> int:
        if self.torch and self.device.type == "cuda":
            return int(self.t.cuda.current_stream(self.device).cuda_stream)
        return 0

    def default_check(self) -> bool:
        # A data check fences the device: off by default on CUDA, as the
        # Soft-DTW front end does.
        return not (self.torch and self.device.type == "cuda")


def _positive(name, value, allow_inf=False):
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"softwave: {name} must be a real number (got {type(value).__name__})")
    value = float(value)
    if not (value > 0) or (math.isinf(value) and not allow_inf):
        raise ValueError(f"softwave: {name} must be {'> 0' if allow_inf else 'finite and > 0'} (got {value})")
    return value


def _non_negative(name, value):
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"softwave: {name} must be a real number (got {type(value).__name__})")
    value = float(value)
    if not (value >= 0) or math.isinf(value):
        raise ValueError(f"softwave: {name} must be finite and >= 0 (got {value})")
    return value


def _settings(frame, *, epsilon, epsilon_relative, epsilon_scaling, rho, rho_a, rho_b,
              max_iterations, tolerance, check_every, cost, check_inputs, kernel="automatic"):
    if rho is not None:
        if rho_a is not None or rho_b is not None:
            raise ValueError("softwave: give rho, or rho_a and rho_b, not both")
        rho_a = rho_b = rho
    if cost not in _POINT_COSTS:
        raise ValueError(f"softwave: cost must be one of {', '.join(_POINT_COSTS)} (got {cost!r})")
    return {
        "epsilon": _positive("epsilon", epsilon),
        "epsilon_relative": bool(epsilon_relative),
        "epsilon_scaling": float(epsilon_scaling),
        "rho_a": math.inf if rho_a is None else _positive("rho_a", rho_a, allow_inf=True),
        "rho_b": math.inf if rho_b is None else _positive("rho_b", rho_b, allow_inf=True),
        "max_iterations": int(max_iterations),
        "tolerance": float(tolerance),
        "check_every": int(check_every),
        "cost": cost,
        "kernel": str(kernel),
        "check": frame.default_check() if check_inputs is None else bool(check_inputs),
    }


def _batched(name, a, rank):
    """a with a leading batch axis (rank = the batched rank); whether it had one."""
    if a is None:
        return None, None
    if a.ndim == rank:
        return a, True
    if a.ndim == rank - 1:
        return a.reshape((1,) + tuple(a.shape)), False
    shape = "(B, " + ", ".join("NKd"[: rank - 1]) + ")"
    raise ValueError(f"softwave: {name} must have {rank - 1} or {rank} dimensions {shape} (got shape {tuple(a.shape)})")


@dataclass
class _Problem:
    """What a result needs to answer questions about its plan."""

    frame: Any
    arrays: dict  # the cost form's arrays and the weights, batched
    settings: dict
    batched: bool
    sizes: Tuple[int, int, int]  # B, N, K


def _problem(x, y, a, b, cost_matrix, factors, settings_kw) -> _Problem:
    given = [name for name, v in (("x, y", x), ("cost_matrix", cost_matrix), ("factors", factors)) if v is not None]
    if len(given) != 1:
        raise ValueError("softwave: give point clouds x and y, a cost_matrix, or factors (u, v, p, q); exactly one")
    if x is not None and y is None:
        raise ValueError("softwave: y is required with x")
    first = x if x is not None else cost_matrix if cost_matrix is not None else factors[2]
    frame = _Frame(first)
    arrays = {}
    if x is not None:
        X, batched = _batched("x", frame.array("x", x, True), 3)
        Y, ybatched = _batched("y", frame.array("y", y, True), 3)
        if batched != ybatched:
            raise ValueError("softwave: x and y must both be batched (B, N, d) or both single (N, d)")
        arrays.update(x=X, y=Y)
        sizes = (X.shape[0], X.shape[1], Y.shape[1])
    elif cost_matrix is not None:
        C, batched = _batched("cost_matrix", frame.array("cost_matrix", cost_matrix, True), 3)
        arrays["cost"] = C
        sizes = tuple(C.shape)
    else:
        if len(factors) != 4:
            raise ValueError("softwave: factors must be (u, v, p, q); u and v may be None")
        u, v, p, q = (frame.array(n, f, True) for n, f in zip("uvpq", factors))
        P, batched = _batched("p", p, 3)
        Q, _ = _batched("q", q, 3)
        arrays.update(p=P, q=Q)
        if u is not None:
            arrays["u"] = _batched("u", u, 2)[0]
        if v is not None:
            arrays["v"] = _batched("v", v, 2)[0]
        sizes = (P.shape[0], P.shape[1], Q.shape[1])
    if a is not None:
        arrays["a"] = _batched("a", frame.array("a", a, True), 2)[0]
    if b is not None:
        arrays["b"] = _batched("b", frame.array("b", b, True), 2)[0]
    return _Problem(frame, arrays, _settings(frame, **settings_kw), batched, sizes)


def _unbatch(problem, a):
    return a if problem.batched or a is None else a[0]


def _solve_outputs(sizes, empty) -> dict:
    """The solve's outputs, by the core's names; empty(shape, integer)."""
    B, N, K = sizes
    return {"f": empty((B, N), False), "g": empty((B, K), False), "value": empty((B,), False),
            "transport_cost": empty((B,), False), "marginal_error": empty((B, 2), False),
            "iterations": empty((B,), True), "converged": empty((B,), True)}


def _query_layout(kind, sizes, z, draws):
    """A plan query's output (shape, whether integer) and the core's names of
    its input z (None: no input) and of its output."""
    B, N, K = sizes
    layouts = {"plan": ((B, N, K), False, None, "plan"),
               "apply": (lambda: (B, N, z.shape[2]), False, "v_apply", "plan_v"),
               "apply_transpose": (lambda: (B, K, z.shape[2]), False, "u_apply", "plan_t_u"),
               "row_argmax": ((B, N), True, None, "row_argmax"),
               "sample_rows": ((B, N, draws), True, None, "row_samples")}
    if kind not in layouts:
        raise ValueError(f"softwave: unknown plan query {kind!r}")
    shape, integer, z_name, out_name = layouts[kind]
    return (shape() if callable(shape) else shape), integer, z_name, out_name


@dataclass
class SinkhornResult:
    """Potentials and diagnostics of solved problems (leading B axis when
    the inputs had one). ``value`` is the dual objective, equal to OT_ε at
    convergence; ``converged`` holds only where both residuals met the
    tolerance, recomputed from the returned potentials."""

    f: Any
    g: Any
    value: Any
    transport_cost: Any
    marginal_error: Any  # (…, 2): ‖π1 − a‖₁, ‖πᵀ1 − b‖₁
    iterations: Any
    converged: Any
    _problem: Any = field(default=None, repr=False)
    _f: Any = field(default=None, repr=False)  # batched, detached
    _g: Any = field(default=None, repr=False)

    def _query(self, kind, z=None, draws=1, seed=0):
        pr = self._problem
        if pr.frame.torch:
            from . import _torch_ot

            return _torch_ot.plan_query(pr.arrays, self._f, self._g, pr.settings, kind, z, draws, seed)
        shape, integer, z_name, out_name = _query_layout(kind, pr.sizes, z, draws)
        out = pr.frame.empty(shape, integer=integer)
        arrays = dict(pr.arrays, f=self._f, g=self._g, **{out_name: out})
        if z_name is not None:
            arrays[z_name] = z
        _core.optimal_transport("queries", arrays, dict(pr.settings, seed=int(seed)))
        return out

    def plan(self):
        """The dense plan π (…, N, K): memory N·K, only on request."""
        return _unbatch(self._problem, self._query("plan"))

    def apply(self, v):
        """π V for V (…, K, m) or (…, K): (…, N, m), without forming π."""
        return self._apply(v, transpose=False)

    def apply_transpose(self, u):
        """πᵀ U for U (…, N, m) or (…, N): (…, K, m), without forming π."""
        return self._apply(u, transpose=True)

    def _apply(self, z, transpose):
        pr = self._problem
        z = pr.frame.array("u" if transpose else "v", z)
        vector = z.ndim == (2 if pr.batched else 1)
        if vector:
            z = z.reshape(tuple(z.shape) + (1,))
        if not pr.batched:
            z = z.reshape((1,) + tuple(z.shape))
        out = self._query("apply_transpose" if transpose else "apply", z)
        if vector:
            out = out[..., 0]
        return _unbatch(pr, out)

    def row_argmax(self):
        """argmax_j π_ij for every row (…, N), int32."""
        return _unbatch(self._problem, self._query("row_argmax"))

    def sample_rows(self, draws: int = 1, seed: int = 0):
        """draws columns per row, j ~ π_i· / (π1)_i: (…, N, draws) int32;
        the same seed gives the same samples on every backend."""
        return _unbatch(self._problem, self._query("sample_rows", draws=int(draws), seed=seed))


def _solve(problem, potentials, originals):
    """The solve's outputs (_solve_outputs), batched; for torch, value
    differentiable in the originals that require grad."""
    frame = problem.frame
    f0 = g0 = None
    if potentials is not None:
        f0 = _batched("potentials[0]", frame.array("potentials[0]", potentials[0]), 2)[0]
        g0 = _batched("potentials[1]", frame.array("potentials[1]", potentials[1]), 2)[0]
    if frame.torch:
        from . import _torch_ot

        return _torch_ot.sinkhorn(problem.arrays, problem.settings, originals, f0, g0)
    out = _solve_outputs(problem.sizes, lambda shape, integer: frame.empty(shape, integer=integer))
    settings = problem.settings
    if potentials is not None:
        out["f"], out["g"] = f0.copy(), g0.copy()  # the core checks their shapes
        settings = dict(settings, warm_start=True)
    _core.optimal_transport("solve", dict(problem.arrays, **out), settings)
    return out


def sinkhorn(x=None, y=None, a=None, b=None, *, cost_matrix=None, factors=None,
             cost: str = "sqeuclidean", epsilon: float = 0.05, epsilon_relative: bool = False,
             epsilon_scaling: float = 0.0, rho=None, rho_a=None, rho_b=None,
             max_iterations: int = 1000, tolerance: float = 1e-6, check_every: int = 10,
             potentials=None, check_inputs: Optional[bool] = None,
             kernel: str = "automatic") -> SinkhornResult:
    """Entropic OT between x (N, d) and y (K, d) (or batches (B, N, d),
    (B, K, d)), or for a cost_matrix (…, N, K), or a low-rank cost given by
    factors = (u, v, p, q): C = u_i + v_j − p_i·q_j (u, v may be None).

    a, b: weights (…, N), (…, K), non-negative (None: uniform). cost:
    "sqeuclidean" ‖x − y‖² or "half_sqeuclidean" (GeomLoss's p = 2).
    epsilon: > 0; with epsilon_relative, a fraction of each problem's largest
    cost. epsilon_scaling in (0, 1): anneal from the cost scale by that
    factor per iteration (0: off). rho (or rho_a, rho_b): KL penalties of
    the marginals (None: balanced). tolerance: stop once the marginal
    residual ‖π1 − a‖₁ is below it (checked every check_every iterations;
    <= 0 runs exactly max_iterations). potentials: (f, g) to start from.
    kernel: "automatic", "portable" or "specialised" (the CUDA kernels for
    float point clouds, d <= 64, and low-rank costs, rank <= 128; see
    SinkhornOptions::kernel).
    """
    kw = dict(epsilon=epsilon, epsilon_relative=epsilon_relative, epsilon_scaling=epsilon_scaling,
              rho=rho, rho_a=rho_a, rho_b=rho_b, max_iterations=max_iterations, tolerance=tolerance,
              check_every=check_every, cost=cost, check_inputs=check_inputs, kernel=kernel)
    problem = _problem(x, y, a, b, cost_matrix, factors, kw)
    originals = {"x": x, "y": y, "cost": cost_matrix, "a": a, "b": b}
    if factors is not None:
        originals.update(zip("uvpq", factors))
    out = _solve(problem, potentials, originals)
    value = out["value"]
    return SinkhornResult(
        f=_unbatch(problem, out["f"]), g=_unbatch(problem, out["g"]),
        value=_unbatch(problem, value), transport_cost=_unbatch(problem, out["transport_cost"]),
        marginal_error=_unbatch(problem, out["marginal_error"]),
        iterations=_unbatch(problem, out["iterations"]), converged=_unbatch(problem, out["converged"]),
        _problem=problem, _f=out["f"], _g=out["g"],
    )


def sinkhorn_divergence(x, y, a=None, b=None, *, cost: str = "sqeuclidean", epsilon: float = 0.05,
                        epsilon_relative: bool = False, epsilon_scaling: float = 0.0, rho=None,
                        max_iterations: int = 1000, tolerance: float = 1e-6, check_every: int = 10,
                        check_inputs: Optional[bool] = None, kernel: str = "automatic",
                        return_converged: bool = False):
    """S_ε = OT_ε(a, b) − ½ OT_ε(a, a) − ½ OT_ε(b, b) (+ ½ ε (Σa − Σb)² when
    unbalanced): ≥ 0 and 0 for equal inputs. Differentiable (torch) in x, y,
    a and b. Returns the values (…,), and with return_converged also
    whether all three solves met the tolerance (…,) int32, 1 where they
    did: (values, converged)."""
    kw = dict(epsilon=epsilon, epsilon_relative=epsilon_relative, epsilon_scaling=epsilon_scaling,
              rho=rho, rho_a=None, rho_b=None, max_iterations=max_iterations, tolerance=tolerance,
              check_every=check_every, cost=cost, check_inputs=check_inputs, kernel=kernel)
    problem = _problem(x, y, a, b, None, None, kw)
    frame = problem.frame
    if frame.torch:
        from . import _torch_ot

        values, converged = _torch_ot.sinkhorn_divergence(problem.arrays, problem.settings,
                                                          {"x": x, "y": y, "a": a, "b": b})
    else:
        B = problem.sizes[0]
        values, converged = frame.empty((B,)), frame.empty((B,), integer=True)
        _core.optimal_transport("divergence", dict(problem.arrays, values=values, converged=converged),
                                problem.settings)
    values = _unbatch(problem, values)
    return (values, _unbatch(problem, converged)) if return_converged else values


def _samples_loss_class():
    import torch

    class SamplesLoss(torch.nn.Module):
        """GeomLoss's SamplesLoss for loss = "sinkhorn", p = 2: cost ½‖x − y‖²,
        ε = blur², ρ = reach² (None: balanced), ε-scaling with factor
        scaling² per iteration from the cost scale, debiased by default.
        Called as loss(x, y) or loss(a, x, b, y), with (N, d) or batched
        (B, N, d) points; returns the loss ((B,) when batched) or, with
        potentials=True, the potentials (F, G) (debiased when debias)."""

        def __init__(self, loss="sinkhorn", p=2, blur=0.05, reach=None, diameter=None,
                     scaling=0.5, truncate=5, cost=None, kernel=None, cluster_scale=None,
                     debias=True, potentials=False, verbose=False, backend="auto", *,
                     tolerance=1e-6, max_iterations=10000):
            super().__init__()
            if loss != "sinkhorn":
                raise ValueError(f"softwave: SamplesLoss computes loss='sinkhorn' only (got {loss!r})")
            if p != 2:
                raise ValueError(f"softwave: SamplesLoss supports p = 2 only (got {p})")
            if cost is not None:
                raise ValueError("softwave: SamplesLoss takes no custom cost; p = 2 is ½‖x − y‖²")
            self.blur, self.reach, self.scaling = float(blur), reach, float(scaling)
            self.debias, self.potentials = bool(debias), bool(potentials)
            self.tolerance, self.max_iterations = tolerance, max_iterations

        def _options(self):
            return dict(cost="half_sqeuclidean", epsilon=self.blur ** 2,
                        epsilon_scaling=self.scaling ** 2 if 0 < self.scaling < 1 else 0.0,
                        rho=None if self.reach is None else float(self.reach) ** 2,
                        tolerance=self.tolerance, max_iterations=self.max_iterations)

        def forward(self, *args):
            if len(args) == 2:
                (x, y), a, b = args, None, None
            elif len(args) == 4:
                a, x, b, y = args
            else:
                raise TypeError("softwave: SamplesLoss takes (x, y) or (a, x, b, y)")
            opts = self._options()
            if self.potentials:
                r = sinkhorn(x, y, a, b, **opts)
                if not self.debias:
                    return r.f, r.g
                f_aa = sinkhorn(x, x, a, a, **opts).f
                g_bb = sinkhorn(y, y, b, b, **opts).g
                return r.f - f_aa, r.g - g_bb
            if self.debias:
                return sinkhorn_divergence(x, y, a, b, **opts)
            return sinkhorn(x, y, a, b, **opts).value

    return SamplesLoss


def __getattr__(name):
    # SamplesLoss is a torch.nn.Module: made on first use, so that
    # softwave.ot itself needs only NumPy.
    if name == "SamplesLoss":
        cls = _samples_loss_class()
        globals()["SamplesLoss"] = cls
        return cls
    raise AttributeError(f"module 'softwave.ot' has no attribute {name!r}")


_GW_MODES = ("dijkstra", "landmark", "precomputed", "euclidean", "sqeuclidean", "cosine")


@dataclass
class GwResult:
    """What ``sampled_gw`` returns. plan: the dense (N, K) plan (None when not
    asked for); matching: argmax_k T_ik per source point (None when not asked
    for); objective: the exact GW objective of the plan (square loss, with the
    distances as given; NaN when not computed); iterations, converged, seed (the
    restart kept); restart_objectives: with restarts > 1, each seed's
    objective at the end of its run (in a race, after restart_iterations),
    what chose the seed kept; changes: every check's relative change ‖T_t − T_{t−1}‖_F /
    ‖T_t‖_F; source_scale, target_scale: the normalisation of each side's
    distances; source_anchors, target_anchors: the last iteration's anchors
    (the polishing one's where there is one); polish_anchors: its anchors
    (0: none); final_epsilon; dense_solves: whether the solves iterated on the sampled
    cost formed as an N×K array (dense_cost_entries) rather than on its
    factors; joined_components: edges added to connect the k-NN graphs;
    linear_objective: ⟨C, T⟩ of fused GW's linear cost (NaN without one or
    when the objective is not computed); objective_error,
    linear_objective_error: the standard errors of objectives estimated
    from pairs drawn from the plan (0 when exact)."""

    plan: Any
    matching: Any
    objective: float
    objective_error: float
    linear_objective: float
    linear_objective_error: float
    iterations: int
    converged: bool
    seed: int
    changes: list = field(default_factory=list)
    restart_objectives: list = field(default_factory=list)
    last_change: float = math.nan
    source_scale: float = math.nan
    target_scale: float = math.nan
    final_epsilon: float = math.nan
    dense_solves: bool = False
    polish_anchors: int = 0
    source_anchors: list = field(default_factory=list)
    target_anchors: list = field(default_factory=list)
    joined_components: int = 0


def _count(name, value, least):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"softwave: {name} must be an integer (got {type(value).__name__})")
    if value < least:
        raise ValueError(f"softwave: {name} must be >= {least} (got {value})")
    return int(value)


def _ema_beta(beta):
    if beta is None:
        return 0.0
    if isinstance(beta, bool) or not isinstance(beta, numbers.Real):
        raise TypeError(f"softwave: lambda_ema_beta must be a number or None "
                        f"(got {type(beta).__name__})")
    if not 0 <= beta <= 1:
        raise ValueError(f"softwave: lambda_ema_beta must be in [0, 1] (got {beta})")
    return float(beta)


def sampled_gw(X_source=None, X_target=None, p=None, q=None, *, distance_mode: str = "dijkstra",
               dist_source=None, dist_target=None, k: int = 30, n_landmarks: int = 50,
               M: int = 50, alpha: float = 0.9, max_iter: int = 500, tol: float = 0.05,
               epsilon: float = 1e-3, min_iter_before_converge: int = 50, check_every: int = 5,
               check_rows: int = 1024, semi_relaxed: bool = False, rho: float = 1.0,
               rho_a: float = math.inf,
               sinkhorn_iterations: int = 10, sinkhorn_tolerance: float = 1e-3,
               early_sinkhorn_iterations: Optional[int] = None,
               mixed_precision: bool = True, restarts: int = 1, restart_iterations: int = 0,
               fgw_alpha: float = 0.0, C_linear=None, features_source=None,
               features_target=None, lambda_ema_beta: Optional[float] = None, T_init=None, objective_samples: int = 2048,
               exact_objective_entries: int = 2 ** 24, exact_iterations: int = 0,
               polish_anchors: Optional[int] = None,
               dense_cost_entries: Optional[int] = None, seed: int = 0, plan: bool = True, matching: bool = True, objective: bool = True,
               multiscale: bool = False, n_coarse: Optional[int] = None,
               check_inputs: Optional[bool] = None, kernel: str = "automatic",
               shortest_paths: str = "automatic",
               differentiable: bool = False, grad_mode: str = "implicit",
               _coupling: Optional[dict] = None) -> GwResult:
    """Sampled Gromov–Wasserstein between a source (N points) and a target
    (K points), as TorchGW's ``sampled_gw`` with the same argument names
    (softwave/gw.hpp has the algorithm; the plan is kept as the factors of
    the recent solves, never N×K unless ``plan`` asks for it).

    distance_mode: "dijkstra" (shortest paths on each side's symmetrised
    k-NN graph of X_source / X_target, from each iteration's anchors),
    "landmark" (the graphs' shortest paths to n_landmarks farthest-point
    landmarks as coordinates), "precomputed" (dist_source (N, N) and
    dist_target (K, K), or, given X_source and X_target instead, every
    shortest path of their k-NN graphs as those matrices: N² memory) or
    "euclidean" (Euclidean distances of X_source and X_target), or, with no
    sampling at all, "sqeuclidean" (squared Euclidean distances) or
    "cosine" (1 − cos of each pair; no zero rows): distances of rank d + 2,
    so each solve's cost is the exact linearised GW cost of the plan (POT's
    entropic GW step, of rank d + 2, O((N + K)·d) memory), the choice for
    dense embedding distances such as word vectors', where M sampled
    anchors are too noisy; M then only draws the first iteration's anchors
    that set the distances' scale, and ε reaches its final value by
    min_iter_before_converge (not max_iter) and stays there. p, q: the marginals (None: uniform). M anchor pairs an
    iteration, momentum alpha, ε annealed from epsilon to max(ε/10,
    min(5e-4, ε)) over max_iter (TorchGW's ε: each solve's cost is Λ of
    the distances divided by source_scale and target_scale; POT's
    entropic_gromov_wasserstein, whose Sinkhorn cost is the gradient 2Λ of
    the distances as given, solves the last solve's problem at epsilon =
    2·final_epsilon·source_scale·target_scale); each solve at most sinkhorn_iterations
    (stopping at an L1 marginal error of sinkhorn_tolerance), and with
    sampled costs the solves before the last check_every iterations ahead of
    min(min_iter_before_converge, max_iter), while the plan forms, at most
    early_sinkhorn_iterations (None: half of sinkhorn_iterations, rounded
    up; 0: sinkhorn_iterations); stops once the
    relative change of the plan
    is at most tol (checked every check_every iterations from
    min_iter_before_converge on, over check_rows rows). semi_relaxed: the
    target marginal is a KL penalty of weight rho, and the source's one of
    weight rho_a (infinity: the source kept; TorchGW's semi_relaxed relaxes
    both, with rho_a = 1 by default). restarts: seeds seed,
    seed + 1, ...; the lowest GW objective is kept. restart_iterations > 0
    races them instead: each seed runs its first restart_iterations
    iterations (on the whole run's ε schedule), and the seed whose plan then
    has the lowest objective is run again to the end (the same plan as that
    seed alone), for restarts·restart_iterations extra iterations rather
    than restarts whole runs. Fused GW: fgw_alpha in
    (0, 1] weighs a linear cost against the GW cost, each solve's cost being
    (1 − fgw_alpha)·Λ + fgw_alpha·C, with C either C_linear (N, K), which
    makes every solve dense, or the squared Euclidean distances of
    features_source (N, e) and features_target (K, e), kept low-rank (no N×K
    memory); Λ uses distances scaled to at most about 1, so C is best scaled
    to a similar range; restarts then keep the lowest fused objective.
    lambda_ema_beta (TorchGW's): each solve's GW cost the exponential moving
    average Λ̄_t = (1 − β) Λ̄_{t−1} + β Λ_t of the iterations' sampled costs
    (None or 0: off; 1: each its own), less variance for a bias that fades
    as the plan settles; kept low-rank over the last W iterations, W the
    fewest leaving out at most 1e-3 of the weight (W = 10 at β = 0.5: the
    solves' rank and time grow W-fold).
    The objective is exact where N·K <= exact_objective_entries (an N×K
    plan and O(N²K + NK²) work), else estimated from objective_samples pairs
    drawn from the plan, with its standard error in objective_error.
    exact_iterations: after the sampled iterations, that many exact ones
    (POT's entropic GW step from the sampled plan: the plan's exact
    linearised cost, O(N²K + NK²), solved at the last ε with no momentum);
    needs N·K <= exact_objective_entries, and the plan, matching and
    objective are the refined plan's.
    polish_anchors: after the sampled iterations, one more from their plan
    with this many anchors, no momentum and the last ε; the plan returned
    is its solve alone, without the anchor noise and blur of the last
    iterations' mixture (at 1,000 × 1,250 it took the objective from up to
    3.1 % above POT's entropic GW to within 1.3 % with 128 anchors and
    0.1 % with 640; within 0.9 % at 10k and 20k on a GPU). None: 8·M, no more
    than CUDA's specialised solves take (128 − e with M = 80), none with
    exact_iterations (which, given a count, start from its plan); 0: none.
    Sampled costs with Sinkhorn solves only: ignored with low-rank couplings
    (sampled_lowrank_gw) and the cosine mode's exact costs.
    dense_cost_entries: where N·K is at most this, each solve forms its
    sampled cost as an N×K array and iterates on it (one exp a pair an
    update); above, and at 0, the cost stays low-rank (rank M + 2, memory
    O((N + K)·M)). None: 2**24 where the low-rank solves would run on the
    portable kernels (the CPU), 0 where CUDA's specialised ones take them.
    T_init: an (N, K) plan to start from instead of p⊗q (non-negative, with
    mass; scaled to p's), the first anchors drawn from it. multiscale
    (TorchGW's): first the same problem between n_coarse farthest points of
    X_source and of X_target (Euclidean; default min(500, N/4, K/4), at
    least 10; M and k capped for them, at least 4 restarts, uniform
    weights), its plan spread over
    each point's nearest chosen point and scaled to p and q by 10 rounds of
    row and column scaling, as T_init (softwave::multiscale_start in the
    core; an N×K plan; needs X_source and
    X_target, and no T_init of its own); it suits sampled manifolds, whose
    coarse points stand for their neighbourhoods: on embeddings (cosine
    mode, 200 shuffled word-vector-like points) the coarse points of the two
    sides are not counterparts, and the fine solve kept their plan's wrong
    matching (P@1 0.01 against 0.995 without it). mixed_precision:
    tensor-core products on 10-bit-mantissa operands (scaled FP16) in the
    CUDA low-rank solves. shortest_paths (k-NN graph modes): "host"
    (Dijkstra on the host, in parallel over the sources), "device" (on the
    device with the arrays, one team a source; the same distances to the
    last bit) or "automatic" (the device on a GPU for 64 or more sources at
    a time, else the host). plan / matching / objective: which
    outputs to compute (the objective needs an N×K plan, made for the call
    when plan is False). NumPy arrays run on the host; torch tensors where
    they are (CUDA in a CUDA build, on the current stream).
    differentiable (torch tensors, TorchGW's): the returned plan is
    differentiable with respect to fused GW's linear cost (C_linear, or
    features_source and features_target), through the last solve only, the
    earlier plans held fixed as TorchGW holds them: T = (1 − w)·T_{t−1} +
    w·π_t, π_t the Sinkhorn plan of (1 − fgw_alpha)·Λ_t + fgw_alpha·C, so
    ∂T/∂C is w·fgw_alpha times the plan's derivative
    (softwave::sinkhorn_plan_vjp, an N×K pass per iteration, O(N + K)
    memory beyond the plan). grad_mode: "implicit" (at the solve's fixed
    point: its adjoint system by conjugate gradients, to a relative
    residual of 1e-6 in at most 2000 iterations, else a warning) or "unrolled" (backpropagation through
    sinkhorn_iterations updates from the fixed point, the adjoint
    system's first terms). Needs fgw_alpha > 0 with a linear cost and
    plan=True; the last solve's plan (N×K) is kept for the backward pass.
    Under torch.compile (torch >= 2.4) the call is one registered operator
    (no graph break, the differentiable mode included); the result's numbers
    are then 0-d tensors and its lists 1-d tensors (reading them as Python
    values inside the compiled function would end its graph).
    """
    if distance_mode not in _GW_MODES:
        raise ValueError(f"softwave: distance_mode must be one of {', '.join(_GW_MODES)} "
                         f"(got {distance_mode!r})")
    if multiscale:
        if T_init is not None:
            raise ValueError("softwave: give T_init or multiscale, not both (multiscale makes T_init)")
        if X_source is None or X_target is None:
            raise ValueError("softwave: multiscale needs X_source and X_target (its coarse points)")
    elif n_coarse is not None:
        raise ValueError("softwave: n_coarse is the size of multiscale's coarse problem: "
                         "give it with multiscale=True")
    if distance_mode == "precomputed" and (dist_source is not None or dist_target is not None):
        if dist_source is None or dist_target is None:
            raise ValueError("softwave: distance_mode 'precomputed' needs dist_source and dist_target")
        source, target, names = dist_source, dist_target, ("dist_source", "dist_target")
    else:
        if X_source is None or X_target is None:
            if distance_mode == "precomputed":
                raise ValueError("softwave: distance_mode 'precomputed' needs dist_source and "
                                 "dist_target (or X_source and X_target: their k-NN graphs' "
                                 "shortest paths)")
            raise ValueError(f"softwave: distance_mode {distance_mode!r} needs X_source and X_target")
        source, target, names = X_source, X_target, ("X_source", "X_target")
    frame = _Frame(source)
    source = frame.array(names[0], source)
    target = frame.array(names[1], target)
    for name, a in zip(names, (source, target)):
        if a.ndim != 2:
            raise ValueError(f"softwave: {name} must have 2 dimensions (got shape {tuple(a.shape)})")
        if names[0] == "dist_source" and a.shape[0] != a.shape[1]:
            raise ValueError(f"softwave: {name} must be a square distance matrix (got shape {tuple(a.shape)})")
    n, m = source.shape[0], target.shape[0]
    weights = []
    for name, w, count in (("p", p, n), ("q", q, m)):
        w = frame.array(name, w)
        if w is not None and tuple(w.shape) != (count,):
            raise ValueError(f"softwave: {name} must have shape ({count},), one weight per point "
                             f"(got {tuple(w.shape)})")
        weights.append(w)
    linear = {}
    for name, c, shape in (("C_linear", C_linear, (n, m)), ("features_source", features_source, None),
                           ("features_target", features_target, None)):
        c = frame.array(name, c)
        if c is not None and c.ndim != 2:
            raise ValueError(f"softwave: {name} must have 2 dimensions (got shape {tuple(c.shape)})")
        if c is not None and shape is not None and tuple(c.shape) != shape:
            raise ValueError(f"softwave: {name} must have shape {shape}, a cost per (source, target) "
                             f"pair (got {tuple(c.shape)})")
        linear[name] = c
    if (linear["features_source"] is None) != (linear["features_target"] is None):
        raise ValueError("softwave: give features_source and features_target together")
    fgw_alpha = float(fgw_alpha)
    if not 0 <= fgw_alpha <= 1:
        raise ValueError(f"softwave: fgw_alpha must be in [0, 1] (got {fgw_alpha})")
    has_linear = linear["C_linear"] is not None or linear["features_source"] is not None
    if fgw_alpha > 0 and not has_linear:
        raise ValueError("softwave: fgw_alpha > 0 needs C_linear or features_source and features_target")
    if fgw_alpha == 0 and has_linear:
        raise ValueError("softwave: a linear cost needs fgw_alpha > 0 (at 0 it has no effect)")
    if differentiable:
        if not frame.torch:
            raise TypeError("softwave: differentiable needs torch tensors (its gradients are autograd's)")
        if grad_mode not in ("implicit", "unrolled"):
            raise ValueError(f"softwave: grad_mode must be 'implicit' or 'unrolled' (got {grad_mode!r})")
        if not has_linear:
            raise ValueError("softwave: differentiable needs fused GW's linear cost (fgw_alpha > 0 with "
                             "C_linear or features_source and features_target): the GW cost is held "
                             "fixed, so the plan has no other input to differentiate in")
        if not plan:
            raise ValueError("softwave: differentiable returns the plan: plan must be True")
    initial = frame.array("T_init", T_init)
    if initial is not None:
        if tuple(initial.shape) != (n, m):
            raise ValueError(f"softwave: T_init must have shape ({n}, {m}), a plan of the source and "
                             f"target points (got {tuple(initial.shape)})")
        initial = initial.clone() if frame.torch else initial.copy()
    coarse_points = 0  # none; -1: the core's default_coarse_points
    if multiscale:
        coarse_points = -1 if n_coarse is None else _count("n_coarse", n_coarse, 1)
        if coarse_points >= n or coarse_points >= m:
            raise ValueError(f"softwave: multiscale's n_coarse = {coarse_points} must be below N = {n} "
                             f"and K = {m} (a problem this small needs no coarse start)")
    # A precomputed side's coarse points are sampled from its points.
    sampled = multiscale and names[0] == "dist_source"
    settings = {
        # "precomputed" given points: all shortest paths of their k-NN graphs.
        "distance_mode": "geodesic" if distance_mode == "precomputed" and names[0] == "X_source"
        else distance_mode,
        "k": _count("k", k, 1),
        "n_landmarks": _count("n_landmarks", n_landmarks, 1),
        "anchors": _count("M", M, 1),
        "alpha": float(alpha),
        "max_iterations": _count("max_iter", max_iter, 1),
        "min_iterations": _count("min_iter_before_converge", min_iter_before_converge, 0),
        "tolerance": float(tol),
        "check_every": _count("check_every", check_every, 1),
        "check_rows": _count("check_rows", check_rows, 0),
        "epsilon": _positive("epsilon", epsilon),
        "rho_a": _positive("rho_a", rho_a, allow_inf=True) if semi_relaxed else math.inf,
        "rho_b": _positive("rho", rho, allow_inf=True) if semi_relaxed else math.inf,
        "sinkhorn_iterations": _count("sinkhorn_iterations", sinkhorn_iterations, 1),
        "sinkhorn_tolerance": float(sinkhorn_tolerance),
        "early_sinkhorn_iterations": -1 if early_sinkhorn_iterations is None
        else _count("early_sinkhorn_iterations", early_sinkhorn_iterations, 0),
        "mixed_precision": bool(mixed_precision),
        "seed": _count("seed", seed, 0),
        "restarts": _count("restarts", restarts, 1),
        "restart_iterations": _count("restart_iterations", restart_iterations, 0),
        "fused_alpha": fgw_alpha,
        "cost_ema_beta": _ema_beta(lambda_ema_beta),
        "warm_start": initial is not None,
        "multiscale_points": coarse_points,
        "objective_samples": _count("objective_samples", objective_samples, 2),
        "exact_objective_entries": _count("exact_objective_entries", exact_objective_entries, 0),
        "exact_iterations": _count("exact_iterations", exact_iterations, 0),
        "polish_anchors": -1 if polish_anchors is None
        else _count("polish_anchors", polish_anchors, 0),
        "dense_cost_entries": -1 if dense_cost_entries is None
        else _count("dense_cost_entries", dense_cost_entries, 0),
        "objective": bool(objective),
        "kernel": str(kernel),
        "shortest_paths": str(shortest_paths),
        **(_coupling or {}),
        "check": frame.default_check() if check_inputs is None else bool(check_inputs),
        "stream": frame.stream(),
    }
    vjp = dict(rho_a=settings["rho_a"], rho_b=settings["rho_b"], fgw_alpha=fgw_alpha, mode=grad_mode,
               iterations=settings["sinkhorn_iterations"] if grad_mode == "unrolled" else 2000,
               check=settings["check"]) if differentiable else None
    if frame.torch:
        from . import _torch_ops

        if _torch_ops._traced():
            # torch.compile: one registered operator, whose autograd reaches
            # the linear cost as given (not detached).
            from . import _torch_ot

            given = {"C_linear": C_linear, "features_source": features_source, "features_target": features_target}
            plan_out, matching_out, report = _torch_ot.traced_sampled_gw(
                {"source": source, "target": target, "a": weights[0], "b": weights[1],
                 "linear": frame.array("C_linear", given["C_linear"], keep_graph=differentiable),
                 "source_features": frame.array("features_source", given["features_source"],
                                                keep_graph=differentiable),
                 "target_features": frame.array("features_target", given["features_target"],
                                                keep_graph=differentiable),
                 "plan": initial,
                 "source_points": frame.array("X_source", X_source) if sampled else None,
                 "target_points": frame.array("X_target", X_target) if sampled else None},
                settings, plan, matching, vjp)
            report.pop("last_plan_weight")
            return GwResult(plan=plan_out, matching=matching_out, **report)
    arrays = {
        "source": source, "target": target,
        "a": weights[0], "b": weights[1],
        "linear": linear["C_linear"], "source_features": linear["features_source"],
        "target_features": linear["features_target"],
        "plan": initial if initial is not None else (frame.empty((n, m)) if plan else None),
        "matching": frame.empty((n,), integer=True) if matching else None,
        "source_points": frame.array("X_source", X_source) if sampled else None,
        "target_points": frame.array("X_target", X_target) if sampled else None,
    }
    if not differentiable:
        report = _core.gromov_wasserstein(arrays, settings)
        report.pop("last_plan_weight")
        return GwResult(plan=arrays["plan"] if plan else None, matching=arrays["matching"], **report)
    from . import _torch_ot

    arrays["last_plan"] = frame.empty((n, m))
    report = {}

    def solve():
        report.update(_core.gromov_wasserstein(arrays, settings))
        return arrays["plan"], arrays["last_plan"], report

    # The features as the core read them (converted to tensors), saved for
    # the backward pass; the arguments as given are autograd's inputs.
    differentiable_plan = _torch_ot.gw_plan(
        solve, vjp, C_linear, features_source, features_target,
        (linear["features_source"], linear["features_target"]))
    report.pop("last_plan_weight")
    return GwResult(plan=differentiable_plan, matching=arrays["matching"], **report)


def sampled_lowrank_gw(X_source=None, X_target=None, p=None, q=None, *, rank: int = 20,
                       lr_max_iter: int = 5, lr_dykstra_max_iter: int = 50,
                       lr_dykstra_tol: float = 1e-7, lr_step: float = 1.0,
                       **kwargs) -> GwResult:
    """Sampled GW with low-rank couplings (TorchGW's ``sampled_lowrank_gw``;
    Scetbon, Cuturi and Peyré 2021): as ``sampled_gw`` (the same keyword
    arguments), but each iteration's solve is the coupling
    π = Q diag(1/g) Rᵀ of non-negative rank ``rank`` found by
    ``lr_max_iter`` mirror-descent steps on ⟨C, π⟩ − ε H, each projected
    on the couplings of p and q by ``lr_dykstra_max_iter`` Dykstra
    iterations (stopping at an L1 marginal error of lr_dykstra_tol·Σp),
    each solve starting from the last coupling (softwave/gw.hpp,
    GwOptions::coupling_rank, has the steps). lr_step: Scetbon et al.'s
    adaptive step, γ = lr_step/‖∇‖²_∞ (TorchGW's γ >= 1/ε overshoots at
    small ε; gw.hpp has the figures). The sampled cost stays
    low-rank, so a step costs O((N + K)·rank·M) and each term of the plan
    O((N + K)·rank) memory; the plan, matching and objective are those of
    sampled_gw. Balanced only (no semi_relaxed, as TorchGW's), sampled
    distance modes only (not "sqeuclidean" or "cosine"), and not
    differentiable."""
    if kwargs.get("semi_relaxed"):
        raise ValueError("softwave: semi_relaxed: low-rank couplings are balanced "
                         "(sampled_gw relaxes the marginals)")
    if kwargs.get("differentiable"):
        raise ValueError("softwave: differentiable: a low-rank coupling has no Sinkhorn "
                         "fixed point to differentiate (use sampled_gw)")
    if kwargs.get("distance_mode") in ("sqeuclidean", "cosine"):
        raise ValueError(f"softwave: distance_mode {kwargs['distance_mode']!r} gives exact "
                         "costs, which sampled_gw solves; low-rank couplings take sampled ones")
    coupling = {"coupling_rank": _count("rank", rank, 1),
                "coupling_step": _positive("lr_step", lr_step),
                "coupling_iterations": _count("lr_max_iter", lr_max_iter, 1),
                "dykstra_iterations": _count("lr_dykstra_max_iter", lr_dykstra_max_iter, 1),
                "dykstra_tolerance": _non_negative("lr_dykstra_tol", lr_dykstra_tol)}
    return sampled_gw(X_source, X_target, p, q, _coupling=coupling, **kwargs)


@dataclass
class KnnGraph:
    """A symmetrised k-NN graph in compressed rows (what ``knn_graph``
    returns): the neighbours of point i are indices[indptr[i]:indptr[i + 1]]
    at Euclidean distances data[...], each edge listed from both ends;
    joined_components: the edges added to join its components (the closest
    pair between point 0's component and the rest, until one is left)."""

    indptr: np.ndarray   # int64 (N + 1,)
    indices: np.ndarray  # int32
    data: np.ndarray     # float64
    joined_components: int

    @property
    def shape(self):
        n = len(self.indptr) - 1
        return (n, n)

    def to_scipy(self):
        """The graph as a scipy.sparse.csr_matrix of distances, each edge
        once a row (TorchGW's ``build_knn_graph`` returns one; needs SciPy).
        The rows above list a mutual neighbour twice, which SciPy would
        add up into twice the distance."""
        from scipy.sparse import csr_matrix
        rows = np.repeat(np.arange(self.shape[0]), np.diff(self.indptr))
        keys = rows * np.int64(self.shape[1]) + self.indices
        order = np.lexsort((self.data, keys))  # by edge, shortest first
        keys, first = np.unique(keys[order], return_index=True)
        data = self.data[order][first]
        return csr_matrix((data, (keys // self.shape[1], keys % self.shape[1])), shape=self.shape)


def knn_graph(X, k: int = 30) -> KnnGraph:
    """The symmetrised k-nearest-neighbour graph of the points X (N, d),
    joined into one component as TorchGW's ``build_knn_graph`` does: the
    graph ``sampled_gw`` builds in its "dijkstra", "landmark" and
    "precomputed"-from-points modes. The search runs where X is (a CUDA
    tensor on the GPU of a CUDA build; O(N²·d)); the graph is returned on the
    host. 1 <= k < N."""
    frame = _Frame(X)
    points = frame.array("X", X)
    if points is None or points.ndim != 2:
        raise ValueError(f"softwave: X must have 2 dimensions, (N, d) points "
                         f"(got {None if points is None else tuple(points.shape)})")
    indptr, indices, data, joined = _core.knn_graph({"points": points}, _count("k", k, 1),
                                                    frame.stream())
    return KnnGraph(indptr=np.frombuffer(indptr, dtype=np.int64).copy(),
                    indices=np.frombuffer(indices, dtype=np.int32).copy(),
                    data=np.frombuffer(data, dtype=np.float64).copy(),
                    joined_components=int(joined))
