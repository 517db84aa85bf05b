"""Bad input gives a ValueError/TypeError naming the argument (the C++
core's softwave::invalid_argument keeps its message)."""

import numpy as np
import pytest

import softwave
import softwave.numpy as swn


def test_core_errors_surface_as_value_error_with_the_message():
    x, y = np.zeros((2, 5, 1)), np.zeros((3, 5, 1))
    with pytest.raises(ValueError, match=r"^softwave: .*y"):
        swn.soft_dtw(x, y)
    with pytest.raises(ValueError, match="non-finite"):
        swn.soft_dtw(np.full((1, 3, 1), np.nan), np.zeros((1, 3, 1)))
    with pytest.raises(ValueError, match="lengths"):
        swn.soft_dtw(np.zeros((2, 5, 1)), np.zeros((2, 5, 1)), lengths_x=[6, 2])


@pytest.mark.parametrize(
    "kwargs, error, pattern",
    [
        (dict(gamma=-1.0), ValueError, "gamma"),
        (dict(gamma=float("nan")), ValueError, "gamma"),
        (dict(gamma="1"), TypeError, "gamma"),
        (dict(bandwidth=-2), ValueError, "bandwidth"),
        (dict(dist="euclid"), ValueError, "dist"),
        (dict(kernel="fast"), ValueError, "kernel"),
        (dict(lengths_x=[1.5]), TypeError, "lengths"),
    ],
)
def test_bad_options_name_the_argument(kwargs, error, pattern):
    with pytest.raises(error, match=pattern):
        swn.soft_dtw(np.zeros((1, 4, 1)), np.zeros((1, 4, 1)), **kwargs)


def test_bad_layouts():
    with pytest.raises(ValueError, match="x and y"):
        swn.soft_dtw(np.zeros((2, 4, 1)), np.zeros((4, 1)))
    with pytest.raises(ValueError, match="x must be"):
        swn.soft_dtw(np.zeros((1, 1, 4, 1)), np.zeros((1, 1, 4, 1)))
    with pytest.raises(TypeError, match="x must be a real array"):
        swn.soft_dtw(np.array(["a", "b"]), np.zeros(2))


def test_specialised_kernel_is_refused_on_the_cpu():
    with pytest.raises(ValueError, match="kernel"):
        swn.soft_dtw(np.zeros((1, 4, 1), np.float32), np.zeros((1, 4, 1), np.float32), kernel="specialised")


def test_barycenter_arguments():
    X = np.zeros((3, 5, 1))
    for kwargs, pattern in [
        (dict(gamma=0.0), "gamma"),
        (dict(method="sgd"), "method"),
        (dict(max_iter=0), "max_iter"),
        (dict(init="median"), "init"),
        (dict(init=np.zeros((4, 2))), "init"),
        (dict(weights=[1.0, -1.0, 1.0]), "weights"),
        (dict(tol=0.0), "tol"),
    ]:
        with pytest.raises(ValueError, match=pattern):
            softwave.barycenter(X, **kwargs)


def test_empty_torch_sequences_are_named_not_called_non_contiguous():
    torch = pytest.importorskip("torch")
    import softwave.torch as swt

    # torch gives a (2, 0, 3) tensor the strides (3, 3, 1); it holds nothing,
    # so the layout check must let it through to the library's own extent check.
    x, y = torch.zeros(2, 0, 3), torch.zeros(2, 4, 3)
    with pytest.raises(ValueError, match="x is empty") as raised:
        swt.SoftDTW(gamma=1.0)(x, y)
    assert "contiguous" not in str(raised.value)
