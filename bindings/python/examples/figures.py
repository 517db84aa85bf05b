"""Makes the README's figures from the shipped UCR GunPoint data:
docs/alignment.png (expected alignment of two series, with the hard-DTW
path) and docs/barycenter.png (Soft-DTW barycenter of class 1).

    python bindings/python/examples/figures.py
"""

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import softwave  # noqa: E402
import softwave.plot  # noqa: E402

root = Path(__file__).resolve().parents[3]
table = np.loadtxt(root / "data/ucr/GunPoint/GunPoint_TRAIN.tsv")
labels, series = table[:, 0].astype(int), table[:, 1:]

ax = softwave.plot.alignment(series[0], series[1], gamma=0.1)
ax.figure.savefig(root / "docs/alignment.png", dpi=110, bbox_inches="tight")
plt.close(ax.figure)

members = series[labels == 1]
b, report = softwave.barycenter(members, gamma=1.0, return_report=True)
ax = softwave.plot.barycenter(members, b)
ax.set_title(f"GunPoint class 1: {len(members)} series, L-BFGS {report['iterations']} iterations")
ax.figure.savefig(root / "docs/barycenter.png", dpi=110, bbox_inches="tight")
print(report)
