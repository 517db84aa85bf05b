"""softwave's registered PyTorch operators (torch >= 2.4): torch.library's
opcheck on each (Soft-DTW, Sinkhorn, DEER, the linear recurrence),
torch.compile(fullgraph=True) of models that use SoftDTW, the Sinkhorn loss,
the DEER GRU and a diagonal linear recurrence layer (no graph
break, the same values and gradients as eager), and on the GPU forwards and
backwards captured in a CUDA graph and replayed with new data.
Debian's torch 1.13 has neither torch.compile nor torch.library.custom_op:
there these tests skip and the autograd.Function path is what runs."""

import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import softwave  # noqa: E402
import softwave.deer as deer  # noqa: E402
import softwave.ot as ot  # noqa: E402
import softwave.torch as swt  # noqa: E402
from softwave import _torch_ops  # noqa: E402

needs_ops = pytest.mark.skipif(
    not _torch_ops.OPS, reason=f"torch {torch.__version__} has no torch.library.custom_op (needs >= 2.4)"
)
needs_compile = pytest.mark.skipif(
    not _torch_ops.OPS or not hasattr(torch, "compile"),
    reason=f"torch {torch.__version__} has no torch.compile with custom operators (needs >= 2.4)",
)
HAS_GPU = softwave.has_cuda() and torch.cuda.is_available()
DEVICES = ["cpu"] + (["cuda"] if HAS_GPU else [])
cuda_only = pytest.mark.skipif(not HAS_GPU, reason="needs a CUDA build of softwave and a GPU")


def tensors(rng, *shapes, dtype=torch.float32, device="cpu", requires_grad=False):
    return [torch.tensor(rng.standard_normal(s), dtype=dtype, device=device, requires_grad=requires_grad)
            for s in shapes]


def test_native_operators_built_where_asked():
    """tests/python/run.sh and perf/device/run.sh build softwave._torch_native
    (the C++ operators of test_torch_native.py) and say so: there a missing
    module is a failure, not a skip."""
    if os.environ.get("SOFTWAVE_EXPECT_TORCH_NATIVE") == "1":
        assert _torch_ops.NATIVE is not None and _torch_ops.NATIVE.attached()


def test_registered_where_torch_has_custom_ops():
    assert _torch_ops.OPS == hasattr(torch.library, "custom_op")
    if _torch_ops.OPS:
        import softwave._torch_deer  # noqa: F401  (softwave.deer and .ot load these on first use)
        import softwave._torch_ot  # noqa: F401

        for name in ("soft_dtw", "soft_dtw_cost", "pairwise", "dtw_path", "sinkhorn", "sinkhorn_gradients",
                     "sinkhorn_divergence", "sinkhorn_query", "deer_rnn", "deer_rnn_gradients", "sampled_gw",
                     "gw_plan_vjp", "linear_recurrence", "linear_recurrence_gradients"):
            assert hasattr(torch.ops.softwave, name), name


@needs_ops
@pytest.mark.parametrize("device", DEVICES)
def test_opcheck_every_operator(rng, device):
    opcheck = torch.library.opcheck
    x, y = tensors(rng, (3, 9, 2), (3, 7, 2), dtype=torch.float64, device=device, requires_grad=True)
    lengths = torch.tensor([9, 4, 1], dtype=torch.int32, device=device)
    weights = torch.tensor([1.0, -0.5, 2.0], dtype=torch.float64, device=device)
    for grad_output, lx, band, divergence in ((None, None, -1, False), (weights, lengths, 3, True)):
        # (grad_x, grad_y, alignment); the alignment is not defined for the divergence
        for want in ((True, True, False), (True, False, divergence is False), (False, False, False)):
            opcheck(torch.ops.softwave.soft_dtw,
                    (x, y, grad_output, lx, None, 0.5, "sqeuclidean", band, "automatic", False, divergence, *want))
    (cost,) = tensors(rng, (2, 6, 5), dtype=torch.float64, device=device, requires_grad=True)
    for grad in (True, False):
        opcheck(torch.ops.softwave.soft_dtw_cost, (cost.abs().detach().requires_grad_(), None, None, None, 1.0, -1,
                                                   "automatic", False, grad))
    a, b = tensors(rng, (3, 8, 2), (4, 6, 2), dtype=torch.float64, device=device, requires_grad=True)
    for divergence in (False, True):
        opcheck(torch.ops.softwave.pairwise, (a, b, None, None, 1.0, "l1", -1, "automatic", False, divergence))
    opcheck(torch.ops.softwave.dtw_path, (x.detach(), y.detach(), None, None, "sqeuclidean", -1, False))


# Sinkhorn settings in the operators' argument order (softwave._torch_ot.SETTINGS):
# epsilon, relative, scaling, rho_a, rho_b, iterations, tolerance, check_every, cost, kernel, check.
SINKHORN = (0.5, False, 0.0, float("inf"), float("inf"), 200, 1e-9, 5, "sqeuclidean", "automatic", False)
UNBALANCED_ANNEALED = (0.1, True, 0.7, 2.0, 5.0, 50, 0.0, 1, "half_sqeuclidean", "automatic", False)


@needs_ops
@pytest.mark.parametrize("device", DEVICES)
def test_opcheck_sinkhorn_operators(rng, device):
    from softwave import _torch_ot

    opcheck = torch.library.opcheck
    x, y = tensors(rng, (2, 7, 3), (2, 5, 3), dtype=torch.float64, device=device, requires_grad=True)
    a = torch.tensor(rng.uniform(0.5, 1.5, (2, 7)), dtype=torch.float64, device=device, requires_grad=True)
    (cost,) = tensors(rng, (2, 7, 5), dtype=torch.float64, device=device)
    cost = cost.abs().requires_grad_()
    p, q, u = tensors(rng, (2, 7, 2), (2, 5, 2), (2, 7), dtype=torch.float64, device=device, requires_grad=True)
    f0, g0 = tensors(rng, (2, 7), (2, 5), dtype=torch.float64, device=device)
    forms = {"clouds": dict(x=x, y=y, a=a), "matrix": dict(cost=cost), "factors": dict(u=u, p=p, q=q)}
    for settings in (SINKHORN, UNBALANCED_ANNEALED):
        for name, form in forms.items():
            arrays = [form.get(k) for k in _torch_ot.ARRAYS]
            for warm in ((None, None), (f0, g0)):
                opcheck(torch.ops.softwave.sinkhorn, (*arrays, *warm, *settings))
            f, g = (t.detach() for t in torch.ops.softwave.sinkhorn(*arrays, None, None, *settings)[:2])
            detached = [None if t is None else t.detach() for t in arrays]
            (z_rows, z_cols) = tensors(rng, (2, 7, 4), (2, 5, 4), dtype=torch.float64, device=device)
            for kind, z in (("plan", None), ("apply", z_cols), ("apply_transpose", z_rows), ("row_argmax", None),
                            ("sample_rows", None)):
                opcheck(torch.ops.softwave.sinkhorn_query, (*detached, f, g, *settings, kind, z, 3, 11))
    div = (0.5, False, 0.0, float("inf"), float("inf"), 100, 1e-9, 5, "sqeuclidean", "automatic", False)
    for weights in ((None, None), (a, None)):
        for want in ((True, True, weights[0] is not None, False), (False, False, False, False)):
            opcheck(torch.ops.softwave.sinkhorn_divergence, (x, y, *weights, *div, *want))


@needs_ops
@pytest.mark.parametrize("device", DEVICES)
def test_opcheck_deer_operators(rng, device):
    opcheck = torch.library.opcheck
    for cell, gates, n in (("gru", 3, 4), ("lstm", 4, 8), ("elman", 1, 4)):
        H, m = 4, 2
        x, h0 = tensors(rng, (2, 9, m), (2, n), dtype=torch.float64, device=device, requires_grad=True)
        w_ih, w_hh, b = ((0.5 * t).requires_grad_() for t in tensors(
            rng, (gates * H, m), (gates * H, H), (gates * H,), dtype=torch.float64, device=device))
        lengths = torch.tensor([9, 4], dtype=torch.int32, device=device)
        for state, lx, bias_hh, method, jacobian in ((h0, None, b, "deer", "full"), (None, lengths, None, "deer",
                                                                                     "diagonal"),
                                                     (h0, lengths, b, "sequential", "full")):
            settings = (cell, method, jacobian, "automatic", 1e-10, 1e-10, 200, 0, None, 0.0, 2, "contiguous",
                        False, False)
            opcheck(torch.ops.softwave.deer_rnn, (x, state, lx, w_ih, w_hh, b, bias_hh, None, n, *settings))
        # Diagonal hidden weights (G·H, 1), with the strided blocks an LSTM's exact Newton takes.
        w_diagonal = w_hh[:, :1].detach().clone().requires_grad_()
        settings = (cell, "deer", "block" if cell == "lstm" else "diagonal", "automatic", 1e-10, 1e-10, 200, 0,
                    None, 0.0, 2, "strided", True, False)
        opcheck(torch.ops.softwave.deer_rnn, (x, h0, lengths, w_ih, w_diagonal, b, b, None, n, *settings))
    # ParaRNN's LSTM: three gates and peepholes (2H).
    H, m = 4, 2
    x, h0 = tensors(rng, (2, 9, m), (2, 2 * H), dtype=torch.float64, device=device, requires_grad=True)
    w_ih, w_hh, b, peephole = ((0.5 * t).requires_grad_() for t in tensors(
        rng, (3 * H, m), (3 * H, 1), (3 * H,), (2 * H,), dtype=torch.float64, device=device))
    settings = ("cifg_lstm", "deer", "block", "automatic", 1e-10, 1e-10, 200, 0, None, 0.0, 2, "strided", True,
                False)
    opcheck(torch.ops.softwave.deer_rnn, (x, h0, lengths, w_ih, w_hh, b, None, peephole, 2 * H, *settings))
    # The neural ODE through the same operator: x holds Δ_t then u_t; its
    # weights (weight_hidden, weight_out, bias_hidden, bias_out) in the
    # slots of (weight_ih, weight_hh, bias_ih, bias_hh).
    n, h, m = 3, 5, 2
    x, h0 = tensors(rng, (2, 9, 1 + m), (2, n), dtype=torch.float64, device=device, requires_grad=True)
    with torch.no_grad():
        x[..., 0] = 0.05 + 0.01 * x[..., 0]
    w_hidden, w_out, b_hidden, b_out = ((0.5 * t).requires_grad_() for t in tensors(
        rng, (h, n + m), (n, h), (h,), (n,), dtype=torch.float64, device=device))
    for state, lx, bias_out, method in ((h0, None, b_out, "deer"), (None, lengths, None, "sequential")):
        settings = ("neural_ode", method, "full", "automatic", 1e-10, 1e-10, 200, 0, None, 0.0, 2, "contiguous",
                    False, False)
        opcheck(torch.ops.softwave.deer_rnn, (x, state, lx, w_hidden, w_out, b_hidden, bias_out, None, n,
                                              *settings))


class _Model(torch.nn.Module):
    """A small sequence model trained with a Soft-DTW loss."""

    def __init__(self, d):
        super().__init__()
        self.project = torch.nn.Linear(d, d)
        self.loss = swt.SoftDTW(gamma=0.5, normalize=True)

    def forward(self, x, y):
        return self.loss(torch.tanh(self.project(x)), y).mean()


@needs_compile
@pytest.mark.parametrize("device", DEVICES)
def test_compile_fullgraph_matches_eager(rng, device):
    torch.manual_seed(int(rng.integers(2**31)))
    model = _Model(3).to(device)
    x, y = tensors(rng, (4, 32, 3), (4, 27, 3), device=device)

    def step(module, a, b):
        module.zero_grad()
        loss = module(a, b)
        loss.backward()
        return loss.detach(), [p.grad.clone() for p in module.parameters()]

    eager_loss, eager_grads = step(model, x, y)
    # aot_eager traces forward and backward through the fake implementations
    # and the registered autograd; inductor also generates the code around them.
    backends = ["aot_eager"] + (["inductor"] if device == "cuda" else [])
    for backend in backends:
        torch._dynamo.reset()
        compiled = torch.compile(model, fullgraph=True, backend=backend)
        for _ in range(2):  # the second call runs the cached graph
            loss, grads = step(compiled, x, y)
            torch.testing.assert_close(loss, eager_loss, rtol=1e-5, atol=1e-6)
            for g, e in zip(grads, eager_grads):
                torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-6)


@needs_compile
def test_compile_functions_without_graph_break(rng):
    x, y = tensors(rng, (3, 12, 2), (3, 10, 2), dtype=torch.float64, requires_grad=True)

    def losses(a, b):
        return (swt.soft_dtw(a, b, 0.3, bandwidth=4).sum() + swt.pairwise(a, b, divergence=True).sum()
                + swt.soft_dtw_cost(torch.cdist(a, b) ** 2, 0.3).sum())

    def run(f):
        x.grad = y.grad = None
        value = f(x, y)
        value.backward()
        return value.detach(), x.grad.clone(), y.grad.clone()

    torch._dynamo.reset()
    expected = run(losses)
    got = run(torch.compile(losses, fullgraph=True, backend="aot_eager"))
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e)


class _SinkhornModel(torch.nn.Module):
    """A point-cloud map trained with the debiased Sinkhorn loss and the
    plain OT value (GeomLoss's SamplesLoss interface)."""

    def __init__(self, d):
        super().__init__()
        self.project = torch.nn.Linear(d, d).double()
        self.loss = ot.SamplesLoss("sinkhorn", p=2, blur=0.5, scaling=0.0, tolerance=1e-10, max_iterations=400)

    def forward(self, x, y):
        moved = self.project(x)
        solved = ot.sinkhorn(moved, y, epsilon=0.5, tolerance=1e-10, max_iterations=400)
        return self.loss(moved, y).sum() + solved.value.sum() + 0.1 * solved.f.sum()


class _DeerModel(torch.nn.Module):
    def __init__(self, m, hidden):
        super().__init__()
        self.gru = deer.GRU(m, hidden, method="deer", atol=1e-12, rtol=1e-12, max_iter=200,
                            dtype=torch.float64)
        self.head = torch.nn.Linear(hidden, 1).double()

    def forward(self, x):
        y, h_n = self.gru(x)
        return self.head(y).square().mean() + h_n.sum()


@needs_ops
@pytest.mark.parametrize("device", DEVICES)
def test_opcheck_linear_recurrence_operators(rng, device):
    opcheck = torch.library.opcheck
    a, b, y0 = tensors(rng, (2, 3, 40), (2, 3, 40), (2, 3), dtype=torch.float64, device=device,
                       requires_grad=True)
    a = (0.5 * torch.tanh(a)).detach().requires_grad_()
    for state, reverse, kernel in ((y0, False, "automatic"), (None, True, "portable")):
        opcheck(torch.ops.softwave.linear_recurrence, (a, b, state, reverse, kernel, True))
    y = deer.linear_recurrence(a, b, y0).detach()
    (g,) = tensors(rng, (2, 3, 40), dtype=torch.float64, device=device)
    for state, need_a, need_y0 in ((y0, True, True), (None, False, False)):
        opcheck(torch.ops.softwave.linear_recurrence_gradients,
                (g, a.detach(), None if state is None else state.detach(), y, False, "automatic", True, need_a,
                 need_y0))


class _ScanModel(torch.nn.Module):
    """A diagonal linear recurrence layer: decays σ(λ), inputs W x."""

    def __init__(self, m, channels):
        super().__init__()
        self.decay = torch.nn.Parameter(torch.linspace(-1, 2, channels, dtype=torch.float64))
        self.input = torch.nn.Linear(m, channels).double()
        self.start = torch.nn.Parameter(torch.zeros(channels, dtype=torch.float64))

    def forward(self, x):
        u = self.input(x).transpose(1, 2)  # (B, channels, T)
        a = torch.sigmoid(self.decay)[:, None].expand_as(u)
        y = deer.linear_recurrence(a, u, self.start.expand(u.shape[:2]))
        return y.square().mean()


def _compiled_matches_eager(model, inputs, rtol=1e-7, atol=1e-9):
    def step(module):
        module.zero_grad()
        loss = module(*inputs)
        loss.backward()
        return loss.detach(), [p.grad.clone() for p in module.parameters()]

    eager_loss, eager_grads = step(model)
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    for _ in range(2):
        loss, grads = step(compiled)
        torch.testing.assert_close(loss, eager_loss, rtol=rtol, atol=atol)
        for g, e in zip(grads, eager_grads):
            torch.testing.assert_close(g, e, rtol=rtol, atol=atol)


@needs_compile
@pytest.mark.parametrize("device", DEVICES)
def test_compile_sinkhorn_and_deer_fullgraph(rng, device):
    torch.manual_seed(int(rng.integers(2**31)))
    x, y = tensors(rng, (2, 30, 3), (2, 24, 3), dtype=torch.float64, device=device)
    _compiled_matches_eager(_SinkhornModel(3).to(device), (x, y))
    (sequence,) = tensors(rng, (3, 50, 2), dtype=torch.float64, device=device)
    _compiled_matches_eager(_DeerModel(2, 5).to(device), (sequence,))
    _compiled_matches_eager(_ScanModel(2, 6).to(device), (sequence,))


@needs_compile
def test_compile_ot_queries_and_deer_report(rng):
    """Plan queries and the report (read after the compiled call) trace too."""
    x, y = tensors(rng, (12, 2), (9, 2), dtype=torch.float64, requires_grad=True)
    (v,) = tensors(rng, (9, 3), dtype=torch.float64)

    def transported(a, b):
        r = ot.sinkhorn(a, b, epsilon=0.3, tolerance=1e-10)
        return r.value, r.apply(v), r.plan(), r.row_argmax(), r.sample_rows(2, seed=5)

    torch._dynamo.reset()
    expected = transported(x, y)
    got = torch.compile(transported, fullgraph=True, backend="aot_eager")(x, y)
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e)
    w = [(0.3 * t).requires_grad_() for t in tensors(rng, (6, 1), (6, 6), (6,), (6,), dtype=torch.float64)]
    sequence = torch.tensor(rng.standard_normal((2, 20, 1)))

    def run(s):
        out, report = deer.rnn(s, None, *w, cell="elman", method="deer")
        return out, report

    torch._dynamo.reset()
    out, report = torch.compile(run, fullgraph=True, backend="aot_eager")(sequence)
    expected_out, expected_report = run(sequence)
    torch.testing.assert_close(out, expected_out)
    assert report == expected_report and report.path == ["deer"] * 2


@needs_compile
@pytest.mark.parametrize("mode", ["euclidean", "dijkstra"])
def test_compile_sampled_gw_fullgraph(rng, mode):
    """sampled_gw through its operator: the plan, the matching and the
    report equal eager's (the report's numbers and lists as tensors), and in
    the differentiable mode the features' gradients equal eager's."""
    x, y = tensors(rng, (40, 2), (50, 2), dtype=torch.float64)
    kw = dict(distance_mode=mode, k=6, M=20, max_iter=30, min_iter_before_converge=10, seed=3)

    def solve(a, b):
        r = ot.sampled_gw(a, b, **kw)
        return r.plan, r.matching, r.objective, r.iterations, r.changes, r.source_anchors

    torch._dynamo.reset()
    expected = ot.sampled_gw(x, y, **kw)
    plan, matching, objective, iterations, changes, anchors = torch.compile(
        solve, fullgraph=True, backend="aot_eager")(x, y)
    torch.testing.assert_close(plan, expected.plan, rtol=1e-12, atol=1e-15)
    assert torch.equal(matching, expected.matching)
    assert float(objective) == pytest.approx(expected.objective, rel=1e-12)
    assert int(iterations) == expected.iterations
    assert changes.tolist() == pytest.approx(expected.changes, rel=1e-12)
    assert anchors.tolist() == expected.source_anchors
    # Low-rank couplings: the same operator, with the coupling's settings.
    torch._dynamo.reset()
    lowrank = torch.compile(lambda a, b: ot.sampled_lowrank_gw(a, b, rank=4, **kw).plan, fullgraph=True,
                            backend="aot_eager")(x, y)
    torch.testing.assert_close(lowrank, ot.sampled_lowrank_gw(x, y, rank=4, **kw).plan, rtol=1e-12, atol=1e-15)
    fs, ft = tensors(rng, (40, 3), (50, 3), dtype=torch.float64, requires_grad=True)
    (w,) = tensors(rng, (40, 50), dtype=torch.float64)
    fused = dict(kw, fgw_alpha=0.5, differentiable=True, matching=False, objective=False)

    def loss(f, g):
        return (ot.sampled_gw(x, y, features_source=f, features_target=g, **fused).plan * w).sum()

    want = torch.autograd.grad(loss(fs, ft), (fs, ft))
    torch._dynamo.reset()
    have = torch.autograd.grad(torch.compile(loss, fullgraph=True, backend="aot_eager")(fs, ft), (fs, ft))
    for a, b in zip(have, want):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-12)


@needs_ops
def test_opcheck_sampled_gw(rng):
    from softwave._torch_ot import encode_settings

    x, y = tensors(rng, (30, 2), (25, 2), dtype=torch.float64)
    fs, ft = tensors(rng, (30, 3), (25, 3), dtype=torch.float64, requires_grad=True)
    settings = {"distance_mode": "euclidean", "anchors": 10, "max_iterations": 8, "min_iterations": 2,
                "fused_alpha": 0.5, "seed": 1, "check": True}
    for vjp in (None, {"rho_a": float("inf"), "rho_b": float("inf"), "fgw_alpha": 0.5, "mode": "implicit",
                       "iterations": 2000, "check": True}):
        text = encode_settings(dict(settings, **{"_vjp_" + k: v for k, v in (vjp or {}).items()}))
        torch.library.opcheck(torch.ops.softwave.sampled_gw,
                              (x, y, None, None, None, fs, ft, None, None, None, text, True, True, vjp is not None),
                              test_utils=("test_schema", "test_faketensor", "test_autograd_registration"))


@needs_ops
def test_second_derivatives_still_refused(rng):
    x, y = tensors(rng, (2, 6, 1), (2, 5, 1), dtype=torch.float64, requires_grad=True)
    (gx,) = torch.autograd.grad(swt.soft_dtw(x, y).sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="second derivatives"):
        gx.pow(2).sum().backward()


def _replays_like_eager(rng, loss_of, shape_x, shape_y, loss_tolerance, grad_tolerance):
    """Captures loss_of(x, y) and its backward once (after a warm-up on a side
    stream, as torch.cuda.graphs asks) and replays the graph on new data:
    the loss and both gradients as eager gives them on that data."""
    static_x, static_y = tensors(rng, shape_x, shape_y, device="cuda", requires_grad=True)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            static_x.grad = static_y.grad = None
            loss_of(static_x, static_y).backward()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    static_x.grad = static_y.grad = None
    with torch.cuda.graph(graph):
        static_loss = loss_of(static_x, static_y)
        static_loss.backward()
    for _ in range(3):
        new_x, new_y = tensors(rng, shape_x, shape_y, device="cuda")
        with torch.no_grad():
            static_x.copy_(new_x)
            static_y.copy_(new_y)
        graph.replay()
        expected_x, expected_y = new_x.clone().requires_grad_(), new_y.clone().requires_grad_()
        expected = loss_of(expected_x, expected_y)
        expected.backward()
        torch.testing.assert_close(static_loss, expected, **loss_tolerance)
        torch.testing.assert_close(static_x.grad, expected_x.grad, **grad_tolerance)
        torch.testing.assert_close(static_y.grad, expected_y.grad, **grad_tolerance)
    assert np.isfinite(static_loss.item())


@cuda_only
@needs_ops
@pytest.mark.parametrize("kernel", ["automatic", "portable"])
def test_cuda_graph_capture_and_replay(rng, kernel):
    """The forward and backward of a Soft-DTW training step, captured once
    and replayed on new data, give what eager gives on that data."""
    loss_fn = swt.SoftDTW(gamma=0.1, kernel=kernel)
    _replays_like_eager(rng, lambda a, b: loss_fn(a, b).sum(), (16, 128, 4), (16, 96, 4),
                        dict(rtol=1e-6, atol=1e-5), dict(rtol=1e-5, atol=1e-6))


@cuda_only
@needs_ops
@pytest.mark.parametrize("kernel", ["automatic", "portable"])
def test_cuda_graph_sinkhorn_capture_and_replay(rng, kernel):
    """A Sinkhorn training step with a fixed iteration count (no residual
    checks, no annealing: nothing waits for the host), captured and
    replayed: the OT value, the debiased divergence and their gradients."""
    options = dict(epsilon=0.1, tolerance=0.0, max_iterations=60, kernel=kernel)

    def loss_of(x, y):
        return ot.sinkhorn(x, y, **options).value.sum() + ot.sinkhorn_divergence(x, y, **options).sum()

    _replays_like_eager(rng, loss_of, (2, 300, 3), (2, 200, 3), dict(rtol=1e-5, atol=1e-5),
                        dict(rtol=1e-4, atol=1e-5))


# DEER configurations a graph captures: (cell, H, m, jacobian, diagonal
# hidden weights): the portable iteration (full Jacobians of a small state),
# the fused one (a GRU's units, diagonal; the CIFG LSTM's units, 2×2), and
# full Jacobians of an LSTM with n = 32, whose per-thread values exceed the
# fast scratch of a team of 64 (smaller teams then keep them there).
DEER_CAPTURED = [("gru", 4, 2, "full", False), ("gru", 8, 3, "diagonal", True),
                 ("cifg_lstm", 4, 3, "block", True), ("lstm", 16, 3, "full", False)]


@cuda_only
@needs_ops
@pytest.mark.parametrize("cell, H, m, jacobian, diagonal", DEER_CAPTURED)
def test_cuda_graph_deer_capture_and_replay(rng, cell, H, m, jacobian, diagonal):
    """A DEER layer's forward and backward captured once and replayed on new
    inputs and initial states: nothing waits for the device (every Newton
    iteration issued, none read back), and the states' loss and the
    gradients are eager's on that data."""
    gates = {"gru": 3, "lstm": 4, "cifg_lstm": 3}[cell]
    n = 2 * H if cell in ("lstm", "cifg_lstm") else H
    w_ih, w_hh, b_ih, b_hh = (0.3 * t for t in tensors(
        rng, (gates * H, m), (gates * H, 1 if diagonal else H), (gates * H,), (gates * H,), device="cuda"))
    peephole = 0.3 * tensors(rng, (2 * H,), device="cuda")[0] if cell == "cifg_lstm" else None
    options = dict(cell=cell, jacobian=jacobian, diagonal=diagonal, peephole=peephole, method="deer",
                   max_iter=30, block_size=2, block_layout="strided")

    def loss_of(x, h0):
        y, _ = deer.rnn(x, h0, w_ih, w_hh, b_ih, b_hh, **options)
        return (y * y).sum()

    _replays_like_eager(rng, loss_of, (3, 96, m), (3, n), dict(rtol=1e-5, atol=1e-5), dict(rtol=1e-4, atol=1e-5))


@cuda_only
@needs_ops
def test_deer_capture_with_data_checks_is_refused_by_name(rng):
    """check_inputs=True reads the data checks back to the host, which a
    capture cannot hold: the call says so, naming the argument, and the
    stream and torch's generator are left usable."""
    w = [0.3 * t for t in tensors(rng, (12, 2), (12, 4), (12,), (12,), device="cuda")]
    (x,) = tensors(rng, (2, 64, 2), device="cuda")
    expected, _ = deer.gru(x, None, *w, method="deer")
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(Exception, match="check_inputs"):
        with torch.cuda.graph(graph):
            deer.gru(x, None, *w, method="deer", check_inputs=True)
    again, _ = deer.gru(x, None, *w, method="deer")
    torch.testing.assert_close(again, expected)
    assert torch.randn(3, device="cuda").isfinite().all()
