"""softwave._torch_native: Soft-DTW as torch operators registered in C++
(torch.ops.softwave.soft_dtw_values and soft_dtw_fused) with their autograd
in C++, which softwave.torch's eager calls take where the package was built
against torch's headers (tests/python/run.sh builds it so, on Debian's torch
1.13 with libtorch-dev). Each is checked against the torch.autograd.Function
path it replaces (the same core call: equal bit for bit, but for the
order of CUDA's atomic additions), against finite differences, and for its
errors."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import softwave  # noqa: E402
import softwave.torch as swt  # noqa: E402
from softwave import _torch_ops  # noqa: E402
from softwave._common import Options  # noqa: E402

NATIVE = _torch_ops.NATIVE
needs_native = pytest.mark.skipif(NATIVE is None, reason="softwave was built without torch's C++ headers")
pytestmark = needs_native
HAS_GPU = softwave.has_cuda() and torch.cuda.is_available()
DEVICES = ["cpu"] + (["cuda"] if HAS_GPU and NATIVE is not None and NATIVE.cuda else [])


def tensors(rng, *shapes, dtype=torch.float64, device="cpu", requires_grad=True):
    return [torch.tensor(rng.standard_normal(s), dtype=dtype, device=device, requires_grad=requires_grad)
            for s in shapes]


def function_path(x, y, opts, divergence=False, lengths_x=None, lengths_y=None):
    """The values through the torch.autograd.Function the operator replaces."""
    return _torch_ops._SoftDTWFunction.apply(x, y, lengths_x, lengths_y, _torch_ops.resolved(opts, x), divergence)


def native_path(x, y, opts, divergence=False, lengths_x=None, lengths_y=None):
    o = _torch_ops.resolved(opts, x)
    return torch.ops.softwave.soft_dtw_values(x, y, lengths_x, lengths_y, o.gamma, o.dist, o.band, o.kernel,
                                              o.check, divergence)


def eps(dtype):
    return torch.finfo(dtype).eps


def values_and_grads(path, x, y, weights, **kwargs):
    x, y = x.detach().clone().requires_grad_(), y.detach().clone().requires_grad_()
    values = path(x, y, **kwargs)
    (values * weights).sum().backward()
    return values.detach(), x.grad, y.grad


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16])
def test_matches_the_function_path(rng, device, dtype):
    for B, N, M, d in ((3, 9, 7, 2), (1, 1, 1, 1), (4, 33, 20, 3)):
        x, y = tensors(rng, (B, N, d), (B, M, d), dtype=dtype, device=device)
        weights = torch.tensor(rng.standard_normal(B), device=device)
        lengths_x = torch.tensor(rng.integers(1, N + 1, B), dtype=torch.int32, device=device)
        for gamma, dist, band, divergence, lengths in ((1.0, "sqeuclidean", -1, False, None),
                                                       (0.1, "l1", 2, False, lengths_x),
                                                       (0.5, "cosine", -1, True, None),
                                                       (0.0, "sqeuclidean", -1, False, None)):
            opts = Options(gamma, dist, band, "automatic", None)
            kwargs = dict(opts=opts, divergence=divergence, lengths_x=lengths)
            native = values_and_grads(native_path, x, y, weights.to(_torch_ops.value_dtype(dtype)), **kwargs)
            expected = values_and_grads(function_path, x, y, weights.to(_torch_ops.value_dtype(dtype)), **kwargs)
            for k, (got, want) in enumerate(zip(native, expected)):
                assert got.dtype == want.dtype and got.shape == want.shape
                # The same core call, so the same bits; except that on CUDA
                # the portable kernels add gradients up with atomics, in an
                # order that changes from run to run: there within rounding.
                exact = k == 0 or device == "cpu"
                scale = 1.0 if got.numel() == 0 else max(1.0, want.abs().max().item())
                tolerance = dict(rtol=0, atol=0) if exact else dict(rtol=0, atol=8 * eps(dtype) * scale)
                torch.testing.assert_close(got, want, equal_nan=True, **tolerance)


def test_front_end_takes_the_native_operator(rng):
    x, y = tensors(rng, (2, 6, 1), (2, 5, 1))
    values = swt.soft_dtw(x, y)
    assert "SoftDtwValues" in values.grad_fn.name()
    assert "SoftDtwValues" in swt.SoftDTW(gamma=0.1)(x, y).grad_fn.name()


@pytest.mark.parametrize("device", DEVICES)
def test_gradients_match_finite_differences(rng, device):
    x, y = tensors(rng, (2, 7, 2), (2, 5, 2), device=device)
    lengths = torch.tensor([7, 3], dtype=torch.int32, device=device)
    for divergence in (False, True):
        assert torch.autograd.gradcheck(
            lambda a, b: native_path(a, b, Options(0.7, "sqeuclidean", -1, "automatic", None), divergence,
                                     lengths_x=None if divergence else lengths),
            (x, y), eps=1e-6, atol=1e-6, rtol=1e-5)


def test_one_input_needing_grad_computes_only_its_gradient(rng):
    x, y = tensors(rng, (2, 6, 1), (2, 5, 1))
    y.requires_grad_(False)
    opts = Options(1.0, "sqeuclidean", -1, "automatic", None)
    native_path(x, y, opts).sum().backward()
    expected = x.detach().clone().requires_grad_()
    function_path(expected, y, opts).sum().backward()
    assert y.grad is None
    torch.testing.assert_close(x.grad, expected.grad, rtol=0, atol=0)


def test_without_autograd(rng):
    """no_grad, inference mode (below the autograd kernel) and inputs that
    need no gradient give the values alone."""
    x, y = tensors(rng, (3, 8, 2), (3, 6, 2))
    opts = Options(0.3, "sqeuclidean", -1, "automatic", None)
    expected = function_path(x.detach(), y.detach(), opts)
    with torch.no_grad():
        values = native_path(x, y, opts)
    assert values.grad_fn is None
    torch.testing.assert_close(values, expected, rtol=0, atol=0)
    with torch.inference_mode():
        torch.testing.assert_close(native_path(x.detach(), y.detach(), opts), expected, rtol=0, atol=0)
    assert native_path(x.detach(), y.detach(), opts).grad_fn is None


def test_empty_batch_and_non_contiguous_inputs(rng):
    x, y = tensors(rng, (0, 5, 2), (0, 4, 2))
    opts = Options(1.0, "sqeuclidean", -1, "automatic", None)
    values = native_path(x, y, opts)
    values.sum().backward()
    assert values.shape == (0,) and x.grad.shape == (0, 5, 2)
    a, b = tensors(rng, (3, 2, 6), (3, 2, 4))
    x, y = a.transpose(1, 2), b.transpose(1, 2)  # (3, 6, 2), (3, 4, 2), not contiguous
    native_path(x, y, opts).sum().backward()
    expected = values_and_grads(function_path, x.contiguous(), y.contiguous(), torch.ones(3, dtype=x.dtype),
                                opts=opts)
    torch.testing.assert_close(a.grad.transpose(1, 2), expected[1], rtol=0, atol=0)
    torch.testing.assert_close(b.grad.transpose(1, 2), expected[2], rtol=0, atol=0)


def test_inputs_may_change_in_place_after_the_forward(rng):
    """The inputs are not saved (their values are never read again)."""
    x, y = tensors(rng, (2, 6, 1), (2, 5, 1))
    leaf_x = x * 1.0
    values = native_path(leaf_x, y, Options(1.0, "sqeuclidean", -1, "automatic", None))
    with torch.no_grad():
        leaf_x.add_(1.0)
    values.sum().backward()
    assert torch.isfinite(x.grad).all()


def test_errors_are_value_errors_naming_the_argument(rng):
    x, y = tensors(rng, (2, 6, 1), (2, 5, 1))
    with pytest.raises(ValueError, match="gamma"):
        native_path(x, y, Options(-1.0, "sqeuclidean", -1, "automatic", None))
    with pytest.raises(ValueError, match="x"):
        torch.ops.softwave.soft_dtw_values(x[0], y, None, None, 1.0, "sqeuclidean", -1, "automatic", True, False)
    with pytest.raises(ValueError, match="dist|cost"):
        torch.ops.softwave.soft_dtw_values(x, y, None, None, 1.0, "manhattan", -1, "automatic", True, False)
    bad = x.detach().clone()
    bad[0, 0, 0] = float("nan")
    with pytest.raises(ValueError, match="x"):
        native_path(bad, y, Options(1.0, "sqeuclidean", -1, "automatic", True))
    long_lengths = torch.tensor([7, 2], dtype=torch.int32)
    with pytest.raises(ValueError, match=r"lengths\.x\[0\] = 7 is out of range"):
        native_path(x, y, Options(1.0, "sqeuclidean", -1, "automatic", True), lengths_x=long_lengths)


def test_second_derivatives_refused(rng):
    x, y = tensors(rng, (2, 6, 1), (2, 5, 1))
    opts = Options(1.0, "sqeuclidean", -1, "automatic", None)
    (gx,) = torch.autograd.grad(native_path(x, y, opts).sum(), x, create_graph=True)
    expected = values_and_grads(function_path, x, y, torch.ones(2, dtype=x.dtype), opts=opts)[1]
    torch.testing.assert_close(gx.detach(), expected, rtol=0, atol=0)  # usable as a value
    with pytest.raises(RuntimeError, match="second derivatives"):
        gx.pow(2).sum().backward()


@pytest.mark.skipif(not _torch_ops.OPS, reason=f"torch {torch.__version__} has no torch.library.opcheck")
@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(rng, device):
    x, y = tensors(rng, (3, 9, 2), (3, 7, 2), device=device)
    lengths = torch.tensor([9, 4, 1], dtype=torch.int32, device=device)
    for lx, band, divergence in ((None, -1, False), (lengths, 3, True)):
        args = (x, y, lx, None, 0.5, "sqeuclidean", band, "automatic", False, divergence)
        torch.library.opcheck(torch.ops.softwave.soft_dtw_values, args)
        for want in ((True, True), (True, False), (False, False)):
            torch.library.opcheck(torch.ops.softwave.soft_dtw_fused, (*args, *want))


@pytest.mark.skipif(not HAS_GPU, reason="needs a CUDA build of softwave and a GPU")
def test_cuda_runs_on_the_current_stream(rng):
    """Work goes on torch's current stream: a side stream's results are
    there once that stream is synchronised."""
    x, y = tensors(rng, (4, 64, 3), (4, 48, 3), dtype=torch.float32, device="cuda")
    opts = Options(0.1, "sqeuclidean", -1, "automatic", None)
    expected = values_and_grads(function_path, x, y, torch.ones(4, device="cuda"), opts=opts)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        got = values_and_grads(native_path, x, y, torch.ones(4, device="cuda"), opts=opts)
    side.synchronize()
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, rtol=0, atol=0)
    assert np.isfinite(got[0].cpu().numpy()).all()
