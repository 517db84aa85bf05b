"""softwave.barycenter through NumPy, torch and JAX inputs."""

import numpy as np
import pytest
import reference as ref
from conftest import ucr

import softwave
import softwave.numpy as swn


@pytest.mark.parametrize("method", ["lbfgs", "adam"])
def test_barycenter_of_identical_series_is_that_series(rng, method):
    # Consecutive points at least 0.3 apart per channel: any warping away from
    # the diagonal costs >= 0.18, so the γ = 0.01 smoothing bias (~e^-18) is
    # far below the tolerance.
    s = np.cumsum(rng.uniform(0.3, 1.0, (20, 2)) * rng.choice([-1, 1], (20, 2)), axis=0)
    X = np.repeat(s[None], 5, axis=0)
    b = softwave.barycenter(X, gamma=0.01, method=method, init=s + 0.05 * rng.standard_normal(s.shape),
                            max_iter=3000, tol=1e-12, learning_rate=1e-3)
    np.testing.assert_allclose(b, s, atol=2e-3)


def test_barycenter_is_stationary_and_beats_the_start(rng):
    _, series = ucr("GunPoint")
    X = series[:8, ::5]  # 8 series of length 30
    start_value = sum(ref.sdtw(X.mean(0), s, 1.0) for s in X) / len(X)
    b, report = softwave.barycenter(X, gamma=1.0, tol=1e-10, max_iter=500, return_report=True)
    assert report["objective"] <= start_value
    assert report["objective"] == pytest.approx(sum(ref.sdtw(b, s, 1.0) for s in X) / len(X), rel=1e-8)
    assert b.shape == (30,)  # univariate (B, N) input gives an (L,) barycenter
    Z = np.repeat(b[None, :, None], len(X), axis=0)
    _, gz, _ = swn.soft_dtw_value_and_grad(Z, X[..., None], 1.0)
    assert np.abs(gz.sum(0)).max() / len(X) < 1e-4


def test_variable_lengths_weights_and_torch(rng):
    series = [rng.standard_normal((n, 1)) for n in (12, 9, 15)]  # (N_i, 1): (L, 1) result
    b, report = softwave.barycenter(series, gamma=0.5, length=10, return_report=True)
    assert b.shape == (10, 1) and report["converged"]
    padded = np.zeros((3, 15, 1))
    for i, s in enumerate(series):
        padded[i, : len(s)] = s
    b2 = softwave.barycenter(padded, gamma=0.5, lengths=[12, 9, 15], length=10)
    np.testing.assert_allclose(b2, b, rtol=1e-10)
    # A one-hot weight vector is the barycenter of that series alone.
    one_hot = softwave.barycenter(padded, gamma=0.1, weights=[0, 0, 1.0], init=padded[2], tol=1e-12, max_iter=500)
    alone = softwave.barycenter(padded[2:], gamma=0.1, init=padded[2], tol=1e-12, max_iter=500)
    np.testing.assert_allclose(one_hot, alone, atol=1e-6)
    torch = pytest.importorskip("torch")
    padded32 = torch.tensor(padded, dtype=torch.float32)
    bt = softwave.barycenter(padded32, gamma=0.5, lengths=[12, 9, 15], length=10)
    assert isinstance(bt, torch.Tensor) and bt.dtype == torch.float32
    # The objective is not convex: float32 may stop at another local minimum.
    # Started from float64's, it stays at one as good.
    bt = softwave.barycenter(padded32, gamma=0.5, lengths=[12, 9, 15], init=torch.tensor(b, dtype=torch.float32))

    def objective(z):
        return swn.soft_dtw(np.repeat(np.asarray(z, np.float64)[None], 3, 0), padded, 0.5,
                            lengths_y=[12, 9, 15]).mean()

    assert objective(bt.numpy()) <= objective(b) + 1e-4 * abs(objective(b)) + 1e-5


def test_cuda_tensors_stay_on_the_gpu(rng):
    torch = pytest.importorskip("torch")
    if not (softwave.has_cuda() and torch.cuda.is_available()):
        pytest.skip("needs a CUDA build of softwave and a GPU")
    X = rng.standard_normal((6, 20, 2))
    cpu = softwave.barycenter(X, gamma=0.5, tol=1e-9, max_iter=300)
    gpu = softwave.barycenter(torch.tensor(X, device="cuda"), gamma=0.5, tol=1e-9, max_iter=300)
    assert gpu.device.type == "cuda" and gpu.dtype == torch.float64
    np.testing.assert_allclose(gpu.cpu().numpy(), cpu, atol=1e-5)


def test_init_none_is_the_mean_and_torch_starts_are_read_on_the_host(rng):
    """init=None, the default's spelling in tslearn and sdtw-cuda-torch, is
    'mean'; a torch start that requires grad is taken as its values."""
    X = rng.standard_normal((4, 15, 2))
    np.testing.assert_array_equal(softwave.barycenter(X, gamma=0.5, init=None), softwave.barycenter(X, gamma=0.5))
    torch = pytest.importorskip("torch")
    start = torch.tensor(X[1], requires_grad=True)
    np.testing.assert_array_equal(softwave.barycenter(X, gamma=0.5, init=start),
                                  softwave.barycenter(X, gamma=0.5, init=X[1]))
