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


def test_the_memo_gives_back_the_bits_computed_without_loading_the_model(tmp_path):
    """Stages share prompts' states through the memo folder: the second encoder reads them (its model never loaded)
    and gets the same bits; a torn file or one holding another prompt is computed again, never used."""
    first = TextEncoder("tiny-random", memo=tmp_path)
    states, mask = first.encode(LONGER + [PROMPT])
    second = TextEncoder("tiny-random", memo=tmp_path)
    again, again_mask = second.encode(LONGER + [PROMPT])
    assert second._model is None and torch.equal(again, states) and torch.equal(again_mask, mask)

    files = {p: first._memo_file(p) for p in [PROMPT, *LONGER]}
    assert len(list(first.memo.glob("*.safetensors"))) == len(files)
    files[PROMPT].write_bytes(files[LONGER[0]].read_bytes())  # the file of PROMPT now holds another prompt
    files[LONGER[1]].write_bytes(files[LONGER[1]].read_bytes()[:50])  # torn
    third = TextEncoder("tiny-random", memo=tmp_path)
    redone, _ = third.encode(LONGER + [PROMPT])
    assert third._model is not None and torch.equal(redone, states)
    assert TextEncoder("tiny-random", max_tokens=8, memo=tmp_path).memo != first.memo  # other floats, other folder
