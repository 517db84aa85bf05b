"""softwave.ot against a float64 NumPy reference, GeomLoss, and finite
differences; NumPy arrays and torch tensors (CPU, and CUDA where built)."""

import math

import numpy as np
import pytest

import softwave
import softwave.ot as ot

torch = pytest.importorskip("torch")


def lse(a, axis):
    m = np.max(a, axis=axis, keepdims=True)
    return (m + np.log(np.sum(np.exp(a - m), axis=axis, keepdims=True))).squeeze(axis)


def reference(C, a, b, eps, rho_a=math.inf, rho_b=math.inf, iterations=20000):
    """Dense float64 log-domain Sinkhorn: plan and dual value."""
    f, g = np.zeros(len(a)), np.zeros(len(b))
    la, lb = 1 / (1 + eps / rho_a), 1 / (1 + eps / rho_b)
    for _ in range(iterations):
        f_new = -la * eps * lse((g[None, :] - C) / eps + np.log(b)[None, :], 1)
        g_new = -lb * eps * lse((f_new[:, None] - C) / eps + np.log(a)[:, None], 0)
        done = max(np.abs(f_new - f).max(), np.abs(g_new - g).max()) < 1e-14 * (1 + np.abs(f_new).max())
        f, g = f_new, g_new
        if done:
            break
    plan = a[:, None] * b[None, :] * np.exp((f[:, None] + g[None, :] - C) / eps)
    phi = lambda p, rho: p if math.isinf(rho) else -rho * np.expm1(-p / rho)
    value = a @ phi(f, rho_a) + b @ phi(g, rho_b) - eps * (plan.sum() - a.sum() * b.sum())
    return plan, value


def clouds(rng, n, k, d, batch=None, dtype=np.float64):
    shape = (() if batch is None else (batch,))
    x = rng.standard_normal(shape + (n, d)).astype(dtype)
    y = (rng.standard_normal(shape + (k, d)) + 0.5).astype(dtype)
    a = rng.uniform(0.2, 1, shape + (n,))
    b = rng.uniform(0.2, 1, shape + (k,))
    a = (a / a.sum(-1, keepdims=True)).astype(dtype)
    b = (b / b.sum(-1, keepdims=True)).astype(dtype)
    return x, y, a, b


def sqdist(x, y):
    return ((x[..., :, None, :] - y[..., None, :, :]) ** 2).sum(-1)


@pytest.mark.parametrize("n,k,d", [(1, 1, 1), (13, 7, 2), (60, 45, 3), (30, 200, 5)])
def test_numpy_matches_reference_in_every_form(n, k, d, rng):
    x, y, a, b = clouds(rng, n, k, d)
    eps = 0.3 * d
    C = sqdist(x, y)
    plan, value = reference(C, a, b, eps)
    u, v = (x**2).sum(-1), (y**2).sum(-1)
    forms = {
        "points": dict(x=x, y=y),
        "matrix": dict(cost_matrix=C),
        "factors": dict(factors=(u, v, 2 * x, y)),
    }
    for name, form in forms.items():
        r = ot.sinkhorn(a=a, b=b, epsilon=eps, tolerance=1e-12, max_iterations=50000, **form)
        assert r.converged == 1, name
        assert r.value == pytest.approx(value, rel=1e-8, abs=1e-10), name
        np.testing.assert_allclose(r.plan(), plan, rtol=0, atol=1e-9 * plan.max(), err_msg=name)
        assert r.marginal_error.shape == (2,)
        assert r.marginal_error.max() < 1e-10
        assert r.transport_cost == pytest.approx((plan * C).sum(), rel=1e-8)


def test_batch_of_problems_and_float32(rng):
    x, y, a, b = clouds(rng, 40, 30, 2, batch=3)
    r = ot.sinkhorn(x, y, a, b, epsilon=0.2, tolerance=1e-12, max_iterations=50000)
    assert r.value.shape == (3,) and r.f.shape == (3, 40) and r.g.shape == (3, 30)
    for q in range(3):
        _, value = reference(sqdist(x[q], y[q]), a[q], b[q], 0.2)
        assert r.value[q] == pytest.approx(value, rel=1e-8)
    # Some draws need over 10,000 iterations to reach 1e-5 (in float64 too).
    r32 = ot.sinkhorn(x.astype(np.float32), y.astype(np.float32), a.astype(np.float32),
                      b.astype(np.float32), epsilon=0.2, tolerance=1e-5, max_iterations=50000)
    assert r32.value.dtype == np.float32
    np.testing.assert_allclose(r32.value, r.value, rtol=1e-4)
    # Each stopped on its measured residual; recomputed from the float32
    # potentials it may lie a rounding error above the tolerance (converged
    # then says 0).
    assert np.all(r32.iterations < 50000)
    assert np.all(r32.marginal_error <= 2e-5)


def test_unbalanced_matches_reference(rng):
    x, y, a, b = clouds(rng, 25, 20, 2)
    b = b * 1.6
    for rho_a, rho_b in [(0.5, 2.0), (math.inf, 1.0)]:
        plan, value = reference(sqdist(x, y), a, b, 0.1, rho_a, rho_b)
        r = ot.sinkhorn(x, y, a, b, epsilon=0.1, rho_a=rho_a, rho_b=rho_b, tolerance=1e-12,
                        max_iterations=50000)
        assert r.value == pytest.approx(value, rel=1e-8)
        np.testing.assert_allclose(r.plan(), plan, atol=1e-9 * plan.max())


def test_plan_queries_without_the_plan(rng):
    x, y, a, b = clouds(rng, 20, 50, 3)
    r = ot.sinkhorn(x, y, a, b, epsilon=0.1, tolerance=1e-12, max_iterations=50000)
    plan = r.plan()
    v = rng.standard_normal((50, 4))
    np.testing.assert_allclose(r.apply(v), plan @ v, atol=1e-12)
    np.testing.assert_allclose(r.apply(v[:, 0]), plan @ v[:, 0], atol=1e-12)
    u = rng.standard_normal((20, 2))
    np.testing.assert_allclose(r.apply_transpose(u), plan.T @ u, atol=1e-12)
    np.testing.assert_array_equal(r.row_argmax(), plan.argmax(1))
    s1, s2 = r.sample_rows(8, seed=3), r.sample_rows(8, seed=3)
    assert s1.shape == (20, 8) and s1.dtype == np.int32
    np.testing.assert_array_equal(s1, s2)
    assert not np.array_equal(s1, r.sample_rows(8, seed=4))


def test_warm_start_and_relative_epsilon(rng):
    x, y, a, b = clouds(rng, 50, 40, 2)
    cold = ot.sinkhorn(x, y, a, b, epsilon=0.01, epsilon_relative=True, tolerance=1e-10,
                       max_iterations=50000, check_every=1)
    _, value = reference(sqdist(x, y), a, b, 0.01 * sqdist(x, y).max())
    assert cold.value == pytest.approx(value, rel=1e-7)
    y2 = y + 1e-3 * rng.standard_normal(y.shape)
    again = ot.sinkhorn(x, y2, a, b, epsilon=0.01, epsilon_relative=True, tolerance=1e-10,
                        max_iterations=50000, check_every=1)
    warm = ot.sinkhorn(x, y2, a, b, epsilon=0.01, epsilon_relative=True, tolerance=1e-10,
                       max_iterations=50000, check_every=1, potentials=(cold.f, cold.g))
    assert warm.iterations < again.iterations
    assert warm.value == pytest.approx(again.value, rel=1e-8)


def test_torch_autograd_matches_finite_differences(rng):
    x, y, a, b = (torch.tensor(t) for t in clouds(rng, 6, 5, 2))
    x.requires_grad_(True)
    y.requires_grad_(True)
    opts = dict(epsilon=0.2, tolerance=1e-13, max_iterations=100000)
    r = ot.sinkhorn(x, y, a, b, **opts)
    (gx, gy) = torch.autograd.grad(3 * r.value, (x, y))
    h = 1e-6
    for t, grad in ((x, gx), (y, gy)):
        fd = torch.zeros_like(t)
        base = t.detach().clone()
        for idx in np.ndindex(*t.shape):
            for sign in (1, -1):
                moved = base.clone()
                moved[idx] += sign * h
                args = (moved, y.detach()) if t is x else (x.detach(), moved)
                fd[idx] += sign * 3 * ot.sinkhorn(*args, a, b, **opts).value / (2 * h)
        torch.testing.assert_close(grad, fd, rtol=1e-5, atol=1e-7)
    # A cost matrix's gradient is the plan.
    C = torch.cdist(x.detach(), y.detach()) ** 2
    C.requires_grad_(True)
    rc = ot.sinkhorn(cost_matrix=C, a=a, b=b, **opts)
    (gc,) = torch.autograd.grad(rc.value, C)
    torch.testing.assert_close(gc, torch.as_tensor(rc.plan()), rtol=1e-10, atol=1e-12)


def test_divergence_is_zero_on_equal_inputs_and_differentiable(rng):
    x, y, a, b = (torch.tensor(t) for t in clouds(rng, 7, 6, 2, batch=2))
    # Points in the unit square: OT(x, x) by alternating updates (the first
    # term) converges slowly where costs reach hundreds of ε (N(0, 1) points
    # at ε = 0.1), and the test asks for 1e-12.
    x, y = torch.rand_like(x), torch.rand_like(y)
    opts = dict(epsilon=0.1, tolerance=1e-12, max_iterations=20000)
    assert torch.all(ot.sinkhorn_divergence(x, y, a, b, **opts) > 0)
    same, converged = ot.sinkhorn_divergence(x, x, a, a, return_converged=True, **opts)
    torch.testing.assert_close(same, torch.zeros(2, dtype=torch.float64), atol=1e-10, rtol=0)
    assert torch.equal(converged, torch.ones(2, dtype=torch.int32))
    # Two iterations cannot meet 1e-12: the flag says so.
    _, short = ot.sinkhorn_divergence(x, y, a, b, return_converged=True,
                                      **dict(opts, max_iterations=2))
    assert torch.equal(short, torch.zeros(2, dtype=torch.int32))
    x.requires_grad_(True)
    w = torch.tensor([0.5, -2.0], dtype=torch.float64)
    (gx,) = torch.autograd.grad((w * ot.sinkhorn_divergence(x, y, a, b, **opts)).sum(), x)
    h, fd = 1e-6, torch.zeros_like(x)
    for idx in np.ndindex(*x.shape):
        for sign in (1, -1):
            moved = x.detach().clone()
            moved[idx] += sign * h
            fd[idx] += sign * (w * ot.sinkhorn_divergence(moved, y, a, b, **opts)).sum() / (2 * h)
    torch.testing.assert_close(gx, fd, rtol=1e-5, atol=1e-7)


def test_samples_loss_matches_geomloss(rng):
    geomloss = pytest.importorskip("geomloss", reason="GeomLoss is not installed here")
    x, y, a, b = (torch.tensor(t) for t in clouds(rng, 60, 50, 3))
    for debias in (True, False):
        for reach in (None, 1.5):
            ours = ot.SamplesLoss("sinkhorn", p=2, blur=0.3, reach=reach, debias=debias, tolerance=1e-12)
            # GeomLoss stops at the end of its ε schedule (no convergence
            # test): a slow schedule (scaling 0.999) ends near convergence.
            theirs = geomloss.SamplesLoss("sinkhorn", p=2, blur=0.3, reach=reach, scaling=0.999,
                                          debias=debias, backend="tensorized")
            assert ours(a, x, b, y).item() == pytest.approx(theirs(a, x, b, y).item(), rel=2e-4), (debias, reach)
    loss = ot.SamplesLoss("sinkhorn", p=2, blur=0.3)
    assert loss(x, y).shape == ()


def test_bad_input_names_the_argument(rng):
    x, y, a, b = clouds(rng, 5, 4, 2)
    with pytest.raises(ValueError, match="epsilon"):
        ot.sinkhorn(x, y, epsilon=0)
    with pytest.raises(ValueError, match="y"):
        ot.sinkhorn(x, y[:, :1])
    with pytest.raises(ValueError, match=r"\ba\b"):
        ot.sinkhorn(x, y, a[:3], b)
    with pytest.raises(ValueError, match=r"\bb\b"):
        ot.sinkhorn(x, y, a, -b)
    with pytest.raises(ValueError, match="x"):
        ot.sinkhorn(np.full_like(x, np.nan), y)
    with pytest.raises(ValueError, match="cost"):
        ot.sinkhorn(x, y, cost="cosine")
    with pytest.raises(ValueError, match="exactly one"):
        ot.sinkhorn(x, y, cost_matrix=sqdist(x, y))
    with pytest.raises(ValueError, match="rho_a"):
        ot.sinkhorn(x, y, rho_a=-1)


@pytest.mark.skipif(not (softwave.has_cuda() and torch.cuda.is_available()), reason="no CUDA build or GPU")
def test_cuda_matches_cpu(rng):
    for dtype in (torch.float64, torch.float32):
        x, y, a, b = (torch.tensor(t, dtype=dtype) for t in clouds(rng, 300, 257, 3, batch=2))
        opts = dict(epsilon=0.1, tolerance=1e-5, max_iterations=20000)
        cpu = ot.sinkhorn(x, y, a, b, **opts)
        gpu = ot.sinkhorn(*(t.cuda() for t in (x, y, a, b)), check_inputs=True, **opts)
        torch.testing.assert_close(gpu.value.cpu(), cpu.value, rtol=1e-5, atol=1e-6)
        assert torch.all(cpu.converged == 1)
        assert torch.all(gpu.converged.cpu() == 1)
        np.testing.assert_array_equal(gpu.row_argmax().cpu().numpy(), cpu.row_argmax().numpy())
        xg = x.cuda().requires_grad_(True)
        ot.sinkhorn(xg, y.cuda(), a.cuda(), b.cuda(), **opts).value.sum().backward()
        xc = x.clone().requires_grad_(True)
        ot.sinkhorn(xc, y, a, b, **opts).value.sum().backward()
        torch.testing.assert_close(xg.grad.cpu(), xc.grad, rtol=1e-4, atol=1e-6)


@pytest.mark.skipif(not (softwave.has_cuda() and torch.cuda.is_available()), reason="no CUDA build or GPU")
@pytest.mark.parametrize("d", [3, 24, 64])
def test_cuda_specialised_updates_match_portable(d, rng):
    """The CUDA updates (exact FP32 costs up to d = 16, TF32 tensor-core
    products above) give the portable kernels' answer after the same
    iterations: to float32 rounding, and to the accuracy of 10-bit-mantissa
    tensor-core products above d = 16. With ε annealed too: the tensor-core
    updates keep each side's records while ε stays, and form them again
    each time it falls."""
    x, y, a, b = (torch.tensor(t, dtype=torch.float32, device="cuda")
                  for t in clouds(rng, 700, 600, d, batch=2))
    for scaling in (0.0, 0.7):
        opts = dict(epsilon=0.05 * d, epsilon_scaling=scaling, tolerance=0.0, max_iterations=200)
        portable = ot.sinkhorn(x, y, a, b, kernel="portable", **opts)
        fast = ot.sinkhorn(x, y, a, b, kernel="specialised", **opts)
        rtol = 1e-4 if d <= 16 else 1e-2
        torch.testing.assert_close(fast.value, portable.value, rtol=rtol, atol=1e-5)
        torch.testing.assert_close(fast.transport_cost, portable.transport_cost, rtol=rtol, atol=1e-5)
        assert torch.all(fast.marginal_error < (1e-3 if d <= 16 else 5e-2))
    with pytest.raises(ValueError, match="kernel"):
        ot.sinkhorn(x.double(), y.double(), kernel="specialised", max_iterations=1)


@pytest.mark.skipif(not (softwave.has_cuda() and torch.cuda.is_available()), reason="no CUDA build or GPU")
@pytest.mark.parametrize("rank", [5, 40, 100])
def test_cuda_low_rank_updates_match_portable(rank, rng):
    """Low-rank costs (exact FP32 products at every rank, rounded up to 16
    above 16) give the portable kernels' answer after the same iterations,
    with and without the own terms u, v."""
    p, q = (torch.tensor(rng.standard_normal((2, n, rank)) / np.sqrt(rank), dtype=torch.float32,
                         device="cuda") for n in (700, 600))
    u, v = (torch.tensor(rng.uniform(0, 1, (2, n)), dtype=torch.float32, device="cuda")
            for n in (700, 600))
    opts = dict(epsilon=0.05, tolerance=0.0, max_iterations=100)
    for factors in ((u, v, p, q), (None, None, p, q)):
        portable = ot.sinkhorn(factors=factors, kernel="portable", **opts)
        fast = ot.sinkhorn(factors=factors, kernel="specialised", **opts)
        torch.testing.assert_close(fast.value, portable.value, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(fast.transport_cost, portable.transport_cost, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(fast.f, portable.f, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(fast.marginal_error, portable.marginal_error, rtol=1e-3, atol=1e-5)
