"""In-process timing for bench/reward_serving.py; runs in the reward environment:

    .venv-reward/bin/python bench/reward_env_timing.py CONFIG.json IMAGES.npy PROMPTS.json REPEATS OUT.json

Loads the models as the server does (reward_server.models.load_all) and times the same batched call the server
makes, with no HTTP in between; also the packages' own one-image-at-a-time entry points, for reference.
"""

import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

from reward_server.models import load_all

torch.set_num_threads(2)
config, images = json.loads(Path(sys.argv[1]).read_text()), np.load(sys.argv[2])
prompts, repeats = json.loads(Path(sys.argv[3]).read_text()), int(sys.argv[4])
models, out = load_all(config), {}
for name, model in models.items():
    model.score(prompts, images)  # warm-up at full size, as the server's
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        model.score(prompts, images)
        times.append(time.perf_counter() - start)
    out[name] = {"in_process_s": statistics.median(times)}
    if name == "imagereward":  # the package's own entry point: model.score(prompt, PIL image), one at a time
        from PIL import Image

        start = time.perf_counter()
        with torch.no_grad():
            for img, p in zip(images, prompts):
                model.model.score(p, Image.fromarray(img))
        out[name]["package_score_one_by_one_s"] = time.perf_counter() - start
Path(sys.argv[5]).write_text(json.dumps(out))
