"""The stages' PNG plots as views of their results, `view(result, out, params) → PNG bytes`: one row of small
axes, written without a timestamp (the same data gives the same bytes). flows/stages.py names each file with its
view; the `stage` flow writes them after the stage (flows/pipeline.py), DVC shows them."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from cogrpo.config import Params
from cogrpo.model_folder import ModelFolder
from flows.metrics import train_curves
from tasks.benchmark import HEADLINE


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


def pretrain_png(result: dict, out: Path, params: Params) -> bytes:
    fig, axes = figure(1, "Pretraining")
    axes[0].plot([h["step"] for h in result["history"]], [h["loss"] for h in result["history"]], color="#08519c")
    axes[0].set_title("masked-token loss", fontsize=9)
    axes[0].set_xlabel("step")
    fig.tight_layout()
    return png(fig)


def schedule_png(result: dict, out: Path, params: Params) -> bytes:
    """Each knob on its own axes, learned (deterministic) against the base schedule it started from."""
    from cogrpo.core.schedule import KNOBS, base_knobs, load_schedule

    learned, base = load_schedule(ModelFolder(out).schedule), base_knobs(params.schedule)
    fig, axes = figure(len(KNOBS), "Learned schedule per step (base dashed)")
    steps = range(1, len(learned) + 1)
    for k, (ax, knob) in enumerate(zip(axes, KNOBS)):
        ax.plot(steps, base[:, k], "--", color="grey")
        ax.plot(steps, learned[:, k], "o-", color="#08519c")
        ax.set_title(knob, fontsize=9)
        ax.set_xlabel("step")
    fig.tight_layout()
    return png(fig)


def train_png(result: dict, out: Path, params: Params) -> bytes:
    curves = train_curves(result)
    fig, axes = figure(2, "Co-GRPO training")
    it, mean, std = curves["iteration"], curves["reward_mean"], curves["reward_std"]
    axes[0].plot(it, mean, color="#08519c")
    axes[0].fill_between(it, mean - std, mean + std, color="#9ecae1", alpha=0.5)
    axes[0].set_title("reward (mean ± std)", fontsize=9)
    if "model_kl" in curves.columns:
        axes[1].plot(it, curves["model_kl"], color="#a63603")
    axes[1].set_title("KL to the base model", fontsize=9)
    for ax in axes:
        ax.set_xlabel("iteration")
    fig.tight_layout()
    return png(fig)


def benchmark_steps_png(result: dict, out: Path, params: Params) -> bytes:
    """Each suite's summary metric against the step count, one line per model and schedule."""
    table = pl.read_csv(out / "table.csv").filter(pl.col("metric").str.split(".").list.last().is_in(HEADLINE))
    panels = table.select("suite", "metric").unique(maintain_order=True).rows()
    fig, axes = figure(len(panels), "Score against inference steps")
    for ax, (suite, metric) in zip(axes, panels):
        part = table.filter((pl.col("suite") == suite) & (pl.col("metric") == metric))
        for variant in part["variant"].unique(maintain_order=True):
            line = part.filter(pl.col("variant") == variant).sort("steps")
            ax.plot(line["steps"], line["value"], "o-" if variant.endswith("learned") else "s--", label=variant)
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted(part["steps"].unique()), [str(t) for t in sorted(part["steps"].unique())])
        ax.set_title(f"{suite}: {metric}", fontsize=9)
        ax.set_xlabel("steps")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    return png(fig)
