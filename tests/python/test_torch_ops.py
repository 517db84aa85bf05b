"""softwave's registered PyTorch operators (torch >= 2.4): torch.library's
opcheck on each, torch.compile(fullgraph=True) of a model that uses SoftDTW
(no graph break, the same values and gradients as eager), and on the GPU a
forward and backward captured in a CUDA graph and replayed with new data.
Debian's torch 1.13 has neither torch.compile nor torch.library.custom_op:
there these tests skip and the autograd.Function path is what runs."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import softwave  # noqa: E402
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


def test_registered_where_torch_has_custom_ops():
    assert _torch_ops.OPS == hasattr(torch.library, "custom_op")
    if _torch_ops.OPS:
        for name in ("soft_dtw", "soft_dtw_cost", "pairwise", "dtw_path"):
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


@needs_ops
def test_second_derivatives_still_refused(rng):
    x, y = tensors(rng, (2, 6, 1), (2, 5, 1), dtype=torch.float64, requires_grad=True)
    (gx,) = torch.autograd.grad(swt.soft_dtw(x, y).sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="second derivatives"):
        gx.pow(2).sum().backward()


@cuda_only
@needs_ops
@pytest.mark.parametrize("kernel", ["automatic", "portable"])
def test_cuda_graph_capture_and_replay(rng, kernel):
    """The forward and backward of a training step, captured once and
    replayed on new data, give what eager gives on that data."""
    shape_x, shape_y = (16, 128, 4), (16, 96, 4)
    static_x, static_y = tensors(rng, shape_x, shape_y, device="cuda", requires_grad=True)
    loss_fn = swt.SoftDTW(gamma=0.1, kernel=kernel)

    def step():
        static_x.grad = static_y.grad = None
        loss = loss_fn(static_x, static_y).sum()
        loss.backward()
        return loss

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):  # warm up on a side stream, as torch.cuda.graphs asks
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    static_x.grad = static_y.grad = None
    with torch.cuda.graph(graph):
        static_loss = loss_fn(static_x, static_y).sum()
        static_loss.backward()
    for _ in range(3):
        new_x, new_y = tensors(rng, shape_x, shape_y, device="cuda")
        with torch.no_grad():
            static_x.copy_(new_x)
            static_y.copy_(new_y)
        graph.replay()
        expected_x, expected_y = new_x.clone().requires_grad_(), new_y.clone().requires_grad_()
        expected = loss_fn(expected_x, expected_y).sum()
        expected.backward()
        torch.testing.assert_close(static_loss, expected, rtol=1e-6, atol=1e-5)
        torch.testing.assert_close(static_x.grad, expected_x.grad, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(static_y.grad, expected_y.grad, rtol=1e-5, atol=1e-6)
    assert np.isfinite(static_loss.item())
