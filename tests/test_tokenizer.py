"""The learned VQ tokenizer: codebooks found from data, lossless round trip on the world's scenes."""

import numpy as np
import pytest

from cogrpo.world.tokenizer import roundtrip_pass_rate
from cogrpo.world.checker import Checker
from cogrpo.world.tokenizer import Tokenizer, fit_tokenizer


@pytest.fixture(scope="module")
def tokenizer(world):
    rng = np.random.default_rng(0)
    scenes = np.stack([world.render(world.random_objects(rng, int(rng.integers(1, 8))), 6.0, rng) for _ in range(300)])
    return fit_tokenizer(scenes, world.grid, world.cell, len(world.shapes), len(world.colors), seed=0)


def test_codebooks_recover_the_world(world, tokenizer):
    assert tokenizer.vocab_size == 1 + len(world.shapes) * len(world.colors)
    assert np.allclose(tokenizer.pixel_centroids[tokenizer.background], 255, atol=5)  # noise is clipped at 255
    learned = {m.tobytes() for m in tokenizer.shape_masks}
    assert learned == {m.tobytes() for m in world.templates()}


def test_decoded_ground_truth_passes_the_checker(world, tokenizer, prompt_sets):
    sets, _ = prompt_sets
    rate = roundtrip_pass_rate(world, tokenizer, Checker(world), sets["eval_heldout"], noise_std=6.0)
    assert rate >= 0.98


def test_tokens_round_trip_and_save_load(tokenizer, tmp_path):
    rng = np.random.default_rng(1)
    tokens = rng.integers(0, tokenizer.vocab_size, size=(50, tokenizer.grid**2))
    assert (tokenizer.encode(tokenizer.decode(tokens)) == tokens).all()
    tokenizer.save(tmp_path / "tok")
    again = Tokenizer.load(tmp_path / "tok")
    assert (again.decode(tokens) == tokenizer.decode(tokens)).all()
    with pytest.raises(FileNotFoundError, match="tokenizer.json"):
        Tokenizer.load(tmp_path / "nothing")
