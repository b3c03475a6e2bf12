"""The frozen text encoder: a prompt's states are a function of the prompt alone."""

import torch

from cogrpo.backbones.text import TextEncoder

PROMPT = "a red circle left of a blue square"
LONGER = ["two green triangles and a yellow diamond above a cyan circle, and one purple square on the right",
          "a blue diamond", "three red squares"]


def test_a_prompts_states_do_not_depend_on_the_prompts_encoded_beside_it():
    """A resumed run starts with an empty cache; an uninterrupted one encoded the same prompt earlier, in another
    batch. Both must see the same bits, or a resumed run drifts from the run it replays."""
    alone, alone_mask = TextEncoder("minilm").encode([PROMPT])
    mixed, mixed_mask = TextEncoder("minilm").encode(LONGER + [PROMPT])
    n = int(alone_mask[0].sum())
    assert int(mixed_mask[-1].sum()) == n
    assert torch.equal(mixed[-1, :n], alone[0, :n])
