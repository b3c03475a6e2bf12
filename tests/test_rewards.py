"""The reward registry: the checker's rewards, weighted sums, normalisation, unknown names, optional terms."""

import numpy as np
import pytest
import torch

from cogrpo.errors import InputError, RewardServerError
from cogrpo.rewards import REGISTRY, Term, build, combine
from cogrpo.world.spec import Obj

SPEC = {"tag": "color_attr", "prompt": "a photo of a red circle and a blue square",
        "include": [{"class": "circle", "count": 1, "color": "red"}, {"class": "square", "count": 1, "color": "blue"}]}


@pytest.fixture
def images(world):
    good = [Obj("circle", "red", 0, 0), Obj("square", "blue", 1, 1)]
    wrong_colour = [Obj("circle", "green", 0, 0), Obj("square", "blue", 1, 1)]
    extra = good + [Obj("triangle", "red", 3, 3)]
    return [world.render(o) for o in (good, wrong_colour, extra)]


def test_checker_rewards(world, images):
    specs, prompts = [SPEC] * 3, [SPEC["prompt"]] * 3
    comp = build(Term("compositional"), world)(images, prompts, specs)
    # facts: 2 counts, 2 colours, cleanliness; a green circle fails its colour and is an unrequested object
    assert torch.allclose(comp, torch.tensor([1.0, 3 / 5, 4 / 5]))
    assert torch.equal(build(Term("strict"), world)(images, prompts, specs), torch.tensor([1.0, 0.0, 0.0]))


def test_weighted_sum_and_normalisation(world, images):
    specs, prompts = [SPEC] * 3, [SPEC["prompt"]] * 3
    out = combine([Term("compositional", 2.0), Term("strict", 1.0, True)], world)(images, prompts, specs)
    strict = torch.tensor([1.0, 0.0, 0.0])
    z = (strict - strict.mean()) / (strict.std(unbiased=False) + 1e-6)
    assert torch.allclose(out["total"], 2 * out["compositional"] + z, atol=1e-5)
    assert torch.equal(out["strict"], strict)


def test_unknown_reward_is_one_clear_error(world):
    with pytest.raises(InputError, match=r"unknown reward .imagereward2. \(known: clip, colour_match, colour_novelty, compositional, hpsv2, imagereward, strict\)"):
        build(Term("imagereward2"), world)
    assert {"compositional", "strict"} <= set(REGISTRY)


def test_colour_match_rewards_the_colour_the_prompt_names():
    from cogrpo.rewards.pixels import colour_match
    from cogrpo.world.palette import PALETTE

    red = np.full((2, 16, 16, 3), PALETTE["red"], np.uint8)
    half = red.copy()
    half[:, :8] = PALETTE["blue"]
    r = colour_match()(np.concatenate([red, half]), ["a red cube", "a blue sky", "red things", "nothing named"], [])
    assert r[0] > 0.99 and r[1] < 0.05  # all red: right colour / wrong colour
    assert abs(r[2] - 0.5) < 0.05 and abs(r[3] - 0.5) < 0.05  # half red; red is the default target


def test_colour_novelty_rewards_the_rare_colour_of_a_colour_free_prompt_only(world):
    free = {"tag": "single_object", "prompt": "a photo of a circle", "include": [{"class": "circle", "count": 1}]}
    reds = [world.render([Obj("circle", "red", i, 0)]) for i in range(3)]
    blue = world.render([Obj("circle", "blue", 0, 1)])
    named = [world.render([Obj("circle", "red", 0, 0), Obj("square", "blue", 1, 1)])] * 2
    images = reds + [blue] + named
    prompts, specs = [free["prompt"]] * 4 + [SPEC["prompt"]] * 2, [free] * 4 + [SPEC] * 2
    out = build(Term("colour_novelty"), world)(images, prompts, specs)
    # each red sees 2 reds and 1 blue among the others; the blue sees 3 reds
    assert torch.allclose(out, torch.tensor([1 / 3, 1 / 3, 1 / 3, 1.0, 0.0, 0.0]))
    same = build(Term("colour_novelty"), world)(reds, [free["prompt"]] * 3, [free] * 3)
    assert torch.equal(same, torch.zeros(3))  # a group of one colour: no sample is rarer than another


def _registered(monkeypatch, name: str, fn) -> None:
    """A reward `name` scoring with fn(images, prompts, specs), for the test's duration."""
    import sys
    import types

    module = types.ModuleType(f"{name}_rewards")
    module.factory = lambda world: fn
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setitem(REGISTRY, name, f"{module.__name__}:factory")


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_a_term_scoring_nan_or_inf_stops_the_run_naming_it(world, images, monkeypatch, bad):
    """A reward server answering NaN once skipped every update silently and exported the base model as trained."""
    _registered(monkeypatch, "broken", lambda images, prompts, specs: torch.tensor([0.5, bad, 0.2]))
    reward = combine([Term("compositional"), Term("broken", 0.5)], world)
    with pytest.raises(InputError, match=r"^reward term 'broken' scored 1 of 3 images NaN or infinite$"):
        reward(images, [SPEC["prompt"]] * 3, [SPEC] * 3)


def _server_down(images, prompts, specs):
    raise RewardServerError("down: no reward server at http://127.0.0.1:9")


def test_an_optional_term_that_fails_scores_0_and_says_why(world, images, monkeypatch):
    _registered(monkeypatch, "down", _server_down)
    failures = []
    reward = combine([Term("compositional"), Term("down", 0.5, required=False)], world,
                     on_failure=lambda label, reason: failures.append((label, reason)))
    out = reward(images, [SPEC["prompt"]] * 3, [SPEC] * 3)
    assert failures == [("down", "down: no reward server at http://127.0.0.1:9")]
    assert torch.equal(out["down"], torch.zeros(3)) and torch.equal(out["failed/down"], torch.ones(3))
    assert torch.equal(out["total"], out["compositional"])
    assert "failed/compositional" not in out  # required terms have no failure record: they stop the run


def test_an_optional_term_scoring_nan_scores_0_on_those_images_only(world, images, monkeypatch):
    _registered(monkeypatch, "flaky", lambda images, prompts, specs: torch.tensor([0.5, float("nan"), 0.2]))
    failures = []
    reward = combine([Term("compositional"), Term("flaky", required=False)], world,
                     on_failure=lambda label, reason: failures.append((label, reason)))
    out = reward(images, [SPEC["prompt"]] * 3, [SPEC] * 3)
    assert failures == [("flaky", "reward term 'flaky' scored 1 of 3 images NaN or infinite")]
    assert torch.equal(out["flaky"], torch.tensor([0.5, 0.0, 0.2]))
    assert torch.equal(out["failed/flaky"], torch.tensor([0.0, 1.0, 0.0]))
    assert torch.isfinite(out["total"]).all()


def test_a_required_term_that_fails_stops_the_run(world, images, monkeypatch):
    _registered(monkeypatch, "down", _server_down)
    failures = []
    reward = combine([Term("compositional"), Term("down", 0.5)], world, on_failure=lambda *a: failures.append(a))
    with pytest.raises(RewardServerError, match=r"^down: no reward server at http://127.0.0.1:9$"):
        reward(images, [SPEC["prompt"]] * 3, [SPEC] * 3)
    assert failures == []
