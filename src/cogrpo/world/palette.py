"""The names the embedded world knows: its colours (with their RGB) and its shape classes.

A leaf module (no imports from the library), so the params schema can validate world names without
importing the renderer.
"""

PALETTE: dict[str, tuple[int, int, int]] = {
    "red": (220, 40, 40),
    "green": (40, 170, 60),
    "blue": (40, 80, 220),
    "yellow": (235, 200, 30),
    "purple": (140, 50, 180),
    "cyan": (30, 190, 200),
    "orange": (245, 130, 20),
    "black": (30, 30, 30),
}
BACKGROUND = (255, 255, 255)
SHAPES = ("circle", "square", "triangle", "diamond", "bar")
