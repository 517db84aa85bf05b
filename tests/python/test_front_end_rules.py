"""Rules every front end (torch, numpy, jax, barycenter) shares: no silent
second derivatives, bandwidth read as the peers read it (|i - j| <= bandwidth),
one rule for empty inputs, and barycenter arguments checked by name."""

import re
import warnings

import numpy as np
import pytest
import reference as ref

import softwave
import softwave.numpy as swn
from softwave._common import band_of, bandwidth_of

SECOND_ORDER = r"^softwave: second derivatives"


def _torch():
    return pytest.importorskip("torch")


def _jax():
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    return jax


# --- 1. second derivatives: an error, never a silent zero -------------------


def _sq_cost(a, b):
    """A squared Euclidean cost tensor (B, N, M) with a second derivative."""
    return ((a[:, :, None, :] - b[:, None, :, :]) ** 2).sum(-1)


def _torch_losses():
    import softwave.torch as swt

    return {
        "soft_dtw": lambda x, y: swt.soft_dtw(x, y, 0.5),
        "soft_dtw_divergence": lambda x, y: swt.soft_dtw_divergence(x, y, 0.5),
        "SoftDTW": lambda x, y: swt.SoftDTW(gamma=0.5)(x, y),
        "softdtw_normalize": lambda x, y: swt.softdtw(x, y, gamma=0.5, normalize=True),
        "dist_callable": lambda x, y: swt.soft_dtw(x, y, 0.5, dist=_sq_cost),
        "soft_dtw_cost": lambda x, y: swt.soft_dtw_cost(_sq_cost(x, y), 0.5),
        "pairwise": lambda x, y: swt.pairwise(x, y, 0.5),
        "dtw": lambda x, y: swt.dtw(x, y, return_path=False),
    }


LOSSES = ["soft_dtw", "soft_dtw_divergence", "SoftDTW", "softdtw_normalize", "dist_callable", "soft_dtw_cost",
          "pairwise", "dtw"]


@pytest.mark.parametrize("name", LOSSES)
def test_torch_gradient_penalty_raises_instead_of_adding_zero(rng, name):
    torch = _torch()
    loss = _torch_losses()[name]
    x = torch.tensor(rng.standard_normal((3, 6, 2)), requires_grad=True)
    y = torch.tensor(rng.standard_normal((3, 5, 2)), requires_grad=True)

    def gradient(outer=lambda v: v):
        return torch.autograd.grad(outer(loss(x, y)).sum(), x, create_graph=True)[0]

    # The penalty's derivative is not zero; it used to be dropped silently.
    with pytest.raises(RuntimeError, match=SECOND_ORDER):
        (loss(x, y).sum() + (gradient() ** 2).sum()).backward()
    with pytest.raises(RuntimeError, match=SECOND_ORDER):
        torch.autograd.grad((gradient() ** 2).sum(), y)
    # A nonlinear loss on top: the incoming gradient depends on x as well.
    with pytest.raises(RuntimeError, match=SECOND_ORDER):
        torch.autograd.grad((gradient(torch.exp) ** 2).sum(), x)


@pytest.mark.parametrize("name", LOSSES)
def test_torch_create_graph_gradients_are_still_first_order_values(rng, name):
    torch = _torch()
    loss = _torch_losses()[name]
    x = torch.tensor(rng.standard_normal((3, 6, 2)), requires_grad=True)
    y = torch.tensor(rng.standard_normal((3, 5, 2)))
    (plain,) = torch.autograd.grad(loss(x, y).sum(), x)
    (graphed,) = torch.autograd.grad(loss(x, y).sum(), x, create_graph=True)
    torch.testing.assert_close(graphed.detach(), plain, rtol=0, atol=0)
    x.grad = None
    loss(x, y).sum().backward()
    torch.testing.assert_close(x.grad, plain, rtol=0, atol=0)


def test_jax_second_derivatives_raise_softwaves_error(rng):
    jax = _jax()
    import jax.numpy as jnp

    import softwave.jax as swj

    x, y = jnp.asarray(rng.standard_normal((2, 6, 2))), jnp.asarray(rng.standard_normal((2, 5, 2)))
    for f in (lambda a: swj.soft_dtw(a, y, 0.5).sum(), lambda a: swj.soft_dtw_divergence(a, y, 0.5).sum(),
              lambda a: swj.soft_dtw_cost(_sq_cost(a, y), 0.5).sum()):
        assert jax.grad(f)(x).shape == x.shape  # first order still works
        with pytest.raises(NotImplementedError, match=SECOND_ORDER):
            jax.hessian(f)(x)
        with pytest.raises(NotImplementedError, match=SECOND_ORDER):
            jax.grad(lambda a: (jax.grad(f)(a) ** 2).sum())(x)
        with pytest.raises(NotImplementedError, match=SECOND_ORDER):
            jax.jit(jax.grad(lambda a: f(a) + (jax.grad(f)(a) ** 2).sum()))(x)


# --- 2. bandwidth: the condition |i - j| <= bandwidth ------------------------


@pytest.mark.parametrize("bandwidth, band", [(None, -1), (0, -1), (0.0, -1), (0.5, 0), (1, 1), (1.7, 1), (3, 3)])
def test_band_of_reads_bandwidth_as_the_peers_do(bandwidth, band):
    assert band_of(bandwidth) == band
    assert band_of(bandwidth_of(band)) == band


@pytest.mark.parametrize("n, m", [(7, 7), (6, 9)])
@pytest.mark.parametrize("bandwidth, band", [(0.5, 0), (0.99, 0), (1.7, 1), (0, None)])
def test_float_bandwidth_matches_the_reference(rng, n, m, bandwidth, band):
    x, y = rng.standard_normal((2, n, 2)), rng.standard_normal((2, m, 2))
    expected = [ref.sdtw(x[b], y[b], 0.3, band=band) for b in range(2)]
    np.testing.assert_allclose(swn.soft_dtw(x, y, 0.3, bandwidth=bandwidth), expected, rtol=1e-12)


def test_half_a_cell_keeps_the_diagonal_in_every_front_end(rng):
    """With N = M and bandwidth 0.5 only the diagonal path is left: the value
    is the sum of the diagonal costs, whatever gamma, and ∇x = 2 (x − y)."""
    x, y = rng.standard_normal((2, 8, 3)), rng.standard_normal((2, 8, 3))
    diagonal = ((x - y) ** 2).sum(axis=(1, 2))
    np.testing.assert_allclose(swn.soft_dtw(x, y, 1.0, bandwidth=0.5), diagonal, rtol=1e-12)
    np.testing.assert_allclose(swn.soft_dtw_value_and_grad(x, y, 1.0, bandwidth=0.5)[1], 2 * (x - y), rtol=1e-12)
    assert not np.allclose(swn.soft_dtw(x, y, 1.0), diagonal)  # the band matters here
    torch = _torch()
    import softwave.torch as swt

    tx = torch.tensor(x, requires_grad=True)
    values = swt.SoftDTW(gamma=1.0, bandwidth=0.5)(tx, torch.tensor(y))
    values.sum().backward()
    np.testing.assert_allclose(values.detach().numpy(), diagonal, rtol=1e-12)
    np.testing.assert_allclose(tx.grad.numpy(), 2 * (x - y), rtol=1e-12)
    jax = _jax()
    import softwave.jax as swj

    value, gx = jax.value_and_grad(lambda a: swj.soft_dtw(a, y, 1.0, bandwidth=0.5).sum())(x)
    assert float(value) == pytest.approx(diagonal.sum(), rel=1e-12)
    np.testing.assert_allclose(gx, 2 * (x - y), rtol=1e-12)
    np.testing.assert_allclose(swj.soft_dtw_cost(ref.cost_matrix(x[0], y[0]), 1.0, bandwidth=0.5), diagonal[0],
                               rtol=1e-12)


# --- 3. empty inputs: one rule in every front end ----------------------------


def _values_and_grads(front_end, x, y):
    """(values, ∇x) of soft_dtw in one front end, as NumPy arrays."""
    if front_end == "numpy":
        values, gx, _ = swn.soft_dtw_value_and_grad(x, y)
        return values, gx
    if front_end == "torch":
        torch = _torch()
        import softwave.torch as swt

        tx = torch.tensor(x, requires_grad=True)
        values = swt.soft_dtw(tx, torch.tensor(y))
        values.sum().backward()
        return values.detach().numpy(), tx.grad.numpy()
    jax = _jax()
    import softwave.jax as swj

    values, vjp = jax.vjp(lambda a: swj.soft_dtw(a, y), x)
    return np.asarray(values), np.asarray(vjp(np.ones(values.shape, values.dtype))[0])


FRONT_ENDS = ["numpy", "torch", "jax"]


@pytest.mark.parametrize("front_end", FRONT_ENDS)
@pytest.mark.parametrize("n", [5, 0])
def test_an_empty_batch_gives_empty_results(front_end, n):
    values, gx = _values_and_grads(front_end, np.zeros((0, n, 3)), np.zeros((0, 4, 3)))
    assert values.shape == (0,) and gx.shape == (0, n, 3)


@pytest.mark.parametrize("front_end", FRONT_ENDS)
@pytest.mark.parametrize(
    "x_shape, y_shape, message",
    [
        ((2, 0, 3), (2, 4, 3), "x is empty (N = 0): every series needs at least one time step"),
        ((2, 5, 0), (2, 4, 0), "x is empty (d = 0): every time step needs at least one value"),
        ((2, 5, 3), (2, 0, 3), "y is empty (M = 0): every series needs at least one time step"),
        ((0,), (4,), "x is empty (N = 0): every series needs at least one time step"),
        ((5, 3), (0, 3), "y is empty (M = 0): every series needs at least one time step"),
    ],
)
def test_empty_series_are_named(front_end, x_shape, y_shape, message):
    with pytest.raises(ValueError, match="^softwave: " + re.escape(message)) as raised:
        _values_and_grads(front_end, np.zeros(x_shape), np.zeros(y_shape))
    assert "contiguous" not in str(raised.value)


def test_empty_inputs_of_the_other_functions_follow_the_rule():
    torch = _torch()
    import softwave.torch as swt

    # Pairwise: an empty side gives an empty matrix; the other side is still checked.
    assert swn.pairwise(np.zeros((0, 5, 2)), np.zeros((3, 4, 2))).shape == (0, 3)
    x = torch.zeros(2, 5, 2, requires_grad=True)
    matrix = swt.pairwise(x, torch.zeros(0, 4, 2))
    assert matrix.shape == (2, 0)
    matrix.sum().backward()
    assert torch.equal(x.grad, torch.zeros(2, 5, 2))
    with pytest.raises(ValueError, match=r"^softwave: y is empty \(M = 0\)"):
        swt.pairwise(torch.zeros(0, 5, 2), torch.zeros(3, 0, 2))
    # Cost tensors: (0, N, M) is an empty batch, N = 0 or M = 0 an error.
    values, gc = swn.soft_dtw_cost_value_and_grad(np.zeros((0, 3, 4)))
    assert values.shape == (0,) and gc.shape == (0, 3, 4)
    cost = torch.zeros(0, 3, 4, requires_grad=True)
    swt.soft_dtw_cost(cost).sum().backward()
    assert cost.grad.shape == (0, 3, 4)
    for shape, label in (((2, 0, 4), "N"), ((2, 3, 0), "M")):
        with pytest.raises(ValueError, match=rf"^softwave: cost is empty \({label} = 0\)"):
            swt.soft_dtw_cost(torch.zeros(shape))
        with pytest.raises(ValueError, match=rf"^softwave: cost is empty \({label} = 0\)"):
            swn.soft_dtw_cost(np.zeros(shape))
    # Alignments, hard DTW paths and a callable cost.
    assert swt.soft_dtw_alignment(torch.zeros(0, 3, 2), torch.zeros(0, 4, 2)).shape == (0, 3, 4)
    values, paths = swt.dtw(torch.zeros(0, 3, 2), torch.zeros(0, 4, 2))
    assert values.shape == (0,) and paths == []
    with pytest.raises(ValueError, match=r"^softwave: x is empty \(N = 0\)"):
        swt.soft_dtw(torch.zeros(2, 0, 2), torch.zeros(2, 4, 2), dist=_sq_cost)
    with pytest.raises(ValueError, match="different batch sizes"):
        swt.soft_dtw(torch.zeros(0, 3, 2), torch.zeros(2, 4, 2))


def test_jax_empty_inputs_are_refused_while_tracing():
    jax = _jax()
    import softwave.jax as swj

    assert swj.pairwise(np.zeros((0, 5, 2)), np.zeros((3, 4, 2))).shape == (0, 3)
    with pytest.raises(ValueError, match=r"^softwave: x is empty \(d = 0\)"):
        jax.jit(lambda a: swj.soft_dtw(a, np.zeros((1, 4, 0))))(np.zeros((1, 5, 0)))
    with pytest.raises(ValueError, match=r"^softwave: cost is empty \(M = 0\)"):
        swj.soft_dtw_cost(np.zeros((3, 0)))
    with pytest.raises(ValueError, match=r"^softwave: y is empty \(M = 0\)"):
        swj.pairwise(np.zeros((2, 5, 2)), np.zeros((3, 0, 2)))


# --- 4. barycenter arguments, by name, before any work ----------------------


@pytest.mark.parametrize(
    "kwargs, pattern",
    [
        (dict(length=0), "^softwave: length"),
        (dict(lengths=[0, 20, 20, 20]), r"^softwave: lengths must be between 1 and N = 20 \(got 0 for series 0\)"),
        (dict(lengths=[20, 20]), "^softwave: lengths must have one entry per series"),
        (dict(lengths=[5, 5, 5, 21]), "^softwave: lengths must be between 1 and N = 20"),
        (dict(X=[np.ones(5), np.zeros(0)]), r"^softwave: X\[1\] is empty \(N = 0\)"),
        (dict(X=np.zeros((0, 5, 1))), r"^softwave: X holds no series \(B = 0\)"),
        (dict(X=np.zeros((3, 0, 1))), r"^softwave: X is empty \(N = 0\)"),
        (dict(X=np.zeros((3, 5, 0))), r"^softwave: X is empty \(d = 0\)"),
        (dict(weights=[1.0, 1.0]), r"^softwave: weights must have one entry per series of X, shape \(4,\)"),
        (dict(weights=[[1.0, 1.0, 1.0, 1.0]]), "^softwave: weights must have one entry per series"),
        (dict(weights=[1.0, -1.0, 1.0, 1.0]), "^softwave: weights has 1 negative or non-finite"),
        (dict(weights=[1.0, np.nan, 1.0, 1.0]), "^softwave: weights has 1 negative or non-finite"),
        (dict(weights=[1.0, np.inf, 1.0, 1.0]), "^softwave: weights has 1 negative or non-finite"),
        (dict(weights=[0.0, 0.0, 0.0, 0.0]), "^softwave: weights are all zero"),
        (dict(weights=[1e308, 1e308, 1.0, 1.0]), "^softwave: weights sum to more than the largest float64"),
        (dict(init=np.full(20, np.nan)), r"^softwave: init has 20 non-finite value\(s\)"),
        (dict(init=np.full((20, 1), np.inf)), r"^softwave: init has 20 non-finite value\(s\)"),
        (dict(init=np.zeros((0, 1))), r"^softwave: init is empty \(L = 0\)"),
        (dict(init=np.zeros((15, 1)), length=10), "^softwave: init has L = 15 time steps but length = 10"),
    ],
)
def test_barycenter_arguments_are_named_before_any_work(rng, kwargs, pattern):
    X = kwargs.pop("X", rng.standard_normal((4, 20, 1)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no numpy warning (overflow, division) on the way
        with pytest.raises(ValueError, match=pattern):
            softwave.barycenter(X, 0.5, **kwargs)


def test_barycenter_weights_only_count_by_their_ratios(rng):
    X = rng.standard_normal((4, 12, 2))
    uniform = softwave.barycenter(X, 0.5)
    for init in ("mean", "medoid"):
        np.testing.assert_allclose(softwave.barycenter(X, 0.5, weights=[1e-6] * 4, init=init),
                                   softwave.barycenter(X, 0.5, init=init), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(softwave.barycenter(X, 0.5, weights=[3.0, 3.0, 3.0, 3.0]), uniform,
                               rtol=1e-12, atol=1e-12)
    scaled = softwave.barycenter(X, 0.5, weights=[2e-300, 1e-300, 1e-300, 5e-301])
    np.testing.assert_allclose(scaled, softwave.barycenter(X, 0.5, weights=[4.0, 2.0, 2.0, 1.0]), atol=1e-8)
    torch = _torch()
    weights = torch.full((4,), 1e-6, requires_grad=True)  # read as values
    z = softwave.barycenter(torch.tensor(X), 0.5, weights=weights)
    np.testing.assert_allclose(z.numpy(), uniform, rtol=1e-12, atol=1e-12)
