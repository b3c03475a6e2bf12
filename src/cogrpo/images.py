"""Image helpers shared by stages and reports."""

from __future__ import annotations

import numpy as np


def image_grid(images: np.ndarray, cols: int, pad: int = 2) -> np.ndarray:
    """Tile (n, H, W, 3) images into one uint8 image with grey gutters."""
    n, H, W, _ = images.shape
    rows = -(-n // cols)
    out = np.full((rows * (H + pad) + pad, cols * (W + pad) + pad, 3), 128, np.uint8)
    for i, img in enumerate(images):
        r, c = divmod(i, cols)
        out[pad + r * (H + pad) : pad + r * (H + pad) + H, pad + c * (W + pad) : pad + c * (W + pad) + W] = img
    return out
