"""The GenEval-style checker of the embedded world: pixels → objects → a verdict per spec.

Detection is exact on clean renders and strict on everything else: a cell's foreground must be
one colour of the palette and match a shape template to within `SHAPE_TOLERANCE_PX` pixels, or the
cell is reported as a malformed blob. Small pixel noise (colour jitter) is tolerated; stray blobs,
broken shapes and mixed colours are not.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cogrpo.world.palette import BACKGROUND, PALETTE
from cogrpo.world.scenes import World
from cogrpo.world.spec import Obj, Verdict, evaluate_objects

FOREGROUND_DISTANCE = 80.0  # RGB distance from the background above which a pixel is ink
COLOR_DISTANCE = 70.0  # an ink pixel belongs to a palette colour within this distance
NOISE_PX = 1  # a cell with at most this many ink pixels is empty (salt noise)
SHAPE_TOLERANCE_PX = 2  # pixels a blob may differ from its template


@dataclass(frozen=True)
class Detection:
    objects: list[Obj]
    problems: list[str]  # blobs that are no object, e.g. "malformed blob at (1, 2)"


class Checker:
    def __init__(self, world: World):
        self.world = world
        self.templates = world.templates()  # (S, c, c)
        self.palette = np.array([PALETTE[c] for c in world.colors], np.float32)  # (C, 3)

    def detect(self, image: np.ndarray) -> Detection:
        g, c = self.world.grid, self.world.cell
        if image.ndim != 3 or image.shape[2] != 3 or image.shape[0] != image.shape[1]:
            raise ValueError(f"image of shape {image.shape}, expected a square RGB image")
        if image.shape[0] != g * c:  # another backbone's resolution: read it at the world's (bilinear)
            from PIL import Image

            image = np.asarray(Image.fromarray(image).resize((g * c, g * c), Image.BILINEAR))
        px = image.astype(np.float32)
        ink = np.linalg.norm(px - np.array(BACKGROUND, np.float32), axis=-1) > FOREGROUND_DISTANCE
        cells_ink = ink.reshape(g, c, g, c).transpose(0, 2, 1, 3)  # (g, g, c, c)
        cells_px = px.reshape(g, c, g, c, 3).transpose(0, 2, 1, 3, 4)
        mismatch = (cells_ink[:, :, None] != self.templates[None, None]).sum(axis=(-1, -2))  # (g, g, S)
        objects, problems = [], []
        for r in range(g):
            for col in range(g):
                mask = cells_ink[r, col]
                n = int(mask.sum())
                if n <= NOISE_PX:
                    continue
                ink_px = cells_px[r, col][mask]  # (n, 3)
                dist = np.linalg.norm(ink_px[:, None] - self.palette[None], axis=-1)  # (n, C)
                colour = int(np.argmin(dist.mean(axis=0)))
                shape = int(np.argmin(mismatch[r, col]))
                if (dist[:, colour] > COLOR_DISTANCE).any():
                    problems.append(f"mixed-colour blob at ({r}, {col})")
                elif mismatch[r, col, shape] > SHAPE_TOLERANCE_PX:
                    problems.append(f"malformed blob at ({r}, {col})")
                else:
                    objects.append(Obj(self.world.shapes[shape], self.world.colors[colour], r, col))
        return Detection(objects, problems)

    def check(self, image: np.ndarray, spec: dict, strict: bool = True) -> Verdict:
        det = self.detect(image)
        return evaluate_objects(det.objects, spec, det.problems, strict=strict)
