"""softwave.plot draws from real UCR data without error."""

import pytest
from conftest import ucr

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")

import softwave  # noqa: E402
import softwave.plot  # noqa: E402


def test_alignment_and_barycenter_figures(tmp_path):
    labels, series = ucr("GunPoint")
    ax = softwave.plot.alignment(series[0, :60], series[1, :50], gamma=0.1)
    assert ax.images and ax.images[0].get_array().shape == (60, 50)
    ax.figure.savefig(tmp_path / "alignment.png")
    members = series[labels == 2][:6, ::3]
    ax = softwave.plot.barycenter(members, softwave.barycenter(members, gamma=1.0))
    assert len(ax.lines) == 7
    ax.figure.savefig(tmp_path / "barycenter.png")
    assert (tmp_path / "alignment.png").stat().st_size > 1000
    with pytest.raises(ValueError, match="one pair"):
        softwave.plot.alignment(series[:2, :, None], series[:2, :, None])
