"""Co-GRPO learns through cogrpo's Meissonic transformer and peft's LoRA: bench/amused_learning.py on a tiny random
Meissonic (16 px: 8×8 VQ tokens, 4×4 inside the transformer), rewarded by `colour_match`, in each mode, with the
same prompts, schedule, adapters and learning rates. Writes reports/meissonic_learning.json.

    python bench/meissonic_learning.py --threads 1       # every mode, ~6 minutes on one core
    python bench/meissonic_learning.py --modes co --iterations 20
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.amused_learning import LORA, main  # noqa: E402
from cogrpo.backbones.meissonic import MeissonicGenerator  # noqa: E402
from cogrpo.backbones.tiny_meissonic import make_tiny_meissonic  # noqa: E402
from cogrpo.config import ModelConfig  # noqa: E402


def meissonic(folder: Path) -> MeissonicGenerator:
    return MeissonicGenerator(folder, ModelConfig(backbone="meissonic", pretrained=str(folder), resolution=16, **LORA))


if __name__ == "__main__":
    main(make_tiny_meissonic, meissonic, "reports/meissonic_learning.json")
