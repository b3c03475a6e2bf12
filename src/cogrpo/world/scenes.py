"""The embedded world: flat-coloured shapes on a white board of grid×grid cells, one object per cell.

Objects sit in cells so that one image token can stand for one object (DESIGN.md §2: free placement
was not learnable on 2 cores). The renderer draws layouts that satisfy a GenEval-style spec and,
for the checker's tests, layouts and pixel edits that violate one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from cogrpo.config import WorldConfig
from cogrpo.world.palette import BACKGROUND, PALETTE
from cogrpo.world.spec import Obj, evaluate_objects, relation_holds


def _shape_mask(name: str, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Pixel-centre coordinates u (right) and v (down) span [-1, 1] over one cell."""
    if name == "circle":
        return u**2 + v**2 <= 0.8**2
    if name == "square":
        return (np.abs(u) <= 0.8) & (np.abs(v) <= 0.8)
    if name == "diamond":
        return np.abs(u) + np.abs(v) <= 0.95
    if name == "triangle":  # apex up, base at the bottom
        return (v <= 0.8) & (np.abs(u) <= (v + 0.8) / 2)
    if name == "bar":
        return (np.abs(u) <= 0.85) & (np.abs(v) <= 0.3)
    raise KeyError(name)



@dataclass(frozen=True)
class World:
    """Geometry, palette and renderer of one configured world."""

    config: WorldConfig

    @property
    def shapes(self) -> list[str]:
        return list(self.config.shapes)

    @property
    def colors(self) -> list[str]:
        return list(self.config.colors)

    @property
    def grid(self) -> int:
        return self.config.grid

    @property
    def cell(self) -> int:
        return self.config.cell_px

    @property
    def size(self) -> int:
        return self.grid * self.cell

    def templates(self) -> np.ndarray:
        """Boolean masks (n_shapes, cell, cell) of the world's shapes."""
        centres = (np.arange(self.cell) + 0.5) / self.cell * 2 - 1
        v, u = np.meshgrid(centres, centres, indexing="ij")
        return np.stack([_shape_mask(s, u, v) for s in self.shapes])

    def render(self, objects: list[Obj], noise_std: float = 0.0, rng: np.random.Generator | None = None) -> np.ndarray:
        """An (size, size, 3) uint8 image of the objects, with optional Gaussian pixel noise."""
        img = np.empty((self.size, self.size, 3), np.float32)
        img[:] = BACKGROUND
        masks = self.templates()
        for o in objects:
            y, x = o.row * self.cell, o.col * self.cell
            patch = img[y : y + self.cell, x : x + self.cell]
            patch[masks[self.shapes.index(o.shape)]] = PALETTE[o.color]
        if noise_std > 0:
            img += (rng or np.random.default_rng()).normal(0, noise_std, img.shape)
        return np.clip(np.rint(img), 0, 255).astype(np.uint8)

    def random_objects(self, rng: np.random.Generator, n: int, allowed=None) -> list[Obj]:
        """n objects in distinct random cells; `allowed(shape, color)` filters the colour–shape pairs."""
        cells = rng.choice(self.grid**2, size=n, replace=False)
        out = []
        for cell in cells:
            pairs = [(s, c) for s in self.shapes for c in self.colors if allowed is None or allowed(s, c)]
            s, c = pairs[rng.integers(len(pairs))]
            out.append(Obj(s, c, int(cell) // self.grid, int(cell) % self.grid))
        return out

    def layout_for(self, spec: dict, rng: np.random.Generator, allowed=None, tries: int = 500) -> list[Obj]:
        """A random layout with exactly the objects the spec includes, satisfying every fact in it.

        Classes without a colour get a random one (restricted by `allowed`); nothing else is drawn,
        because the strict checker fails unexpected objects.
        """
        n_wanted = sum(inc["count"] for inc in spec["include"])
        if n_wanted > self.grid**2:
            raise ValueError(f"spec needs {n_wanted} objects, the board has {self.grid ** 2} cells")
        for _ in range(tries):
            objs = self._place(spec, rng, allowed)
            if objs is not None and evaluate_objects(objs, spec).correct:
                return objs
        raise ValueError(f"no layout satisfying {spec['prompt']!r} found in {tries} tries")

    def _place(self, spec: dict, rng: np.random.Generator, allowed) -> list[Obj] | None:
        """Place include groups in order; a group with a relation goes only where it holds against every
        object of its (earlier) target group. None when the random choices painted it into a corner."""
        objs: list[Obj] = []
        groups: list[list[Obj]] = []
        for inc in spec["include"]:
            used = {(o.row, o.col) for o in objs}
            free = [(r, c) for r in range(self.grid) for c in range(self.grid) if (r, c) not in used]
            if "position" in inc:
                relation, index = inc["position"]
                free = [(r, c) for r, c in free
                        if all(relation_holds(Obj("", "", r, c), t, relation) for t in groups[index])]
            if len(free) < inc["count"]:
                return None
            group = []
            for i in rng.choice(len(free), size=inc["count"], replace=False):
                color = inc.get("color")
                if color is None:
                    options = [c for c in self.colors if allowed is None or allowed(inc["class"], c)]
                    color = options[rng.integers(len(options))]
                group.append(Obj(inc["class"], color, *free[i]))
            groups.append(group)
            objs += group
        return objs

    def violating_layout(self, spec: dict, rng: np.random.Generator, tries: int = 200) -> tuple[list[Obj], str]:
        """A layout that breaks the spec by one edit: drop, recolour, reshape, add or move an object."""
        for _ in range(tries):
            objs = self.layout_for(spec, rng)
            kind = ["drop", "recolor", "reshape", "extra", "move"][rng.integers(5)]
            i = int(rng.integers(len(objs)))
            o = objs[i]
            if kind == "drop":
                objs = objs[:i] + objs[i + 1 :]
            elif kind == "recolor":
                objs[i] = o._replace(color=self.colors[rng.integers(len(self.colors))])
            elif kind == "reshape":
                objs[i] = o._replace(shape=self.shapes[rng.integers(len(self.shapes))])
            else:
                free = sorted(set(range(self.grid**2)) - {p.row * self.grid + p.col for p in objs})
                if not free:
                    continue
                cell = int(free[rng.integers(len(free))])
                new = self.random_objects(rng, 1)[0]._replace(row=cell // self.grid, col=cell % self.grid)
                if kind == "extra":
                    objs.append(new)
                else:
                    objs[i] = o._replace(row=new.row, col=new.col)
            if not evaluate_objects(objs, spec).correct:
                return objs, kind
        raise ValueError(f"could not violate {spec['prompt']!r}")

    def add_stray_blob(self, img: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Paint a small 2–3 px square of a palette colour mostly onto background pixels."""
        img = img.copy()
        background = np.all(img > 200, axis=-1)
        for _ in range(1000):
            k = int(rng.integers(2, 4))
            y, x = rng.integers(0, self.size - k + 1, size=2)
            if background[y : y + k, x : x + k].sum() >= k * k - 1:
                img[y : y + k, x : x + k] = PALETTE[self.colors[rng.integers(len(self.colors))]]
                return img
        raise ValueError("no background left for a stray blob")

    def malform(self, img: np.ndarray, obj: Obj, rng: np.random.Generator) -> np.ndarray:
        """Erase a random third (or more) of one object's pixels: a shape the checker must not accept."""
        img = img.copy()
        y, x = obj.row * self.cell, obj.col * self.cell
        patch = img[y : y + self.cell, x : x + self.cell]
        mask = self.templates()[self.shapes.index(obj.shape)]
        cut = int(rng.integers(self.cell // 3, self.cell - self.cell // 3))
        region = np.zeros_like(mask)
        side = rng.integers(4)
        if side == 0:
            region[:cut] = True
        elif side == 1:
            region[cut:] = True
        elif side == 2:
            region[:, :cut] = True
        else:
            region[:, cut:] = True
        erase = mask & region
        if erase.sum() < math.ceil(mask.sum() / 4):
            erase = mask & ~region
        patch[erase] = BACKGROUND
        return img
