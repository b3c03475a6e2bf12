"""The stages' PNG plots: one row of small axes, written without a timestamp (the same data gives the same bytes)."""

from __future__ import annotations


def png(fig) -> bytes:
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, metadata={"Software": None})
    return buf.getvalue()


def figure(n: int, title: str):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, n, figsize=(3.2 * n, 2.8), squeeze=False)
    fig.suptitle(title, fontsize=10)
    return fig, axes[0]
