"""softwave.torch: autograd (gradcheck in float64), the SoftDTW module's
peer-compatible arguments, unbatched inputs and sdtw-cuda-torch's entry
points (softdtw, softdtw_barycenter), agreement with the NumPy front end and
the float64 reference, and, where this build has CUDA, CUDA tensors on the
current and on non-default streams."""

import inspect
import sys

import numpy as np
import pytest
import reference as ref

torch = pytest.importorskip("torch")

import softwave  # noqa: E402
import softwave.numpy as swn  # noqa: E402
import softwave.torch as swt  # noqa: E402
from softwave.torch import SoftDTW  # noqa: E402

DEVICES = ["cpu"] + (["cuda"] if softwave.has_cuda() and torch.cuda.is_available() else [])
cuda_only = pytest.mark.skipif("cuda" not in DEVICES, reason="needs a CUDA build of softwave and a GPU")


def tensors(rng, *shapes, dtype=torch.float64, device="cpu", requires_grad=True):
    return [torch.tensor(rng.standard_normal(s), dtype=dtype, device=device, requires_grad=requires_grad)
            for s in shapes]


@pytest.mark.parametrize("gamma", [1.0, 0.1])
@pytest.mark.parametrize("normalize", [False, True])
@pytest.mark.parametrize("dist", ["sqeuclidean", "l1", "cosine"])
def test_gradcheck_series(rng, gamma, normalize, dist):
    if dist == "l1":  # |·| has kinks; keep x and y apart so the test sees a smooth region
        x, y = tensors(rng, (2, 5, 2), (2, 7, 2))
        with torch.no_grad():
            y += 0.1 * torch.sign(y)
    else:
        x, y = tensors(rng, (2, 5, 2), (2, 7, 2))
    function = swt.soft_dtw_divergence if normalize else swt.soft_dtw
    assert torch.autograd.gradcheck(lambda a, b: function(a, b, gamma, dist=dist), (x, y), eps=1e-6, atol=1e-5)


def test_gradcheck_cost_tensor_pairwise_and_lengths(rng):
    (C,) = tensors(rng, (2, 4, 6))
    assert torch.autograd.gradcheck(lambda c: swt.soft_dtw_cost(c.abs(), 0.5), (C,), eps=1e-6, atol=1e-5)
    x, y = tensors(rng, (3, 5, 2), (2, 4, 2))
    for divergence in (False, True):
        assert torch.autograd.gradcheck(lambda a, b: swt.pairwise(a, b, 0.5, divergence=divergence), (x, y),
                                        eps=1e-6, atol=1e-5)
    x, y = tensors(rng, (3, 6, 1), (3, 5, 1))
    assert torch.autograd.gradcheck(lambda a, b: swt.soft_dtw(a, b, lengths_x=[6, 3, 1], lengths_y=[2, 5, 4]),
                                    (x, y), eps=1e-6, atol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_values_and_gradients_match_numpy_and_reference(rng, device, dtype):
    x, y = tensors(rng, (4, 20, 3), (4, 17, 3), dtype=dtype, device=device)
    g = torch.tensor([1.0, -2.0, 0.5, 3.0], dtype=dtype, device=device)
    values = swt.soft_dtw(x, y, 0.1)
    (values * g).sum().backward()
    xn, yn = x.detach().cpu().double().numpy(), y.detach().cpu().double().numpy()
    v64, gx64, gy64 = swn.soft_dtw_value_and_grad(xn, yn, 0.1, grad_output=g.cpu().double().numpy())
    tol = 1e-10 if dtype == torch.float64 else 2e-5
    assert values.dtype == dtype and values.device.type == device
    np.testing.assert_allclose(values.detach().cpu().double().numpy(), v64, rtol=tol)
    np.testing.assert_allclose(x.grad.cpu().double().numpy(), gx64, rtol=tol * 10, atol=tol * 10)
    np.testing.assert_allclose(y.grad.cpu().double().numpy(), gy64, rtol=tol * 10, atol=tol * 10)
    np.testing.assert_allclose(v64[:2], [ref.sdtw(xn[b], yn[b], 0.1) for b in range(2)], rtol=1e-10)


def test_module_accepts_both_peers_signatures(rng):
    x, y = tensors(rng, (3, 9, 2), (3, 9, 2))
    expected = swt.soft_dtw(x, y, 0.5)
    torch.testing.assert_close(SoftDTW(gamma=0.5, bandwidth=None, normalize=False, dist="sqeuclidean")(x, y), expected)
    torch.testing.assert_close(SoftDTW(False, gamma=0.5)(x, y), expected)  # pytorch-softdtw-cuda: use_cuda first
    torch.testing.assert_close(SoftDTW(use_cuda=True, gamma=0.5, fused=True)(x, y), expected)
    # normalize=True is the divergence, also for N != M (the peers need N == M).
    x2, y2 = tensors(rng, (3, 9, 2), (3, 14, 2))
    torch.testing.assert_close(SoftDTW(gamma=0.5, normalize=True)(x2, y2), swt.soft_dtw_divergence(x2, y2, 0.5))
    # bandwidth as the peers read it: 0 is no band.
    torch.testing.assert_close(SoftDTW(gamma=0.5, bandwidth=0)(x, y), expected)
    banded = SoftDTW(gamma=0.5, bandwidth=2)(x, y).detach().numpy()
    xn, yn = x.detach().numpy(), y.detach().numpy()
    np.testing.assert_allclose(banded, [ref.sdtw(xn[b], yn[b], 0.5, band=2) for b in range(3)], rtol=1e-10)
    with pytest.raises(TypeError, match="use_cuda"):
        SoftDTW(0.5)
    with pytest.raises(ValueError, match=r"x must be \(B, N, d\), \(N, d\) or \(N,\)"):
        SoftDTW()(x[None], y)


def test_dist_func_goes_through_the_cost_tensor(rng):
    x, y = tensors(rng, (2, 6, 3), (2, 8, 3))

    def manhattan(a, b):
        return (a[:, :, None, :] - b[:, None, :, :]).abs().sum(-1)

    custom = SoftDTW(gamma=0.3, dist_func=manhattan)(x, y)
    custom.sum().backward()
    gx_custom = x.grad.clone()
    x.grad = None
    builtin = swt.soft_dtw(x, y, 0.3, dist="l1")
    builtin.sum().backward()
    torch.testing.assert_close(custom, builtin)
    torch.testing.assert_close(gx_custom, x.grad)
    div = SoftDTW(gamma=0.3, dist_func=manhattan, normalize=True)(x, y)
    torch.testing.assert_close(div, swt.soft_dtw_divergence(x, y, 0.3, dist="l1"))


def test_alignment_dtw_and_half_precision(rng):
    x, y = tensors(rng, (2, 7, 2), (2, 5, 2), requires_grad=False)
    E = swt.soft_dtw_alignment(x, y, 0.2)
    np.testing.assert_allclose(E.numpy(), swn.soft_dtw_alignment(x.numpy(), y.numpy(), 0.2))
    values, paths = swt.dtw(x, y)
    expected_values, expected_paths = swn.dtw(x.numpy(), y.numpy())
    np.testing.assert_allclose(values.numpy(), expected_values)
    for p, q in zip(paths, expected_paths):
        np.testing.assert_array_equal(p.numpy(), q)
    xh = x.to(torch.bfloat16).requires_grad_()
    yh = y.to(torch.bfloat16)
    v = swt.soft_dtw(xh, yh, 0.5)
    v.sum().backward()
    assert v.dtype == torch.float32 and xh.grad.dtype == torch.bfloat16
    ref_v = swt.soft_dtw(xh.detach().float(), yh.float(), 0.5)
    torch.testing.assert_close(v, ref_v)


def test_errors(rng):
    x, y = tensors(rng, (2, 4, 1), (2, 4, 1))
    with pytest.raises(TypeError, match="dtype|float64"):
        swt.soft_dtw(x, y.float())
    with pytest.raises(TypeError, match="floating-point"):
        swt.soft_dtw(x, torch.zeros(2, 4, 1, dtype=torch.int64))
    with pytest.raises(ValueError, match="y"):
        swt.soft_dtw(x, torch.zeros(3, 4, 1, dtype=torch.float64))
    with pytest.raises(ValueError, match="gamma"):
        swt.soft_dtw(x, y, -1.0)
    if "cuda" in DEVICES:
        with pytest.raises(ValueError, match="device"):
            swt.soft_dtw(x, y.cuda())
    elif torch.cuda.is_available():
        with pytest.raises(ValueError, match="CPU only"):
            swt.soft_dtw(x.cuda(), y.cuda())


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_check_inputs(rng, device, dtype):
    """Checked, a NaN or an out-of-range length is a ValueError naming it;
    unchecked (the default on CUDA, where checking waits for the stream),
    lengths are clamped into range and a NaN makes only its own pair's value
    non-finite, with nothing raised and nothing hanging."""
    x, y = tensors(rng, (3, 40, 2), (3, 33, 2), dtype=dtype, device=device, requires_grad=False)
    default_checks = device == "cpu"
    bad_lengths = torch.tensor([41, 0, 7])
    clamped = torch.tensor([40, 1, 7])
    with pytest.raises(ValueError, match=r"lengths\.x\[0\] = 41"):
        swt.soft_dtw(x, y, lengths_x=bad_lengths, check_inputs=True)
    unchecked = swt.soft_dtw(x, y, lengths_x=bad_lengths, check_inputs=False)
    torch.testing.assert_close(unchecked, swt.soft_dtw(x, y, lengths_x=clamped))
    xn = x.clone()
    xn[1, 5, 0] = float("nan")
    with pytest.raises(ValueError, match="x has 1 non-finite"):
        SoftDTW(gamma=0.5, check_inputs=True)(xn, y)
    if default_checks:
        with pytest.raises(ValueError, match="non-finite"):
            SoftDTW(gamma=0.5)(xn, y)
    xg = xn.clone().requires_grad_()
    for module in (SoftDTW(gamma=0.5, check_inputs=False), SoftDTW(gamma=0.5, normalize=True, check_inputs=False)):
        values = module(xg, y)
        values.sum().backward()
        finite = torch.isfinite(values).tolist()
        assert finite == [True, False, True]
        torch.testing.assert_close(values[0], module(x[:1], y[:1])[0], check_device=False)
        xg.grad = None
    with pytest.raises(TypeError, match="check_inputs"):
        swt.soft_dtw(x, y, check_inputs="yes")


@cuda_only
def test_cuda_on_a_non_default_stream(rng):
    x, y = tensors(rng, (8, 300, 16), (8, 280, 16), dtype=torch.float32, device="cuda")
    expected = swt.soft_dtw(x, y, 0.1)
    expected.sum().backward()
    gx_expected = x.grad.clone()
    x.grad = None
    stream = torch.cuda.Stream()
    # Inputs made on the side stream right before the call: correct results
    # need the work queued on that stream, behind them.
    with torch.cuda.stream(stream):
        xs = (x.detach() * 1.0).requires_grad_()
        ys = y.detach() * 1.0
        values = swt.soft_dtw(xs, ys, 0.1)
        values.sum().backward()
    stream.synchronize()
    torch.testing.assert_close(values, expected)
    torch.testing.assert_close(xs.grad, gx_expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dist", ["sqeuclidean", "l1", "cosine"])
@pytest.mark.parametrize("d", [1, 5])
@pytest.mark.parametrize("bandwidth", [None, 3])
def test_pair_kernel_gradients_on_cpu(rng, dist, d, bandwidth):
    """Many short pairs on the CPU (the pair-parallel backward, which
    `automatic` takes there): the same values and gradients as the tiled
    wavefront, with ragged lengths, and the float64 reference's."""
    B = 40
    x, y = tensors(rng, (B, 23, d), (B, 17, d))
    lengths_x = torch.tensor(rng.integers(10, 24, B), dtype=torch.int32)
    lengths_y = torch.tensor(rng.integers(8, 18, B), dtype=torch.int32)
    results = {}
    for kernel in ("pairs", "automatic", "portable"):
        xk, yk = x.detach().clone().requires_grad_(), y.detach().clone().requires_grad_()
        v = swt.soft_dtw(xk, yk, 0.5, bandwidth=bandwidth, dist=dist, lengths_x=lengths_x,
                         lengths_y=lengths_y, kernel=kernel)
        (v * torch.linspace(-1, 2, B, dtype=torch.float64)).sum().backward()
        results[kernel] = (v.detach(), xk.grad, yk.grad)
    # Univariate cosine gradients are zero but for rounding (x/|x| = ±1), which
    # the two paths leave differently: an absolute tolerance above it.
    atol = 1e-10 if dist == "cosine" else 1e-12
    for kernel in ("pairs", "automatic"):
        for got, want in zip(results[kernel], results["portable"]):
            torch.testing.assert_close(got, want, rtol=1e-10, atol=atol)
    b = 3
    n, m = int(lengths_x[b]), int(lengths_y[b])
    expected = ref.sdtw(x[b, :n].detach().numpy(), y[b, :m].detach().numpy(), 0.5, dist,
                        band=bandwidth)
    assert abs(float(results["pairs"][0][b]) - expected) <= 1e-10 * max(1.0, abs(expected))


@cuda_only
@pytest.mark.parametrize("kernel", ["automatic", "portable", "specialised"])
def test_cuda_kernels_agree_with_cpu(rng, kernel):
    x, y = tensors(rng, (4, 100, 8), (4, 90, 8), dtype=torch.float32, requires_grad=False)
    xc, yc = x.cuda().requires_grad_(), y.cuda().requires_grad_()
    v = swt.soft_dtw(xc, yc, 0.1, kernel=kernel)
    v.sum().backward()
    v64, gx64, gy64 = swn.soft_dtw_value_and_grad(x.double().numpy(), y.double().numpy(), 0.1)
    np.testing.assert_allclose(v.detach().cpu().double().numpy(), v64, rtol=1e-5)
    np.testing.assert_allclose(xc.grad.cpu().double().numpy(), gx64, rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(yc.grad.cpu().double().numpy(), gy64, rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("half", [torch.bfloat16, torch.float16])
def test_half_inputs_are_read_natively(rng, device, half):
    """16-bit tensors go in as they are: values float32, gradients in the
    input dtype within one rounding of the float64 result on the same
    (rounded) numbers; the cost tensor, pairwise (with its backward) and the
    divergence take them too."""
    x, y = tensors(rng, (3, 40, 16), (3, 33, 16), dtype=half, device=device)
    v = swt.soft_dtw(x, y, 0.1)
    (v * torch.tensor([1.0, -0.5, 2.0], device=device)).sum().backward()
    assert v.dtype == torch.float32 and x.grad.dtype == half and y.grad.dtype == half
    x64, y64 = x.detach().double().cpu().numpy(), y.detach().double().cpu().numpy()
    v64, gx64, gy64 = swn.soft_dtw_value_and_grad(x64, y64, 0.1, grad_output=np.array([1.0, -0.5, 2.0]))
    np.testing.assert_allclose(v.detach().cpu().numpy(), v64, rtol=1e-5)
    # Half an ulp of the largest entry: 2^-8 (bfloat16) or 2^-11 (float16) relative.
    ulp = 2.0**-8 if half == torch.bfloat16 else 2.0**-11
    for got, want in ((x.grad, gx64), (y.grad, gy64)):
        got = got.double().cpu().numpy()
        assert np.max(np.abs(got - want)) <= 2.5 * ulp * np.max(np.abs(want))

    cost = torch.cdist(x.detach().float(), y.detach().float()).pow(2).to(half).requires_grad_()
    vc = swt.soft_dtw_cost(cost, 0.1)
    vc.sum().backward()
    assert vc.dtype == torch.float32 and cost.grad.dtype == half
    vc32 = swt.soft_dtw_cost(cost.detach().float(), 0.1)
    torch.testing.assert_close(vc, vc32, rtol=1e-5, atol=1e-5)

    xs, ys = x.detach().requires_grad_(), y.detach().requires_grad_()
    matrix = swt.pairwise(xs, ys, 0.1)
    matrix.sum().backward()
    assert matrix.dtype == torch.float32 and xs.grad.dtype == half
    m32 = swt.pairwise(xs.detach().float(), ys.detach().float(), 0.1)
    torch.testing.assert_close(matrix, m32, rtol=1e-5, atol=1e-4)
    xf = xs.detach().float().requires_grad_()
    swt.pairwise(xf, ys.detach().float(), 0.1).sum().backward()
    torch.testing.assert_close(xs.grad.float(), xf.grad, rtol=2 * ulp, atol=2 * ulp * xf.grad.abs().max().item())

    d = swt.soft_dtw_divergence(x.detach(), y.detach(), 0.1)
    assert d.dtype == torch.float32
    torch.testing.assert_close(d, swt.soft_dtw_divergence(x.detach().float(), y.detach().float(), 0.1),
                               rtol=1e-5, atol=1e-4)


def unbatched(rng, layout, n, m, device="cpu"):
    """One pair of series as (N, d) and (M, d), or (N,) and (M,)."""
    shapes = ((n, 3), (m, 3)) if layout == "pair" else ((n,), (m,))
    return tensors(rng, *shapes, device=device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("layout", ["pair", "series"])
def test_unbatched_inputs(rng, device, layout):
    """(N, d) and (N,) series: SoftDTW and softdtw give (1,) as sdtw-cuda-torch
    does, the functions a scalar; values are those of the batch of one and of
    the float64 reference, and gradients come back in the inputs' shapes."""
    x, y = unbatched(rng, layout, 9, 6, device)
    xb = x.detach().reshape(1, 9, -1).requires_grad_()
    yb = y.detach().reshape(1, 6, -1).requires_grad_()
    xn, yn = x.detach().cpu().numpy(), y.detach().cpu().numpy()
    for normalize, reference in ((False, ref.sdtw), (True, ref.divergence)):
        batched = SoftDTW(gamma=0.3, normalize=normalize)(xb, yb)
        batched.sum().backward()
        function = swt.soft_dtw_divergence if normalize else swt.soft_dtw
        for call, shape in ((lambda: SoftDTW(gamma=0.3, normalize=normalize)(x, y), (1,)),
                            (lambda: swt.softdtw(x, y, gamma=0.3, normalize=normalize), (1,)),
                            (lambda: function(x, y, 0.3), ())):
            values = call()
            values.sum().backward()
            assert values.shape == shape
            torch.testing.assert_close(values.reshape(1), batched)
            assert x.grad.shape == x.shape and y.grad.shape == y.shape
            torch.testing.assert_close(x.grad, xb.grad.reshape(x.shape))
            torch.testing.assert_close(y.grad, yb.grad.reshape(y.shape))
            x.grad = y.grad = None
        np.testing.assert_allclose(batched.item(), reference(xn, yn, 0.3), rtol=1e-10)
        xb.grad = yb.grad = None
    # The gradient of the unbatched value against central differences.
    swt.soft_dtw(x, y, 0.3).backward()
    expected = ref.numerical_grad(lambda a: ref.sdtw(a, yn, 0.3), xn)
    np.testing.assert_allclose(x.grad.cpu().numpy(), expected, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("layout", ["pair", "series"])
def test_unbatched_alignment_dtw_cost_and_dist_func(rng, layout):
    x, y = unbatched(rng, layout, 8, 5)
    xb, yb = x.detach().reshape(1, 8, -1), y.detach().reshape(1, 5, -1)
    E = swt.soft_dtw_alignment(x, y, 0.2)
    assert E.shape == (8, 5)
    torch.testing.assert_close(E, swt.soft_dtw_alignment(xb, yb, 0.2)[0])
    value, path = swt.dtw(x, y)
    values, paths = swt.dtw(xb, yb)
    assert value.shape == () and path.shape[1] == 2
    torch.testing.assert_close(value, values[0])
    torch.testing.assert_close(path, paths[0])
    assert swt.dtw(x, y, return_path=False).shape == ()
    cost = torch.cdist(xb[0], yb[0]).pow(2).requires_grad_()
    torch.testing.assert_close(swt.soft_dtw_cost(cost, 0.2), swt.soft_dtw(x, y, 0.2))

    def manhattan(a, b):
        return (a[:, :, None, :] - b[:, None, :, :]).abs().sum(-1)

    custom = SoftDTW(gamma=0.2, dist_func=manhattan)(x, y)
    custom.sum().backward()
    assert custom.shape == (1,) and x.grad.shape == x.shape
    gx = x.grad.clone()
    x.grad = None
    builtin = swt.soft_dtw(x, y, 0.2, dist="l1")
    builtin.backward()
    torch.testing.assert_close(custom[0], builtin)
    torch.testing.assert_close(gx, x.grad)


def test_unbatched_layouts_and_errors(rng):
    x, y = tensors(rng, (9, 2), (3, 6, 2))
    # As in sdtw-cuda-torch, SoftDTW reads each input on its own: (N, d)
    # against a batch of one is one pair, against a larger batch an error.
    torch.testing.assert_close(SoftDTW(gamma=0.5)(x, y[:1]), swt.soft_dtw(x[None], y[:1], 0.5))
    with pytest.raises(ValueError, match="batch sizes"):
        SoftDTW(gamma=0.5)(x, y)
    # The functions take one layout for both inputs.
    with pytest.raises(ValueError, match="x and y"):
        swt.soft_dtw(x, y)
    with pytest.raises(ValueError, match="y must be"):
        SoftDTW()(x, y[None])
    with pytest.raises(TypeError, match="y must be a torch.Tensor"):
        SoftDTW()(x, [[0.0, 1.0]])
    with pytest.raises(TypeError, match="x must be a torch.Tensor"):
        swt.softdtw(x.tolist(), x)
    with pytest.raises(ValueError, match=r"dist\(x, y\) must return"):
        SoftDTW(dist_func=lambda a, b: a.sum(-1))(x, x)


def test_softdtw_takes_sdtw_cuda_torch_arguments(rng):
    """softdtw and SoftDTW with sdtw-cuda-torch's keywords and defaults give
    soft_dtw's values and gradients; fused is accepted in every setting."""
    parameters = inspect.signature(swt.softdtw).parameters
    peer = dict(gamma=1.0, bandwidth=None, normalize=False, dist="sqeuclidean", fused=None)
    for name, default in peer.items():
        assert parameters[name].kind == inspect.Parameter.KEYWORD_ONLY and parameters[name].default == default
    module = inspect.signature(SoftDTW).parameters
    for name, default in peer.items():
        assert module[name].default == default
    x, y = tensors(rng, (3, 11, 2), (3, 8, 2))
    expected = swt.soft_dtw(x, y, 0.4, bandwidth=3)
    expected.sum().backward()
    gx, gy = x.grad.clone(), y.grad.clone()
    for fused in (None, True, False):
        for dist in ("sqeuclidean", "sq_euclidean", "Squared_Euclidean"):
            x.grad = y.grad = None
            values = swt.softdtw(x, y, gamma=0.4, bandwidth=3, normalize=False, dist=dist, fused=fused)
            values.sum().backward()
            torch.testing.assert_close(values, expected)
            torch.testing.assert_close(x.grad, gx)
            torch.testing.assert_close(y.grad, gy)
        module = SoftDTW(gamma=0.4, bandwidth=3.0, normalize=True, dist="sqeuclidean", fused=fused)
        torch.testing.assert_close(module(x, y), swt.soft_dtw_divergence(x, y, 0.4, bandwidth=3))
    assert swt.softdtw(x, y).shape == (3,)
    torch.testing.assert_close(swt.softdtw(x, y), swt.soft_dtw(x, y))  # the peer's defaults: γ = 1, no band
    torch.testing.assert_close(swt.softdtw(x, y, gamma=0.0), swt.dtw(x, y, return_path=False))
    torch.testing.assert_close(swt.softdtw(x, y, gamma=0.4, dist="l1"), swt.soft_dtw(x, y, 0.4, dist="l1"))
    with pytest.raises(TypeError, match="fused"):
        swt.softdtw(x, y, fused="yes")
    with pytest.raises(TypeError, match="fused"):
        SoftDTW(fused=1)
    with pytest.raises(ValueError, match="dist"):
        swt.softdtw(x, y, dist="euclidean")
    with pytest.raises(ValueError, match="gamma must be > 0"):
        swt.softdtw(x, y, gamma=-1.0)
    with pytest.raises(ValueError, match="gamma must be finite"):
        SoftDTW(gamma=float("inf"))
    with pytest.raises(ValueError, match="bandwidth"):
        swt.softdtw(x, y, bandwidth=-1)
    with pytest.raises(TypeError, match="dist or as dist_func"):
        SoftDTW(dist=lambda a, b: a, dist_func=lambda a, b: a)


def test_softdtw_barycenter_is_softwave_barycenter(rng, capsys):
    """softdtw_barycenter with sdtw-cuda-torch's arguments runs
    softwave.barycenter: same result, (N, d), detached, in X's dtype."""
    X = torch.tensor(rng.standard_normal((5, 20, 2)))
    expected = softwave.barycenter(X, gamma=0.5, max_iter=200, tol=1e-9)
    for fused in (None, True, False):
        z = swt.softdtw_barycenter(X, gamma=0.5, weights=None, max_iter=200, lr=0.1, init=None, device=None,
                                   verbose=False, fused=fused, early_stopping=True, patience=10, tol=1e-9)
        assert z.shape == (20, 2) and z.dtype == X.dtype and not z.requires_grad
        torch.testing.assert_close(z, expected)
    torch.testing.assert_close(swt.softdtw_barycenter_cpu(X, gamma=0.5, max_iter=200, tol=1e-9), expected)
    torch.testing.assert_close(swt.softdtw_barycenter(X, gamma=0.5, max_iter=200, tol=1e-9, device="cpu"), expected)
    # It is a barycenter: no worse than the peer's start, the weighted mean.
    Xn = X.numpy()
    objective = lambda z: np.mean([ref.sdtw(z, s, 0.5) for s in Xn])  # noqa: E731
    assert objective(expected.numpy()) <= objective(Xn.mean(0))

    weights = torch.tensor([0.1, 0.2, 0.3, 0.2, 0.2])
    start = X[0].clone().requires_grad_()
    torch.testing.assert_close(
        swt.softdtw_barycenter(X.float(), gamma=0.5, weights=weights, init=start, method="adam", lr=0.05,
                               max_iter=30),
        softwave.barycenter(X.float(), gamma=0.5, weights=weights.numpy(), init=X[0].numpy(), method="adam",
                            learning_rate=0.05, max_iter=30))
    # early_stopping=False: only max_iter or a standstill stops it.
    torch.testing.assert_close(swt.softdtw_barycenter(X, gamma=0.5, max_iter=7, early_stopping=False),
                               softwave.barycenter(X, gamma=0.5, max_iter=7, tol=sys.float_info.min))
    swt.softdtw_barycenter(X, gamma=0.5, max_iter=5, verbose=True)
    assert "iterations" in capsys.readouterr().out

    with pytest.raises(ValueError, match="gamma"):
        swt.softdtw_barycenter(X, gamma=0.0)
    with pytest.raises(TypeError, match="fused"):
        swt.softdtw_barycenter(X, fused="auto")
    with pytest.raises(ValueError, match="patience"):
        swt.softdtw_barycenter(X, patience=0)
    with pytest.raises(ValueError, match="max_iter"):
        swt.softdtw_barycenter(X, max_iter=0)
    with pytest.raises(TypeError, match="X must be a torch.Tensor"):
        swt.softdtw_barycenter(Xn)
    with pytest.raises(ValueError, match="init"):
        swt.softdtw_barycenter(X, init=torch.zeros(20, 3))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_nearest_neighbours_match_sorted_pairwise(rng, device, dtype):
    """The exact search on the tensors' device: the neighbours and distances
    of sorting pairwise(γ = 0, the pair kernel) rows on the same device, bit
    for bit; int64 indices; no gradient."""
    x = np.cumsum(rng.uniform(-1, 1, (7, 19, 2)), axis=1)
    y = np.cumsum(rng.uniform(-1, 1, (30, 23, 2)), axis=1)
    tx = torch.tensor(x, dtype=dtype, device=device, requires_grad=True)
    ty = torch.tensor(y, dtype=dtype, device=device)
    indices, distances, counts = swt.nearest_neighbours(tx, ty, 3, bandwidth=4.5, return_counts=True)
    matrix = swt.pairwise(tx.detach(), ty, 0.0, bandwidth=4.5, kernel="pairs").cpu().numpy()
    order = np.argsort(matrix, axis=1, kind="stable")[:, :3]
    assert indices.dtype == torch.int64 and indices.device.type == device
    assert not distances.requires_grad
    np.testing.assert_array_equal(indices.cpu().numpy(), order)
    np.testing.assert_array_equal(distances.cpu().numpy(), np.take_along_axis(matrix, order, axis=1))
    assert counts["pairs"] == 7 * 30
