"""softwave.jax: values and custom_vjp gradients under jit and vmap agree
with the NumPy front end (which the other tests tie to the reference)."""

import numpy as np
import pytest

jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp  # noqa: E402

import softwave.jax as swj  # noqa: E402
import softwave.numpy as swn  # noqa: E402


@pytest.mark.parametrize("divergence", [False, True])
def test_grad_under_jit_matches_numpy(rng, divergence):
    x, y = rng.standard_normal((3, 12, 2)), rng.standard_normal((3, 9, 2))
    g = rng.uniform(0.5, 2, 3)
    function = swj.soft_dtw_divergence if divergence else swj.soft_dtw
    expected = (swn.soft_dtw_divergence_value_and_grad if divergence else swn.soft_dtw_value_and_grad)(
        x, y, 0.2, grad_output=g, lengths_x=[12, 5, 8])

    def loss(a, b):
        return (function(a, b, 0.2, lengths_x=jnp.array([12, 5, 8])) * g).sum()

    value, (gx, gy) = jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))(jnp.asarray(x), jnp.asarray(y))
    assert float(value) == pytest.approx(float((expected[0] * g).sum()), rel=1e-12)
    np.testing.assert_allclose(gx, expected[1], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(gy, expected[2], rtol=1e-12, atol=1e-12)


def test_vmap_float32_and_single_pairs(rng):
    x, y = rng.standard_normal((4, 10, 1)).astype(np.float32), rng.standard_normal((4, 11, 1)).astype(np.float32)
    batched = jax.vmap(lambda a, b: swj.soft_dtw(a, b, 0.5))(jnp.asarray(x), jnp.asarray(y))
    assert batched.dtype == jnp.float32
    # float32 on JAX's backend (the GPU's kernels there) against the CPU: an
    # absolute tolerance too, for values near zero
    np.testing.assert_allclose(batched, swn.soft_dtw(x, y, 0.5), rtol=1e-6, atol=1e-6)
    grad = jax.grad(lambda a: swj.soft_dtw(a, y[0, :, 0], 0.5))(jnp.asarray(x[0, :, 0]))
    np.testing.assert_allclose(grad, swn.soft_dtw_value_and_grad(x[0, :, 0], y[0, :, 0], 0.5)[1], rtol=1e-5, atol=1e-6)


def test_cost_alignment_pairwise_and_dtw(rng):
    C = rng.uniform(0, 1, (2, 5, 7))
    grad = jax.jit(jax.grad(lambda c: swj.soft_dtw_cost(c, 0.3).sum()))(jnp.asarray(C))
    np.testing.assert_allclose(grad, swn.soft_dtw_cost_value_and_grad(C, 0.3)[1], rtol=1e-12)
    x, y = rng.standard_normal((2, 6, 2)), rng.standard_normal((3, 6, 2))
    np.testing.assert_allclose(swj.pairwise(x, y, 0.3), swn.pairwise(x, y, 0.3), rtol=1e-12)
    # XLA's CPU threads flush subnormal results to zero: an alignment entry
    # below the smallest normal double may read 0 there and not from NumPy.
    np.testing.assert_allclose(swj.soft_dtw_alignment(x, y[:2], 0.3), swn.soft_dtw_alignment(x, y[:2], 0.3),
                               atol=np.finfo(np.float64).tiny)
    values, path, length = jax.jit(swj.dtw)(jnp.asarray(x), jnp.asarray(y[:2]))
    expected_values, expected_paths = swn.dtw(x, y[:2])
    np.testing.assert_allclose(values, expected_values, rtol=1e-12)
    for b in range(2):
        np.testing.assert_array_equal(np.asarray(path[b, : int(length[b])]), expected_paths[b])
        assert (np.asarray(path[b, int(length[b]):]) == -1).all()


def test_the_core_runs_inside_the_compiled_program(rng):
    """With XLA FFI handlers (a build that found jaxlib's headers, as
    tests/python/run.sh makes) a jitted program calls the core as a custom
    call on JAX's own buffers: on the GPU backend too, with no host callback."""
    from softwave import _core

    if not _core.jax_ffi_targets():
        pytest.skip("this softwave was built without jaxlib's FFI headers: softwave.jax uses pure_callback")
    backend = jax.default_backend()
    if backend == "gpu" and not _core.has_cuda():
        pytest.skip("JAX runs on the GPU but this softwave was built for the CPU only")
    assert swj.uses_ffi()
    x, y = jnp.asarray(rng.standard_normal((3, 12, 2))), jnp.asarray(rng.standard_normal((3, 9, 2)))
    program = jax.jit(jax.value_and_grad(lambda a, b: swj.soft_dtw(a, b, 0.3).sum(), argnums=(0, 1)))
    text = program.lower(x, y).as_text()
    assert "softwave_soft_dtw" in text
    assert "callback" not in text
    ot_program = jax.jit(jax.grad(lambda a, b: swj.sinkhorn(a, b, epsilon=0.5).value.sum()))
    ot_text = ot_program.lower(x, y).as_text()
    assert "softwave_optimal_transport" in ot_text and "callback" not in ot_text
    value, (gx, gy) = program(x, y)
    expected = swn.soft_dtw_value_and_grad(np.asarray(x), np.asarray(y), 0.3)
    assert float(value) == pytest.approx(float(expected[0].sum()), rel=1e-12)
    np.testing.assert_allclose(gx, expected[1], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(gy, expected[2], rtol=1e-10, atol=1e-12)
    # float32, and the core's own argument errors with softwave's message.
    x32, y32 = x.astype(jnp.float32), y.astype(jnp.float32)
    values = jax.jit(lambda a, b: swj.soft_dtw(a, b, 0.3))(x32, y32)
    assert values.dtype == jnp.float32
    np.testing.assert_allclose(values, expected[0], rtol=1e-5)
    if backend == "cpu":  # data checks run on the CPU; on the GPU lengths are clamped, as in softwave.torch
        with pytest.raises(Exception, match="lengths"):
            jax.block_until_ready(swj.soft_dtw(x, y, lengths_x=jnp.array([12, 13, 1])))


# --- entropic optimal transport -------------------------------------------

import softwave.ot as swot  # noqa: E402

_OT = dict(epsilon=0.3, tolerance=1e-13, max_iterations=20000, check_every=5)


def _weights(rng, *shape):
    w = rng.uniform(0.5, 1.5, shape)
    return w / w.sum(-1, keepdims=True)


def test_sinkhorn_value_and_gradients_under_jit(rng):
    """Values and potentials equal softwave.ot's; the value's gradient in x
    and y matches central differences, in a and b the torch front end's."""
    x, y = rng.standard_normal((2, 14, 3)), rng.standard_normal((2, 11, 3))
    a, b = _weights(rng, 2, 14), _weights(rng, 2, 11)
    g = np.array([0.7, 1.3])
    expected = swot.sinkhorn(x, y, a, b, **_OT)

    def loss(x, y, a, b):
        return (swj.sinkhorn(x, y, a, b, **_OT).value * g).sum()

    out = jax.jit(lambda *args: swj.sinkhorn(*args, **_OT))(x, y, a, b)
    np.testing.assert_allclose(out.value, expected.value, rtol=1e-12)
    np.testing.assert_allclose(out.f, expected.f, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(out.transport_cost, expected.transport_cost, rtol=1e-10)
    np.testing.assert_array_equal(out.converged, expected.converged)
    assert np.asarray(out.converged).all() and out.iterations.dtype == jnp.int32

    value, grads = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2, 3)))(x, y, a, b)
    assert float(value) == pytest.approx(float((expected.value * g).sum()), rel=1e-12)
    h = 1e-6
    for which, array in ((0, x), (1, y)):
        for index in [(0, 0, 0), (1, 5, 2), (0, 9, 1)]:
            plus, minus = [list(map(np.copy, (x, y, a, b))) for _ in range(2)]
            plus[which][index] += h
            minus[which][index] -= h
            numeric = (float(loss(*plus)) - float(loss(*minus))) / (2 * h)
            assert float(grads[which][index]) == pytest.approx(numeric, rel=1e-6, abs=1e-8)
    torch = pytest.importorskip("torch")
    tensors = [torch.tensor(v, requires_grad=True) for v in (x, y, a, b)]
    (swot.sinkhorn(*tensors, **_OT).value * torch.tensor(g)).sum().backward()
    for which in range(4):
        np.testing.assert_allclose(grads[which], tensors[which].grad.numpy(), rtol=1e-9, atol=1e-12)


def test_gradients_of_some_inputs_equal_those_of_all(rng):
    """Differentiated w.r.t. some inputs only (JAX's symbolic zeros tell the
    core which gradients to compute), Sinkhorn's and DEER's gradients equal
    the same entries of the gradients w.r.t. every input."""
    x, y = rng.standard_normal((2, 14, 3)), rng.standard_normal((2, 11, 3))
    a, b = _weights(rng, 2, 14), _weights(rng, 2, 11)

    def ot_loss(*args):
        return swj.sinkhorn(*args, **_OT).value.sum()

    every = jax.jit(jax.grad(ot_loss, argnums=(0, 1, 2, 3)))(x, y, a, b)
    for argnums in [(0,), (1,), (3,), (0, 2)]:
        some = jax.jit(jax.grad(ot_loss, argnums=argnums))(x, y, a, b)
        for k, got in zip(argnums, some):
            np.testing.assert_array_equal(got, every[k])
    B, T, m, H = 2, 30, 2, 3
    w = _cell_weights(rng, "gru", m, H)
    xs = rng.standard_normal((B, T, m))
    weight = rng.standard_normal((B, T, H))

    def deer_loss(*args):
        return (swj.deer_rnn(args[0], None, *args[1:], cell="gru", method="deer").y * weight).sum()

    every = jax.jit(jax.grad(deer_loss, argnums=(0, 1, 2, 3, 4)))(xs, *w)
    for argnums in [(0,), (2,), (1, 4)]:
        some = jax.jit(jax.grad(deer_loss, argnums=argnums))(xs, *w)
        for k, got in zip(argnums, some):
            np.testing.assert_array_equal(got, every[k])
    # A loss of the potentials alone, which carry no gradient: zeros.
    none = jax.jit(jax.grad(lambda x: swj.sinkhorn(x, y, a, b, **_OT).f.sum()))(x)
    assert not np.asarray(none).any()


def test_sinkhorn_on_a_cost_matrix(rng):
    """A cost matrix's value equals softwave.ot's, and its gradient is the plan."""
    C = rng.uniform(0, 2, (2, 9, 12))
    a, b = _weights(rng, 2, 9), _weights(rng, 2, 12)
    expected = swot.sinkhorn(a=a, b=b, cost_matrix=C, **_OT)
    value, (grad_c, grad_a) = jax.jit(jax.value_and_grad(
        lambda c, a: swj.sinkhorn(a=a, b=b, cost_matrix=c, **_OT).value.sum(), argnums=(0, 1)))(C, a)
    assert float(value) == pytest.approx(float(expected.value.sum()), rel=1e-12)
    np.testing.assert_allclose(grad_c, expected.plan(), rtol=1e-9, atol=1e-13)
    single = swj.sinkhorn(cost_matrix=C[0], **_OT)
    assert single.value.shape == () and single.g.shape == (12,)
    np.testing.assert_allclose(single.value, swot.sinkhorn(cost_matrix=C[0], **_OT).value, rtol=1e-12)
    with pytest.raises(ValueError, match="exactly one"):
        swj.sinkhorn(C[0][:, :2], C[0][:, :2], cost_matrix=C[0])
    with pytest.raises(ValueError, match="a must have shape"):
        swj.sinkhorn(cost_matrix=C[0], a=np.ones(12) / 12)


def test_sinkhorn_single_vmap_float32_and_options(rng):
    x, y = rng.standard_normal((16, 2)).astype(np.float32), rng.standard_normal((12, 2)).astype(np.float32)
    out = swj.sinkhorn(x, y, epsilon=0.5, rho=2.0)
    expected = swot.sinkhorn(x, y, epsilon=0.5, rho=2.0)
    assert out.value.shape == () and out.f.shape == (16,) and out.marginal_error.shape == (2,)
    assert out.value.dtype == jnp.float32
    np.testing.assert_allclose(out.value, expected.value, rtol=1e-5)
    xs, ys = np.stack([x, 2 * x]), np.stack([y, y + 1])
    batched = jax.vmap(lambda p, q: swj.sinkhorn(p, q, epsilon=0.5).value)(jnp.asarray(xs), jnp.asarray(ys))
    np.testing.assert_allclose(batched, swot.sinkhorn(xs, ys, epsilon=0.5).value, rtol=1e-5)
    with pytest.raises(ValueError, match="epsilon"):
        swj.sinkhorn(x, y, epsilon=0.0)
    with pytest.raises(ValueError, match="b must have shape"):
        swj.sinkhorn(x, y, b=np.ones(5) / 5)
    # the potentials are constants to autodiff: their gradient is zero
    grad_f = jax.grad(lambda p: swj.sinkhorn(p, y, epsilon=0.5).f.sum())(jnp.asarray(x))
    assert not np.asarray(grad_f).any()


def test_sinkhorn_divergence_matches_ot_and_differences(rng):
    x, y = rng.standard_normal((2, 10, 2)), rng.standard_normal((2, 13, 2))
    expected = swot.sinkhorn_divergence(x, y, **_OT)
    values = jax.jit(lambda p, q: swj.sinkhorn_divergence(p, q, **_OT))(x, y)
    np.testing.assert_allclose(values, expected, rtol=1e-10)
    assert float(swj.sinkhorn_divergence(x[0], x[0], **_OT)) == pytest.approx(0, abs=1e-7)

    def loss(p):
        return swj.sinkhorn_divergence(p, y, **_OT).sum()

    grad = jax.jit(jax.grad(loss))(x)
    h = 1e-6
    for index in [(0, 0, 0), (1, 7, 1)]:
        plus, minus = np.copy(x), np.copy(x)
        plus[index] += h
        minus[index] -= h
        numeric = (float(loss(plus)) - float(loss(minus))) / (2 * h)
        assert float(grad[index]) == pytest.approx(numeric, rel=1e-6, abs=1e-8)


def test_sinkhorn_second_derivative_is_refused(rng):
    x, y = rng.standard_normal((6, 2)), rng.standard_normal((5, 2))
    with pytest.raises(NotImplementedError, match="second derivatives"):
        jax.hessian(lambda p: swj.sinkhorn(p, y, epsilon=0.5).value)(jnp.asarray(x))
    with pytest.raises(NotImplementedError, match="second derivatives"):
        jax.hessian(lambda p: swj.sinkhorn_divergence(p, y, epsilon=0.5))(jnp.asarray(x))


# --- DEER -----------------------------------------------------------------

import softwave.deer as swd  # noqa: E402


def _cell_weights(rng, cell, m, H):
    G = {"elman": 1, "gru": 3, "lstm": 4}[cell]
    scale = 1 / np.sqrt(H)
    return [rng.uniform(-scale, scale, shape) for shape in ((G * H, m), (G * H, H), (G * H,), (G * H,))]


def _reference(x, h0, w, peephole=None, **opts):
    """softwave.deer.rnn's states and iterations where softwave.jax runs the
    core: NumPy's on the CPU, and on a GPU backend too where it calls the core
    through pure_callback (on host arrays); on a GPU with XLA FFI targets
    torch's CUDA tensors', since a GPU's solve may start from other states
    than the CPU's (start_warm_up) and so take another number of iterations
    to the same answer."""
    if jax.default_backend() == "cpu" or not swj.uses_ffi():
        y, report = swd.rnn(x, h0, *w, peephole=peephole, **opts)
        return y, report.iterations
    torch = pytest.importorskip("torch")

    def on_gpu(a):
        return None if a is None else torch.tensor(a, device="cuda")

    y, report = swd.rnn(on_gpu(x), on_gpu(h0), *map(on_gpu, w), peephole=on_gpu(peephole), **opts)
    return y.cpu().numpy(), report.iterations


@pytest.mark.parametrize("cell", ["elman", "gru", "lstm"])
def test_deer_states_and_gradients_under_jit(rng, cell):
    """States equal softwave.deer's; gradients of every input equal the
    torch front end's and central differences."""
    B, T, m, H = 2, 40, 3, 4
    n = 2 * H if cell == "lstm" else H
    x, h0 = rng.standard_normal((B, T, m)), 0.3 * rng.standard_normal((B, n))
    w = _cell_weights(rng, cell, m, H)
    lengths = np.array([T, 23], dtype=np.int32)
    opts = dict(cell=cell, method="deer", atol=1e-12, rtol=1e-10, lengths=lengths)
    expected, iterations = _reference(x, h0, w, **opts)
    weight = rng.standard_normal((B, T, n))

    def loss(x, h0, *w):
        return (swj.deer_rnn(x, h0, *w, **opts).y * weight).sum()

    out = jax.jit(lambda *args: swj.deer_rnn(*args, **opts))(x, h0, *w)
    np.testing.assert_allclose(out.y, expected, rtol=1e-10, atol=1e-12)
    assert list(np.asarray(out.iterations)) == iterations
    assert [swd._PATHS[int(p)] for p in np.asarray(out.path)] == ["deer", "deer"]
    grads = jax.jit(jax.grad(loss, argnums=tuple(range(6))))(x, h0, *w)
    torch = pytest.importorskip("torch")
    tensors = [torch.tensor(v, requires_grad=True) for v in (x, h0, *w)]
    y, _ = swd.rnn(*tensors, **dict(opts, lengths=torch.tensor(lengths)))
    (y * torch.tensor(weight)).sum().backward()
    for got, t in zip(grads, tensors):
        np.testing.assert_allclose(got, t.grad.numpy(), rtol=1e-8, atol=1e-10)
    h = 1e-6
    args = [x, h0, *w]
    for which, index in ((0, (1, 5, 2)), (1, (0, 1)), (3, (2, 1))):
        plus, minus = [list(map(np.copy, args)) for _ in range(2)]
        plus[which][index] += h
        minus[which][index] -= h
        numeric = (float(loss(*plus)) - float(loss(*minus))) / (2 * h)
        assert float(grads[which][index]) == pytest.approx(numeric, rel=1e-6, abs=1e-8)


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_deer_diagonal_hidden_weights_under_jit(rng, cell):
    """ParaRNN-style diagonal hidden weights (G·H, 1), solved by exact
    Newton on the Jacobian's structure: the states and the weights'
    gradients of the NumPy and torch front ends."""
    B, T, m, H = 2, 60, 2, 3
    w = _cell_weights(rng, cell, m, H)
    w[1] = w[1][:, :1]
    x = rng.standard_normal((B, T, m))
    structure = dict(jacobian="block", block_size=2, block_layout="strided") if cell == "lstm" else dict(
        jacobian="diagonal")
    opts = dict(cell=cell, method="deer", diagonal=True, atol=1e-12, rtol=1e-10, **structure)
    expected, iterations = _reference(x, None, w, **opts)
    out = jax.jit(lambda *args: swj.deer_rnn(args[0], None, *args[1:], **opts))(x, *w)
    np.testing.assert_allclose(out.y, expected, rtol=1e-10, atol=1e-12)
    assert list(np.asarray(out.iterations)) == iterations
    weight = rng.standard_normal(expected.shape)
    grads = jax.grad(lambda *a: (swj.deer_rnn(a[0], None, *a[1:], **opts).y * weight).sum(),
                     argnums=(0, 1, 2, 3, 4))(x, *w)
    torch = pytest.importorskip("torch")
    tensors = [torch.tensor(v, requires_grad=True) for v in (x, *w)]
    y, _ = swd.rnn(tensors[0], None, *tensors[1:], **opts)
    (y * torch.tensor(weight)).sum().backward()
    assert grads[2].shape == w[1].shape
    for got, t in zip(grads, tensors):
        np.testing.assert_allclose(got, t.grad.numpy(), rtol=1e-8, atol=1e-10)


def test_deer_cifg_lstm_under_jit(rng):
    """ParaRNN's LSTM (three gates, peepholes): states and every gradient,
    the peepholes' included, against the torch front end."""
    B, T, m, H = 2, 50, 2, 3
    w = [0.5 * rng.standard_normal(shape) for shape in ((3 * H, m), (3 * H, 1), (3 * H,), (3 * H,))]
    peephole = 0.5 * rng.standard_normal(2 * H)
    x = rng.standard_normal((B, T, m))
    opts = dict(cell="cifg_lstm", method="deer", diagonal=True, atol=1e-12, rtol=1e-10, jacobian="block",
                block_size=2, block_layout="strided")
    expected, iterations = _reference(x, None, w, peephole, **opts)
    run = jax.jit(lambda x, *a: swj.deer_rnn(x, None, *a[:4], peephole=a[4], **opts))
    out = run(x, *w, peephole)
    np.testing.assert_allclose(out.y, expected, rtol=1e-10, atol=1e-12)
    assert list(np.asarray(out.iterations)) == iterations
    weight = rng.standard_normal(expected.shape)
    grads = jax.grad(lambda *a: (run(*a).y * weight).sum(), argnums=tuple(range(6)))(x, *w, peephole)
    torch = pytest.importorskip("torch")
    tensors = [torch.tensor(v, requires_grad=True) for v in (x, *w, peephole)]
    y, _ = swd.rnn(tensors[0], None, *tensors[1:5], peephole=tensors[5], **opts)
    (y * torch.tensor(weight)).sum().backward()
    for got, t in zip(grads, tensors):
        np.testing.assert_allclose(got, t.grad.numpy(), rtol=1e-8, atol=1e-10)


def test_deer_single_float32_lstm_state_and_errors(rng):
    T, m, H = 30, 2, 3
    x = rng.standard_normal((T, m)).astype(np.float32)
    w = [a.astype(np.float32) for a in _cell_weights(rng, "lstm", m, H)]
    state = (np.zeros(H, np.float32), 0.5 * np.ones(H, np.float32))
    h, c, out = swj.deer_lstm(x, state, *w, method="deer")
    eh, ec, report = swd.lstm(x[None], (state[0][None], state[1][None]), *w, method="deer")
    assert h.shape == (T, H) and h.dtype == jnp.float32 and out.iterations.shape == ()
    np.testing.assert_allclose(h, eh[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(c, ec[0], rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="cell"):
        swj.deer_rnn(x, None, *w, cell="transformer")
    with pytest.raises(ValueError, match="weight_hh"):
        swj.deer_lstm(x, None, w[0], w[1][:, 0])
    with pytest.raises(ValueError, match="lengths"):
        swj.deer_lstm(x[None], None, *w, lengths=[3, 4])
    with pytest.raises(Exception, match="weight_hh has 10 rows"):  # the core's own check, inside the call
        jax.block_until_ready(swj.deer_lstm(x, None, w[0], w[1][:10]))
    weights = _cell_weights(rng, "gru", m, H)
    with pytest.raises(NotImplementedError, match="second derivatives"):
        jax.hessian(lambda a: swj.deer_gru(a, None, *weights).y.sum())(jnp.asarray(x, jnp.float64))
    if swj.uses_ffi():
        text = jax.jit(lambda a: swj.deer_lstm(a, None, *w)[0]).lower(jnp.asarray(x)).as_text()
        assert "softwave_deer_rnn" in text and "callback" not in text


def test_deer_neural_ode_under_jit(rng):
    """The neural ODE's states equal softwave.deer.neural_ode's (NumPy);
    the gradients of the steps, y0, the inputs and every weight equal the
    torch front end's and central differences."""
    B, T, n, m, h = 2, 40, 3, 2, 5
    steps = rng.uniform(0.02, 0.08, (B, T))
    y0, u = rng.standard_normal((B, n)), rng.standard_normal((B, T, m))
    w = [rng.uniform(-1, 1, (h, n + m)), rng.uniform(-0.5, 0.5, (n, h)), rng.uniform(-0.5, 0.5, h),
         rng.uniform(-0.2, 0.2, n)]
    lengths = np.array([T, 23], dtype=np.int32)
    opts = dict(method="deer", atol=1e-12, rtol=1e-10, lengths=lengths)
    expected, report = swd.neural_ode(steps, y0, *w, inputs=u, **opts)
    weight = rng.standard_normal((B, T, n))

    def loss(steps, y0, u, *w):
        return (swj.deer_neural_ode(steps, y0, *w, inputs=u, **opts).y * weight).sum()

    out = jax.jit(lambda s, y, x, *a: swj.deer_neural_ode(s, y, *a, inputs=x, **opts))(steps, y0, u, *w)
    np.testing.assert_allclose(out.y, expected, rtol=1e-10, atol=1e-12)
    assert [swd._PATHS[int(p)] for p in np.asarray(out.path)] == ["deer", "deer"]
    grads = jax.jit(jax.grad(loss, argnums=tuple(range(7))))(steps, y0, u, *w)
    torch = pytest.importorskip("torch")
    tensors = [torch.tensor(v, requires_grad=True) for v in (steps, y0, u, *w)]
    y, _ = swd.neural_ode(tensors[0], tensors[1], *tensors[3:], inputs=tensors[2],
                          **dict(opts, lengths=torch.tensor(lengths)))
    (y * torch.tensor(weight)).sum().backward()
    for got, t in zip(grads, tensors):
        np.testing.assert_allclose(got, t.grad.numpy(), rtol=1e-8, atol=1e-10)
    step = 1e-6
    args = [steps, y0, u, *w]
    for which, index in ((0, (1, 5)), (2, (0, 3, 1)), (3, (2, 4))):
        plus, minus = [list(map(np.copy, args)) for _ in range(2)]
        plus[which][index] += step
        minus[which][index] -= step
        numeric = (float(loss(*plus)) - float(loss(*minus))) / (2 * step)
        assert float(grads[which][index]) == pytest.approx(numeric, rel=1e-6, abs=1e-8)
    with pytest.raises(ValueError, match="steps"):
        swj.deer_neural_ode(steps[:1], y0, *w, inputs=u)


# --- the (a, b) scan --------------------------------------------------------


def _scan_reference(a, b, y0, reverse):
    """The recurrence by jax.lax.scan along the last axis (differentiable)."""
    a, b = jnp.moveaxis(a, -1, 0), jnp.moveaxis(b, -1, 0)
    start = jnp.zeros(a.shape[1:], a.dtype) if y0 is None else y0

    def step(state, ab):
        state = ab[0] * state + ab[1]
        return state, state

    _, y = jax.lax.scan(step, start, (a, b), reverse=reverse)
    return jnp.moveaxis(y, 0, -1)


@pytest.mark.parametrize("shape", [(7,), (2, 3, 300)])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("with_y0", [False, True])
def test_linear_recurrence_states_and_gradients_under_jit(rng, shape, reverse, with_y0):
    a, b = rng.uniform(-0.99, 0.99, shape), rng.standard_normal(shape)
    y0 = rng.standard_normal(shape[:-1]) if with_y0 else None
    weight = rng.standard_normal(shape)
    run = jax.jit(lambda a, b, y0: swj.linear_recurrence(a, b, y0, reverse=reverse))
    np.testing.assert_allclose(run(a, b, y0), _scan_reference(a, b, y0, reverse), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(run(a, b, y0), swd.linear_recurrence(a, b, y0, reverse=reverse), rtol=1e-14,
                               atol=1e-14)
    argnums = (0, 1, 2) if with_y0 else (0, 1)

    def loss(function):
        return lambda a, b, y0: (function(a, b, y0) * weight).sum()

    got = jax.jit(jax.grad(loss(lambda *x: swj.linear_recurrence(*x, reverse=reverse)), argnums))(a, b, y0)
    want = jax.grad(loss(lambda *x: _scan_reference(*x, reverse)), argnums)(a, b, y0)
    for g, e in zip(got, want):
        np.testing.assert_allclose(g, e, rtol=1e-10, atol=1e-12)
    # one input differentiated: the others' gradients are not computed
    only_b = jax.jit(jax.grad(loss(lambda *x: swj.linear_recurrence(*x, reverse=reverse)), 1))(a, b, y0)
    np.testing.assert_allclose(only_b, want[1], rtol=1e-10, atol=1e-12)


def test_linear_recurrence_float32_vmap_and_errors(rng):
    a = rng.uniform(-0.9, 0.9, (3, 4, 50)).astype(np.float32)
    b = rng.standard_normal((3, 4, 50)).astype(np.float32)
    batched = jax.vmap(lambda a, b: swj.linear_recurrence(a, b))(a, b)
    assert batched.dtype == jnp.float32
    np.testing.assert_allclose(batched, swd.linear_recurrence(a.astype(np.float64), b.astype(np.float64)),
                               rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match=r"\bb\b"):
        swj.linear_recurrence(a, b[..., :-1])
    with pytest.raises(ValueError, match="y0"):
        swj.linear_recurrence(a, b, np.zeros((3, 5)))
    with pytest.raises(ValueError, match="kernel"):
        swj.linear_recurrence(a, b, kernel="pairs")
    with pytest.raises(NotImplementedError, match="second derivatives"):
        jax.hessian(lambda a: swj.linear_recurrence(a, b[0, 0]).sum())(jnp.asarray(a[0, 0]))
