"""softwave.deer.neural_ode and NeuralODE against a plain RK4 loop written
in torch (float64, torch's autograd for its gradients): the states and the
gradients of the steps, y0, the inputs and every weight, each method and
Jacobian mode, per-sequence grids (negative steps too), variable lengths,
NumPy = torch, the module built from two torch.nn.Linear, torch.compile,
CUDA tensors, and errors naming the argument."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import softwave.deer as deer  # noqa: E402


def field(y, u, w_hidden, w_out, b_hidden, b_out):
    z = torch.cat((y, u), -1) @ w_hidden.T
    if b_hidden is not None:
        z = z + b_hidden
    f = torch.tanh(z) @ w_out.T
    return f if b_out is None else f + b_out


def rk4_loop(steps, y0, inputs, weights, lengths=None):
    """(B, T, n): one RK4 step per interval, zero past each length."""
    B, T = steps.shape
    y, out = y0, []
    for t in range(T):
        dt = steps[:, t, None]
        u = inputs[:, t]
        k1 = field(y, u, *weights)
        k2 = field(y + 0.5 * dt * k1, u, *weights)
        k3 = field(y + 0.5 * dt * k2, u, *weights)
        k4 = field(y + dt * k3, u, *weights)
        y = y + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        out.append(y)
    y = torch.stack(out, 1)
    if lengths is not None:
        keep = torch.arange(T)[None, :] < torch.as_tensor(lengths)[:, None]
        y = y * keep[..., None]
    return y


def problem(B, T, n, m, h, seed, dtype=torch.float64, biases=True):
    g = torch.Generator().manual_seed(seed)

    def r(*shape, scale=1.0):
        return (scale * (2 * torch.rand(*shape, generator=g, dtype=torch.float64) - 1)).to(dtype)

    # Each sequence its own uneven grid over about 3; one in three backwards.
    sign = torch.tensor([-0.5 if b % 3 == 2 else 1.0 for b in range(B)], dtype=torch.float64)
    steps = (sign[:, None] * (1 + 0.5 * r(B, T).double()) * 3 / T).to(dtype)
    w_hidden = r(h, n + m)
    # A field that contracts on average: W_out's rows against W_y's.
    w_out = (-0.8 * w_hidden[:, :n].T.double() + 0.3 * r(n, h).double()).to(dtype) / h ** 0.5
    weights = [w_hidden, w_out, r(h, scale=0.5) if biases else None, r(n, scale=0.2) if biases else None]
    return steps, r(B, n), r(B, T, m), weights


MODES = [("deer", "full"), ("deer", "diagonal"), ("sequential", "full"), ("auto", "full")]


@pytest.mark.parametrize("method,jacobian", MODES)
@pytest.mark.parametrize("B,T,n,m,h", [(1, 1, 1, 0, 1), (3, 40, 2, 1, 8), (2, 300, 4, 3, 16)])
def test_matches_the_rk4_loop_values_and_gradients(method, jacobian, B, T, n, m, h):
    steps, y0, inputs, weights = problem(B, T, n, m, h, seed=B * 1000 + T)
    lengths = [T] + [max(1, T // (b + 2)) for b in range(1, B)]
    leaves = [steps, y0, inputs] + weights
    for a in leaves:
        a.requires_grad_(True)
    expected = rk4_loop(steps, y0, inputs, weights, lengths)
    got, report = deer.neural_ode(steps, y0, *weights, inputs=inputs if m else None, lengths=lengths,
                                  method=method, jacobian=jacobian, atol=1e-12, rtol=1e-12, max_iter=2000)
    assert torch.allclose(got, expected, atol=1e-10, rtol=0)
    if method == "deer":
        assert report.path == ["deer"] * B
    if method == "sequential":
        assert report.path == ["sequential"] * B
    w = torch.randn(B, T, n, dtype=torch.float64, generator=torch.Generator().manual_seed(T))
    used = [a for a in leaves if m or a is not inputs]
    want = torch.autograd.grad((expected * w).sum(), used)
    have = torch.autograd.grad((got * w).sum(), used)
    for a, b in zip(have, want):
        assert torch.allclose(a, b, atol=1e-9, rtol=1e-7)


def test_shared_grid_single_sequence_and_no_biases():
    # steps (T,) for every sequence; y0 (n,) for one sequence; no biases.
    steps, y0, inputs, weights = problem(2, 30, 3, 2, 5, seed=5, biases=False)
    grid = steps[0].abs()
    expected = rk4_loop(grid.expand(2, -1), y0, inputs, weights)
    got, _ = deer.neural_ode(grid, y0, *weights, inputs=inputs, method="deer", atol=1e-12, rtol=1e-12)
    assert torch.allclose(got, expected, atol=1e-10, rtol=0)
    one, _ = deer.neural_ode(grid, y0[1], *weights, inputs=inputs[1], method="deer", atol=1e-12, rtol=1e-12)
    assert one.shape == (30, 3)
    assert torch.allclose(one, expected[1], atol=1e-10, rtol=0)


def test_float32_and_numpy_agree_with_torch():
    steps, y0, inputs, weights = problem(3, 200, 4, 2, 8, seed=9)
    expected = rk4_loop(steps, y0, inputs, weights)
    as_numpy = [None if a is None else a.numpy() for a in weights]
    y64, report = deer.neural_ode(steps.numpy(), y0.numpy(), *as_numpy, inputs=inputs.numpy(), method="deer")
    assert isinstance(y64, np.ndarray) and y64.dtype == np.float64
    np.testing.assert_allclose(y64, expected.numpy(), atol=1e-8)
    assert report.path == ["deer"] * 3
    as32 = [None if a is None else a.float() for a in weights]
    y32, report = deer.neural_ode(steps.float(), y0.float(), *as32, inputs=inputs.float(), method="deer")
    assert y32.dtype == torch.float32
    assert (y32.double() - expected).abs().max() < 1e-4
    ys, _ = deer.neural_ode(steps.numpy().astype(np.float32), y0.numpy().astype(np.float32),
                            *[None if a is None else a.numpy() for a in as32],
                            inputs=inputs.numpy().astype(np.float32), method="sequential")
    np.testing.assert_allclose(ys, y32.numpy(), atol=1e-5)


def sequential_rk4(f, y0, u, dt):
    """Classical RK4 of dy/dt = f([y; u_t]) with steps dt, u held over each:
    (B, T, n)."""
    state, states = y0, []
    for t in range(u.shape[1]):
        def k(p):
            return f(torch.cat((p, u[:, t]), -1))
        k1 = k(state)
        k2 = k(state + 0.5 * dt * k1)
        k3 = k(state + 0.5 * dt * k2)
        k4 = k(state + dt * k3)
        state = state + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        states.append(state)
    return torch.stack(states, 1)


def test_module_from_linear_matches_its_sequential_field_and_trains():
    torch.manual_seed(3)
    hidden, out = torch.nn.Linear(3 + 2, 16).double(), torch.nn.Linear(16, 3).double()
    ode = deer.NeuralODE.from_linear(hidden, out, method="deer", atol=1e-12, rtol=1e-12)
    assert isinstance(ode, torch.nn.Module)
    assert sorted(n for n, _ in ode.named_parameters()) == ["bias_hidden", "bias_out", "weight_hidden",
                                                            "weight_out"]
    y0 = torch.randn(4, 3, dtype=torch.float64)
    u = torch.randn(4, 50, 2, dtype=torch.float64)
    steps = torch.full((50,), 0.05, dtype=torch.float64)
    y = ode(y0, steps, u)
    f = torch.nn.Sequential(hidden, torch.nn.Tanh(), out)
    assert torch.allclose(y, sequential_rk4(f, y0, u, 0.05), atol=1e-10, rtol=0)
    assert ode.last_report.path == ["deer"] * 4
    # A few steps of training lower a loss.
    target = torch.zeros(4, 50, 3, dtype=torch.float64)
    optimiser = torch.optim.SGD(ode.parameters(), lr=0.1)
    losses = []
    for _ in range(5):
        optimiser.zero_grad()
        loss = (ode(y0, steps, u) - target).square().mean()
        loss.backward()
        optimiser.step()
        losses.append(float(loss))
    assert losses[-1] < losses[0]
    # Layers with and without biases: each bias as its layer has it.
    for hidden_bias, out_bias in ((False, True), (True, False)):
        h1 = torch.nn.Linear(5, 16, bias=hidden_bias).double()
        o1 = torch.nn.Linear(16, 3, bias=out_bias).double()
        mixed = deer.NeuralODE.from_linear(h1, o1, method="sequential")
        assert (mixed.bias_hidden is not None) == hidden_bias and (mixed.bias_out is not None) == out_bias
        with torch.no_grad():
            want = sequential_rk4(torch.nn.Sequential(h1, torch.nn.Tanh(), o1), y0, u[:, :5], 0.05)
            assert torch.allclose(mixed(y0, steps[:5], u[:, :5]), want, atol=1e-10, rtol=0)
    plain = deer.NeuralODE(2, 8, dtype=torch.float64, bias=False)
    assert plain.bias_hidden is None and plain.bias_out is None
    assert plain(torch.ones(1, 2, dtype=torch.float64), torch.full((5,), 0.1, dtype=torch.float64)).shape == (1, 5, 2)


def test_errors_name_the_argument():
    steps, y0, inputs, weights = problem(2, 10, 3, 2, 4, seed=1)
    with pytest.raises(ValueError, match="y0"):
        deer.neural_ode(steps, y0[None], *weights, inputs=inputs)
    with pytest.raises(ValueError, match="steps"):
        deer.neural_ode(steps[:1], y0, *weights, inputs=inputs)
    with pytest.raises(ValueError, match="inputs"):
        deer.neural_ode(steps, y0, *weights, inputs=inputs[:, :5])
    with pytest.raises(ValueError, match="weight_hidden"):
        deer.neural_ode(steps, y0, *weights)  # weight_hidden expects m = 2 input columns
    with pytest.raises(ValueError, match="bias_out"):
        deer.neural_ode(steps, y0, weights[0], weights[1], weights[2], weights[2], inputs=inputs)
    with pytest.raises(ValueError, match="weight_out"):
        bad = weights[1].clone()
        bad[0, 0] = float("nan")
        deer.neural_ode(steps, y0, weights[0], bad, inputs=inputs)
    with pytest.raises(ValueError, match="atol"):
        deer.neural_ode(steps, y0, *weights, inputs=inputs, atol=0)


@pytest.mark.skipif(not hasattr(torch, "compile"), reason="torch.compile needs torch >= 2.0")
def test_compiles_without_graph_break():
    from softwave._torch_ops import OPS

    if not OPS:
        pytest.skip("torch.library.custom_op needs torch >= 2.4")
    torch.manual_seed(0)
    ode = deer.NeuralODE(3, 8, 2, method="deer", dtype=torch.float64)
    y0 = torch.randn(2, 3, dtype=torch.float64, requires_grad=True)
    u = torch.randn(2, 20, 2, dtype=torch.float64)
    steps = torch.full((20,), 0.1, dtype=torch.float64)

    def step(y0):
        return ode(y0, steps, u).square().sum()

    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    want = torch.autograd.grad(step(y0), [y0] + list(ode.parameters()))
    have = torch.autograd.grad(compiled(y0), [y0] + list(ode.parameters()))
    for a, b in zip(have, want):
        assert torch.allclose(a, b, atol=1e-12, rtol=1e-10)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
@pytest.mark.parametrize("jacobian", ["full", "diagonal"])
def test_cuda_tensors_match_the_rk4_loop(jacobian):
    import softwave

    if not softwave.has_cuda():
        pytest.skip("softwave was built without CUDA")
    steps, y0, inputs, weights = problem(3, 500, 4, 2, 16, seed=11)
    leaves = [a.cuda().requires_grad_(True) for a in [steps, y0, inputs] + weights]
    expected = rk4_loop(*leaves[:3], leaves[3:])
    got, report = deer.neural_ode(leaves[0], leaves[1], *leaves[3:], inputs=leaves[2], method="deer",
                                  jacobian=jacobian, atol=1e-12, rtol=1e-12, max_iter=2000)
    assert torch.allclose(got, expected, atol=1e-10, rtol=0)
    assert report.path == ["deer"] * 3
    w = torch.randn_like(expected)
    want = torch.autograd.grad((expected * w).sum(), leaves)
    have = torch.autograd.grad((got * w).sum(), leaves)
    for a, b in zip(have, want):
        assert torch.allclose(a, b, atol=1e-9, rtol=1e-7)


def test_spiral_example_trains():
    """bindings/python/examples/neural_ode_spiral.py: a short run lowers the
    whole trajectory's error."""
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).resolve().parents[2] / "bindings" / "python" / "examples" / "neural_ode_spiral.py"
    spec = importlib.util.spec_from_file_location("neural_ode_spiral", path)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    errors = script.train(iterations=60, report=30, log=lambda *_: None)
    assert len(errors) == 3
    assert errors[-1] < 0.5 * errors[0]
