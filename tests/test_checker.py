"""The checker: exact on clean renders, strict on violations, GenEval's semantics."""

import numpy as np
import pytest

from cogrpo.world.checker import Checker
from cogrpo.world.spec import Obj, evaluate_objects


def _all_specs(prompt_sets):
    sets, _ = prompt_sets
    return sets["train"] + sets["eval_heldout"]


def test_shapes_are_far_apart(world):
    t = world.templates().reshape(len(world.shapes), -1)
    for i in range(len(t)):
        for j in range(i + 1, len(t)):
            assert (t[i] != t[j]).sum() > 10, (world.shapes[i], world.shapes[j])


def test_accepts_every_clean_render_with_pixel_noise(world, prompt_sets, rng):
    checker = Checker(world)
    specs = _all_specs(prompt_sets)
    for spec in specs:
        objs = world.layout_for(spec, rng)
        for noise in (0.0, 8.0):
            v = checker.check(world.render(objs, noise, rng), spec)
            assert v.correct and v.score == 1.0, (spec["prompt"], noise, v.reason)


def test_rejects_violating_renders(world, prompt_sets, rng):
    checker = Checker(world)
    specs = _all_specs(prompt_sets)
    rejected = total = 0
    for spec in specs[:: max(1, len(specs) // 300)]:
        objs, _ = world.violating_layout(spec, rng)
        stray = world.add_stray_blob(world.render(world.layout_for(spec, rng)), rng)
        good = world.layout_for(spec, rng)
        broken = world.malform(world.render(good), good[rng.integers(len(good))], rng)
        for img in (world.render(objs, 6.0, rng), stray, broken):
            total += 1
            rejected += not checker.check(img, spec).correct
    assert total >= 600
    assert rejected / total >= 0.99, f"rejected {rejected}/{total}"


def test_detection_reports_blobs(world, rng):
    checker = Checker(world)
    objs = [Obj("circle", "red", 0, 0), Obj("square", "blue", 2, 3)]
    det = checker.detect(world.render(objs))
    assert sorted(det.objects) == sorted(objs) and det.problems == []
    det = checker.detect(world.malform(world.render(objs), objs[0], rng))
    assert det.objects == [objs[1]] and det.problems == ["malformed blob at (0, 0)"]


SPEC_POS = {"tag": "position", "prompt": "a photo of a square right of a circle",
            "include": [{"class": "circle", "count": 1}, {"class": "square", "count": 1, "position": ["right of", 0]}]}


@pytest.mark.parametrize("objs, correct", [
    ([Obj("circle", "red", 1, 0), Obj("square", "red", 1, 2)], True),
    ([Obj("circle", "red", 0, 0), Obj("square", "red", 3, 1)], True),  # diagonal still right of
    ([Obj("circle", "red", 1, 2), Obj("square", "red", 1, 2 - 2)], False),
    ([Obj("circle", "red", 0, 1), Obj("square", "red", 3, 1)], False),  # same column
    ([Obj("square", "red", 1, 2)], False),  # no target
])
def test_position_semantics(objs, correct):
    assert evaluate_objects(objs, SPEC_POS).correct is correct


def test_count_exclude_and_colour_semantics():
    spec = {"tag": "counting", "prompt": "a photo of three circles",
            "include": [{"class": "circle", "count": 3}], "exclude": [{"class": "circle", "count": 4}]}
    circles = [Obj("circle", "red", 0, i) for i in range(4)]
    assert evaluate_objects(circles[:3], spec).correct
    v = evaluate_objects(circles[:2], spec)
    assert not v.correct and "expected circle>=3, found 2" in v.reason
    v = evaluate_objects(circles, spec, strict=False)
    assert not v.correct and "expected circle<4, found 4" in v.reason
    colour = {"tag": "colors", "prompt": "a photo of a blue square", "include": [{"class": "square", "count": 1, "color": "blue"}]}
    assert evaluate_objects([Obj("square", "blue", 2, 2)], colour).correct
    v = evaluate_objects([Obj("square", "red", 2, 2)], colour)
    assert not v.correct and v.facts == 3 and v.satisfied == 1  # count ok; colour and cleanliness fail


def test_strict_cleanliness_is_the_only_difference_from_geneval():
    spec = {"tag": "single_object", "prompt": "a photo of a circle", "include": [{"class": "circle", "count": 1}]}
    extra = [Obj("circle", "red", 0, 0), Obj("triangle", "red", 1, 1)]
    v = evaluate_objects(extra, spec)
    assert v.geneval_correct and not v.correct and "unexpected red triangle" in v.reason
    v = evaluate_objects([Obj("circle", "red", 0, 0)], spec, problems=["malformed blob at (3, 3)"])
    assert v.geneval_correct and not v.correct
    assert evaluate_objects(extra, spec, strict=False).correct


def test_dpg_fraction_of_facts(world, rng):
    spec = {"tag": "dpg", "prompt": "x", "include": [
        {"class": "circle", "count": 1, "color": "red"},
        {"class": "square", "count": 2, "color": "blue", "position": ["below", 0]},
        {"class": "triangle", "count": 1, "color": "green"}]}
    objs = [Obj("circle", "red", 0, 0), Obj("square", "blue", 2, 0), Obj("square", "blue", 3, 3),
            Obj("triangle", "yellow", 1, 1)]
    v = Checker(world).check(world.render(objs), spec)
    # facts: 3 counts, 3 colours, 1 position, cleanliness; the triangle's colour and cleanliness fail
    assert (v.facts, v.satisfied) == (8, 6)
    assert np.isclose(v.score, 0.75)


def test_reasons_do_not_follow_the_hash_seed():
    """The verdict's reason lists failures in a fixed order, so results.jsonl is the same bytes in every process
    (Python salts string hashes per process: set order changes with PYTHONHASHSEED)."""
    import subprocess
    import sys

    code = ("from cogrpo.world.spec import Obj, evaluate_objects\n"
            "objs = [Obj(s, 'red', r, c) for r, s in enumerate(['circle', 'square', 'triangle', 'diamond'])"
            " for c in range(2)]\n"
            "spec = {'include': [{'class': s, 'count': 1} for s in ['circle', 'square', 'triangle', 'diamond']]}\n"
            "print(evaluate_objects(objs, spec).reason)\n")
    reasons = {subprocess.run([sys.executable, "-c", code], env={"PYTHONHASHSEED": str(seed), "PATH": ""},
                              capture_output=True, text=True, check=True).stdout for seed in range(6)}
    assert len(reasons) == 1 and "2 circles, asked for 1" in reasons.pop()
