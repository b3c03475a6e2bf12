"""Scores from the reward packages called directly, as their READMEs show, with no server in between. Runs in the
reward environment (tests/test_reward_server.py starts it there):

    .venv-reward/bin/python tests/reward_env_direct.py IN.json OUT.json

IN.json: {"images": <.npy of (n, H, W, 3) uint8>, "prompts": [...], "imagereward": {checkpoint, med_config,
bert_tokenizer}, "hpsv2": {arch, checkpoint, version}}; OUT.json: {"imagereward": [...], "hpsv2": [...]}.
"""

import json
import os
import sys
from pathlib import Path

import numpy as np
from PIL import Image

os.environ.setdefault("HF_HUB_OFFLINE", "1")
spec = json.loads(Path(sys.argv[1]).read_text())
images = [Image.fromarray(a) for a in np.load(spec["images"])]
prompts, out = spec["prompts"], {}

if "hpsv2" in spec:  # hpsv2.score, with its model built offline instead of from the LAION download
    import hpsv2.img_score as hps
    from hpsv2.src.open_clip import add_model_config, create_model_and_transforms

    arch = spec["hpsv2"]["arch"]
    if arch.endswith(".json"):
        add_model_config(Path(arch))
        arch = Path(arch).stem
    model, _, preprocess_val = create_model_and_transforms(arch, None, precision="amp", device="cpu",
                                                           light_augmentation=True, output_dict=True)
    hps.model_dict.update(model=model, preprocess_val=preprocess_val)  # score() tokenizes as ViT-H-14: same BPE
    out["hpsv2"] = [float(hps.score(img, p, cp=spec["hpsv2"]["checkpoint"],
                                    hps_version=spec["hpsv2"]["version"])[0]) for img, p in zip(images, prompts)]

if "imagereward" in spec:  # ImageReward.load + model.score(prompt, image), one image at a time
    c = spec["imagereward"]
    checkpoint, med_config = str(Path(c["checkpoint"]).resolve()), str(Path(c["med_config"]).resolve())
    os.chdir(Path(c["bert_tokenizer"]).resolve().parent)  # BLIP loads 'bert-base-uncased' from the working directory
    import ImageReward as RM

    model = RM.load(checkpoint, device="cpu", med_config=med_config)
    out["imagereward"] = [float(model.score(p, img)) for img, p in zip(images, prompts)]

Path(sys.argv[2]).write_text(json.dumps(out))
