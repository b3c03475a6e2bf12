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


def captioned_grid(images: np.ndarray, captions: list[str], passed: list[list[bool]] | None, title: str,
                   scale: int = 3, caption_px: int = 330) -> np.ndarray:
    """One row per prompt: its caption, then its samples (n_rows, samples, H, W, 3) scaled up, each framed green
    when the checker passed it and red when it failed (passed None: no verdicts, no frames); a title line on top.
    uint8 image."""
    from PIL import Image, ImageDraw, ImageFont

    rows, samples, H, W, _ = images.shape
    h, w, pad, top = H * scale, W * scale, 6, 28
    canvas = Image.new("RGB", (caption_px + samples * (w + pad) + pad, top + rows * (h + pad) + pad), "white")
    draw = ImageDraw.Draw(canvas)
    font, small = ImageFont.load_default(size=16), ImageFont.load_default(size=12)
    draw.text((pad, 5), title, fill="black", font=font)
    for r in range(rows):
        y = top + pad + r * (h + pad)
        words, lines = captions[r].split(), [""]
        for word in words:  # wrap the caption to the caption column
            if draw.textlength(lines[-1] + " " + word, font=small) > caption_px - 2 * pad and lines[-1]:
                lines.append(word)
            else:
                lines[-1] = (lines[-1] + " " + word).strip()
        draw.multiline_text((pad, y + 2), "\n".join(lines[: h // 15]), fill="black", font=small)
        for s in range(samples):
            x = caption_px + pad + s * (w + pad)
            tile = Image.fromarray(images[r, s]).resize((w, h), Image.NEAREST)
            canvas.paste(tile, (x, y))
            if passed is not None:
                draw.rectangle([x - 2, y - 2, x + w + 1, y + h + 1], outline="#2ca02c" if passed[r][s] else "#d62728",
                               width=3)
    return np.asarray(canvas)
