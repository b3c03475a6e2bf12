"""Checkpoints: safetensors with config.json beside them; a mismatch is one clear error."""

import json

import pytest
import torch

from cogrpo.errors import InputError
from cogrpo.backbones.mdm import MDM, MDMConfig

CFG = MDMConfig(grid=4, n_shapes=4, n_colors=6, text_encoder="tiny-random", text_dim=32, max_text_tokens=16,
                dim=32, layers=2, heads=2)


def test_save_load_roundtrip(tmp_path):
    torch.manual_seed(0)
    m = MDM(CFG)
    m.save(tmp_path / "ckpt")
    again = MDM.load(tmp_path / "ckpt")
    tokens = torch.randint(0, CFG.mask_id + 1, (3, 16))
    text, mask = torch.randn(3, 5, 32), torch.ones(3, 5, dtype=torch.bool)
    assert torch.equal(m.eval()(tokens, text, mask), again(tokens, text, mask))


def test_config_mismatch_names_the_tensor(tmp_path):
    MDM(CFG).save(tmp_path / "ckpt")
    cfg = json.loads((tmp_path / "ckpt" / "config.json").read_text())
    (tmp_path / "ckpt" / "config.json").write_text(json.dumps(cfg | {"dim": 64}))
    with pytest.raises(InputError, match=r"model.safetensors: tensor '.*' has shape"):
        MDM.load(tmp_path / "ckpt")
    (tmp_path / "ckpt" / "config.json").write_text(json.dumps(cfg | {"layers": 3}))
    with pytest.raises(InputError, match=r"missing tensor 'blocks.2"):
        MDM.load(tmp_path / "ckpt")
    with pytest.raises(FileNotFoundError, match="config.json"):
        MDM.load(tmp_path / "elsewhere")


def test_condition_dropout_removes_the_prompt():
    torch.manual_seed(0)
    m = MDM(CFG).eval()
    tokens = torch.full((2, 16), CFG.mask_id)
    text = torch.randn(2, 5, 32)
    mask = torch.ones(2, 5, dtype=torch.bool)
    cond = m(tokens, text, mask)
    assert not torch.allclose(cond[0], cond[1])
    uncond = m(tokens, text, mask, drop=torch.tensor([True, True]))
    assert torch.allclose(uncond[0], uncond[1], atol=1e-6)


@pytest.mark.parametrize("world, message", [
    ({"grid": 3}, r"ckpt/config.json: made for grid 4, but params' world.grid is 3: rebuild it"),
    ({"cell_px": 16}, r"tok/tokenizer.json: made for cell 12, but params' world.cell_px is 16: rebuild it"),
])
def test_a_model_made_for_another_world_is_refused_at_load(tmp_path, world, message):
    """world.grid 3 against a grid-4 base model trained on a reward of ≈ 0 and exported with rc 0 (issue 29)."""
    import numpy as np

    from cogrpo.backbones.loading import load_generator
    from cogrpo.config import ModelConfig, WorldConfig
    from cogrpo.world.tokenizer import Tokenizer

    MDM(CFG).save(tmp_path / "ckpt")
    masks = np.ones((CFG.n_shapes, 12, 12), bool)
    Tokenizer(4, 12, np.zeros((1 + CFG.n_colors, 3)), 0, masks).save(tmp_path / "tok")
    inputs = {"model": tmp_path / "ckpt", "tokenizer": tmp_path / "tok"}
    assert load_generator(ModelConfig(), inputs, WorldConfig()).n_tokens == 16
    with pytest.raises(InputError, match=message) as err:
        load_generator(ModelConfig(), inputs, WorldConfig(**world))
    assert "\n" not in str(err.value)
