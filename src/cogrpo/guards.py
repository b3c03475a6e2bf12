"""Reward-hacking guards: image statistics a reward does not see, and the alarm rule over their history.

`statistics(images, group)` summarises a batch of uint8 RGB images (n, H, W, 3), prompt-major in groups of `group`
images of one prompt, as numbers in fixed units, so that one absolute band means the same at any starting value:

    saturation     mean HSV saturation (max − min) / max of a pixel's channels, 0 for black; in [0, 1]
    brightness     mean luma (Rec. 601: 0.299 R + 0.587 G + 0.114 B) / 255; in [0, 1]
    dark_fraction  fraction of pixels whose luma is below DARK (0.2, i.e. 51 of 255); in [0, 1]
    edge_density   fraction of pixels whose luma gradient magnitude (forward differences, luma in [0, 1]) is above
                   EDGE (0.1); in [0, 1]
    colour_entropy entropy in bits of an image's coarse colour histogram (each channel in LEVELS = 4 bins, 64
                   colours), averaged over the images; in [0, 6]
    diversity      mean absolute pixel difference / 255 between two images of a group, averaged over the group's
                   pairs, then over the groups; in [0, 1] (0: every group's images identical; None for groups of 1)

`alarm(rows, bands, reward_rise)` is the rule that reads them (tasks/train.py logs the rows, flows/train.py raises
the alarm). Pure functions of arrays and dicts: no I/O, no torch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

DARK = 0.2  # luma below this (of 1) is a dark pixel
EDGE = 0.1  # a luma gradient magnitude above this (of 1 per pixel) is an edge
LEVELS = 4  # bins per channel of the colour histogram
STATISTICS = ("saturation", "brightness", "dark_fraction", "edge_density", "colour_entropy", "diversity")


def _luma(images: np.ndarray) -> np.ndarray:
    return images.astype(np.float64) @ np.array([0.299, 0.587, 0.114]) / 255.0


def _entropy_bits(image: np.ndarray) -> float:
    q = (image.astype(np.int64) * LEVELS) // 256
    codes = (q[..., 0] * LEVELS + q[..., 1]) * LEVELS + q[..., 2]
    p = np.bincount(codes.ravel(), minlength=LEVELS ** 3) / codes.size
    p = p[p > 0]
    return float(-(p * np.log2(p)).sum()) + 0.0  # + 0.0: no -0.0 for one colour


def diversity(images: np.ndarray, group: int) -> float:
    """Mean pairwise pixel distance within each group of `group` consecutive images, averaged over the groups."""
    n = len(images)
    if group < 2 or n % group:
        raise ValueError(f"{n} images do not split into groups of {group} (at least 2)")
    x = images.reshape(n // group, group, -1).astype(np.float64) / 255.0
    i, j = np.triu_indices(group, k=1)
    return float(np.abs(x[:, i] - x[:, j]).mean())


def statistics(images: np.ndarray, group: int) -> dict[str, float]:
    """The guard statistics of a batch of uint8 RGB images (n, H, W, 3), in groups of `group` (module docstring)."""
    if images.ndim != 4 or images.shape[-1] != 3 or images.dtype != np.uint8:
        raise ValueError(f"expected uint8 images (n, H, W, 3), got {images.dtype} {images.shape}")
    x = images.astype(np.float64)
    hi, lo = x.max(-1), x.min(-1)
    saturation = np.where(hi > 0, (hi - lo) / np.maximum(hi, 1.0), 0.0)
    luma = _luma(images)
    gx, gy = np.diff(luma, axis=2)[:, :-1, :], np.diff(luma, axis=1)[:, :, :-1]
    return {
        "saturation": float(saturation.mean()),
        "brightness": float(luma.mean()),
        "dark_fraction": float((luma < DARK).mean()),
        "edge_density": float((np.hypot(gx, gy) > EDGE).mean()),
        "colour_entropy": float(np.mean([_entropy_bits(img) for img in images])),
        "diversity": diversity(images, group) if group >= 2 else None,  # one image per prompt: no pairs
    }


def _present(v) -> bool:
    return v is not None and np.isfinite(v)


def alarm(rows: Sequence[Mapping], bands: Mapping[str, float | None], reward_rise: float = 0.0,
          eval_band: float | None = None) -> str | None:
    """Whether the last row raises the alarm, and why: its training reward ("reward") is more than reward_rise
    above the first row's that has one, AND some statistic moved more than its band (an absolute difference, in the
    statistic's units) from its value in the first row that has it, or some eval reward ("eval_reward/<label>")
    fell more than eval_band below its start (a rise of what the training does not optimise is no alarm). A band of
    None is not watched. Returns the reason in one line, or None."""
    if len(rows) < 2:
        return None

    def start(key):
        return next((r[key] for r in rows if _present(r.get(key))), None)

    last, reward0 = rows[-1], start("reward")
    if not (_present(last.get("reward")) and reward0 is not None and last["reward"] - reward0 > reward_rise):
        return None
    moved = []
    for key, band in bands.items():
        v0, v = start(key), last.get(key)
        if band is not None and v0 is not None and _present(v) and abs(v - v0) > band:
            moved.append(f"{key} {v0:.3g} → {v:.3g} (band ±{band:g})")
    if eval_band is not None:
        for key in (k for k in last if k.startswith("eval_reward/")):
            v0, v = start(key), last[key]
            if v0 is not None and _present(v) and v0 - v > eval_band:
                moved.append(f"{key} {v0:.3g} → {v:.3g} (band −{eval_band:g})")
    if not moved:
        return None
    return (f"iteration {last['iteration']}: the training reward rose {reward0:.3g} → {last['reward']:.3g} while "
            + "; ".join(moved))
