"""Answers that used to be silently wrong: unchecked NaN inputs, values that
overflow, thread counts Kokkos' OpenMP backend cannot run, and calls from
threads other than the one that started Kokkos."""

import os
import subprocess
import sys

import numpy as np
import pytest
import torch

import softwave
import softwave.numpy as swn
import softwave.torch as swt


def _with_nan(rng, where):
    x, y = rng.random((3, 7, 2)), rng.random((3, 6, 2))
    (x if where == "x" else y)[1, rng.integers(0, 6), rng.integers(0, 2)] = np.nan
    return x, y


@pytest.mark.parametrize("where", ["x", "y"])
@pytest.mark.parametrize("bandwidth", [None, 1, 2.5])
def test_unchecked_nan_gives_nan_not_inf(where, bandwidth):
    """check_inputs=False: a NaN makes its pair's value NaN, as the README
    says (a NaN in a row of x used to give +inf)."""
    rng = np.random.default_rng(7)
    for _ in range(5):
        x, y = (torch.from_numpy(a) for a in _with_nan(rng, where))
        options = dict(bandwidth=bandwidth, check_inputs=False)
        values = swt.soft_dtw(x, y, **options)
        assert torch.isnan(values[1]) and torch.isfinite(values[[0, 2]]).all(), values
        hard = swt.soft_dtw(x, y, 0.0, **options)
        assert torch.isnan(hard[1]) and torch.isfinite(hard[[0, 2]]).all(), hard
        paths = swt.dtw(x, y, **options)[0]
        assert torch.isnan(paths[1]), paths
        matrix = swt.pairwise(x, y, **options)
        row_or_column = matrix[1, :] if where == "x" else matrix[:, 1]
        assert torch.isnan(row_or_column).all(), matrix


@pytest.mark.parametrize(
    "dtype, magnitude, gamma",
    [(np.float32, 1e20, 1.0), (np.float64, 1e155, 1.0), (np.float64, 1.0, 1e308)],
)
def test_overflowing_values_are_errors_not_inf_or_nan(dtype, magnitude, gamma):
    """Finite inputs whose Soft-DTW values overflow (float32 near 1e20,
    float64 near 1e155, gamma near 1e308) raise, naming gamma, instead of
    returning inf or NaN."""
    rng = np.random.default_rng(3)
    x = (magnitude * (rng.random((2, 6, 1)) - 0.5)).astype(dtype)
    y = np.zeros((2, 5, 1), dtype)
    with pytest.raises(ValueError, match="overflow.*gamma"):
        swn.soft_dtw(x, y, gamma)
    with pytest.raises(ValueError, match="overflow"):
        swn.pairwise(x, y, gamma)
    with pytest.raises(ValueError, match="overflow"):
        swt.soft_dtw(torch.from_numpy(x), torch.from_numpy(y), gamma)


def test_too_many_openmp_threads_are_lowered_not_a_crash():
    """OMP_NUM_THREADS above Kokkos' 512 OpenMP slots crashed Kokkos' start-up
    (SIGSEGV); it now runs with 512 and says so on stderr."""
    code = (
        "import numpy as np, softwave.numpy as swn; "
        "print(swn.soft_dtw(np.zeros((1, 4, 1)), np.ones((1, 4, 1)), 0.0)[0])"
    )
    env = dict(os.environ, OMP_NUM_THREADS="600")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "4.0"
    if softwave.host_space() == "OpenMP":  # a CUDA build's host may be Serial
        assert "600 OpenMP threads asked for" in done.stderr


def test_calls_from_other_threads_agree_with_the_main_thread():
    """Any thread may call softwave, several at once: Python threads here
    (Kokkos 3's OpenMP backend ran host work only from the thread that
    started it, and a call from another thread raised "uninitialized
    execution space"). Soft-DTW and DEER from NumPy and torch, on CPU arrays."""
    import threading

    import softwave.deer as deer

    rng = np.random.default_rng(11)
    x, y = rng.random((4, 30, 2)), rng.random((4, 25, 2))
    xs = rng.standard_normal((3, 200, 2))
    weights = [0.5 * rng.standard_normal(s) for s in ((12, 2), (12, 4), (12,), (12,))]

    def work():
        return (swn.soft_dtw(x, y, 0.5), swt.soft_dtw(torch.from_numpy(x), torch.from_numpy(y), 0.5).numpy(),
                deer.gru(xs, None, *weights, method="deer")[0])

    want = work()
    got, errors = [], []

    def run():
        try:
            for _ in range(3):
                got.append(work())
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert len(got) == 12
    for answer in got:
        for a, b in zip(answer, want):
            assert np.array_equal(a, b)


def test_jax_calls_on_xla_threads():
    """jax.jit on the CPU runs a call whose inputs are still being computed
    on one of XLA's threads once they are ready: DEER and Sinkhorn values
    and gradients from such calls equal those of calls on ready inputs."""
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    import softwave.jax as swj

    if not swj.uses_ffi("cpu"):
        pytest.skip("softwave.jax calls the core through pure_callback here")
    jax_cpu = jax.devices("cpu")[0]

    def inputs():
        keys = jax.random.split(jax.random.PRNGKey(3), 5)
        shapes = ((12, 3), (12, 4), (12,), (12,))
        weights = tuple(jax.random.uniform(k, s, jnp.float32, -0.5, 0.5) for k, s in zip(keys[1:], shapes))
        return jax.random.normal(keys[0], (2, 300, 3), jnp.float32), weights

    def deer_loss(x, w):
        return jnp.mean(jnp.square(swj.deer_gru(x, None, *w, method="deer").y))

    def ot_loss(x, w):
        y = jnp.broadcast_to(w[0], (x.shape[0],) + w[0].shape)
        return swj.sinkhorn(x, y, epsilon=0.5, tolerance=0.0, max_iterations=20).value.sum()

    with jax.default_device(jax_cpu):
        for loss in (deer_loss, ot_loss):
            program = jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))
            ready = jax.block_until_ready(inputs())
            want = jax.block_until_ready(program(*ready))
            for _ in range(5):
                got = jax.block_until_ready(program(*inputs()))
                assert all(np.array_equal(a, b) for a, b in zip(jax.tree_util.tree_leaves(got),
                                                                 jax.tree_util.tree_leaves(want)))
