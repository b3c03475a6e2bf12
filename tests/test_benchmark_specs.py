"""Every benchmark prompt file is validated before generation: the published files parse whole, and each bad row
is one InputError line naming the file, the row and the key (never a KeyError or a silent evaluation)."""

import copy
import json
import re
from collections import Counter
from pathlib import Path

import pytest

from cogrpo.benchmarks.specs import (GENEVAL_COLORS, Prompt, load_dpg_prompts, load_geneval, load_hps,
                                     load_imagereward, validate_embedded)
from cogrpo.config import WorldConfig
from cogrpo.errors import InputError
from cogrpo.io import read_specs, write_specs

FOLDER = Path(__file__).resolve().parents[1] / "data" / "benchmarks"
GENEVAL = FOLDER / "geneval_evaluation_metadata.jsonl"
NAMES = FOLDER / "geneval_object_names.txt"


def _e(path) -> str:
    return re.escape(str(path))


def _write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


# --- the published files ------------------------------------------------------------------------------------


def test_published_files_parse_whole():
    geneval = load_geneval(GENEVAL, NAMES)
    assert len(geneval) == 553 and all(isinstance(p, Prompt) for p in geneval)
    assert [p.index for p in geneval] == list(range(553))  # GenEval's folder numbering
    assert Counter(p.group for p in geneval)["position"] == 100
    assert geneval[0].metadata == json.loads(GENEVAL.read_text().splitlines()[0])  # the spec as written
    dpg = load_dpg_prompts(FOLDER / "dpg_bench_prompts.jsonl")
    assert len(dpg) == 1065 and len({p.group for p in dpg}) == 1065
    hps = load_hps(FOLDER / "hpsv2_benchmark_prompts.jsonl")
    assert Counter(p.group for p in hps) == {"anime": 800, "concept": 800, "paintings": 800, "photo": 800}
    ir = load_imagereward(FOLDER / "imagereward_benchmark_prompts.json")
    assert len(ir) == 100 and ir[0].group == "005695-0057"


def test_geneval_colors_cover_the_published_specs():
    used = {i["color"] for p in load_geneval(GENEVAL, NAMES) for i in p.metadata["include"] if "color" in i}
    assert used <= set(GENEVAL_COLORS)


def test_the_projects_embedded_prompt_sets_validate(world, prompt_sets, tmp_path):
    """The sets the world's prompt builder makes (as tasks/data.py writes them) pass, through parquet too."""
    sets, _ = prompt_sets
    for name, specs in sets.items():
        assert len(validate_embedded(specs, world.config, f"{name}.parquet")) == len(specs)
    path = tmp_path / "eval_heldout.parquet"
    write_specs(path, sets["eval_heldout"])
    got = validate_embedded(read_specs(path), world.config, path)
    assert {p.group for p in got} >= {"counting", "position", "dpg"}


def test_embedded_limits_follow_the_world_config():
    small = WorldConfig(grid=2, shapes=["circle", "bar"], colors=["red", "black"])
    ok = {"tag": "counting", "include": [{"class": "bar", "count": 4}], "exclude": [{"class": "bar", "count": 5}],
          "prompt": "four bars"}
    validate_embedded([ok], small, "p.parquet")
    with pytest.raises(InputError, match=r"include\[0\]\.class: unknown class 'square'"):
        validate_embedded([{**ok, "include": [{"class": "square", "count": 1}], "exclude": []}], small, "p.parquet")
    two = {"tag": "two_object", "include": [{"class": "bar", "count": 3}, {"class": "circle", "count": 2}], "prompt": "x"}
    with pytest.raises(InputError, match=r"^p\.parquet:row 0: include: asks for 5 objects in all, the board has 4 cells$"):
        validate_embedded([two], small, "p.parquet")


# --- the user's bad rows, on GenEval (JSON lines) and on embedded specs (parquet rows) ----------------------

GOOD_GENEVAL = {"tag": "color_attr", "include": [{"class": "dog", "count": 1, "color": "red"},
                                                 {"class": "cat", "count": 1, "position": ["left of", 0]}],
                "prompt": "a photo of a red dog and a cat left of it"}
GOOD_WORLD = {"tag": "color_attr", "include": [{"class": "circle", "count": 1, "color": "red"},
                                               {"class": "square", "count": 1, "position": ["left of", 0]}],
              "prompt": "a red circle and a square left of it"}


def _set(spec: dict, key: str, value) -> dict:
    """A copy with spec[key] (dotted, list indices as numbers) set; value None deletes it."""
    spec = copy.deepcopy(spec)
    *parents, last = [int(k) if k.isdigit() else k for k in key.split(".")]
    node = spec
    for k in parents:
        node = node[k]
    if value is None:
        del node[last]
    else:
        node[last] = value
    return spec


BAD = [  # (what, key changed, value, expected message after "<file>:<row>: ")
    ("empty prompt", "prompt", "", r"prompt: empty prompt"),
    ("blank prompt", "prompt", "   ", r"prompt: empty prompt"),
    ("unknown colour", "include.0.color", "magenta", r"include\[0\]\.color: unknown colour 'magenta'"),
    ("unknown class", "include.1.class", "unicorn", r"include\[1\]\.class: unknown class 'unicorn'"),
    ("unknown tag", "tag", "scenery", r"tag: unknown tag 'scenery'"),
    ("negative count", "include.0.count", -2, r"include\[0\]\.count: Input should be greater than or equal to 1"),
    ("count 99", "include.1.count", 99, r"include\[1\]\.count: 99 can never be met"),
    ("row without class", "include.0.class", None, r"include\[0\]\.class: missing"),
    ("unknown key", "include.0.shape", "round", r"include\[0\]\.shape: unknown key"),
    ("relation", "include.1.position", ["near", 0], r"include\[1\]\.position: unknown relation 'near'"),
    ("forward index", "include.1.position", ["above", 1], r"include\[1\]\.position: index 1 does not point at an earlier"),
    ("string count", "include.0.count", "1", r"include\[0\]\.count: Input should be a valid integer"),
]


@pytest.mark.parametrize("what,key,value,message", BAD, ids=[b[0] for b in BAD])
def test_bad_geneval_line_is_named(tmp_path, what, key, value, message):
    good = GENEVAL.read_text().splitlines()[:3]
    path = _write_jsonl(tmp_path / "meta.jsonl", [*good, _set(GOOD_GENEVAL, key, value), *good])
    load_geneval(_write_jsonl(tmp_path / "ok.jsonl", [*good, GOOD_GENEVAL]), NAMES)  # the unchanged row is fine
    with pytest.raises(InputError, match=rf"^{_e(path)}:4: {message}") as err:
        load_geneval(path, NAMES)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("what,key,value,message", BAD, ids=[b[0] for b in BAD])
def test_bad_embedded_row_is_named(what, key, value, message):
    if what == "count 99":
        message = r"include\[1\]\.count: 99 can never be met \(the board has 16 cells\)"
    cfg = WorldConfig()
    assert cfg.grid**2 == 16
    specs = [GOOD_WORLD, GOOD_WORLD, _set(GOOD_WORLD, key, value)]
    validate_embedded(specs[:2], cfg, "set.parquet")
    with pytest.raises(InputError, match=rf"^set\.parquet:row 2: {message}") as err:
        validate_embedded(specs, cfg, "set.parquet")
    assert "\n" not in str(err.value)


def test_more_geneval_row_errors(tmp_path):
    cases = [
        (_set(GOOD_GENEVAL, "include", []), r"include: List should have at least 1 item"),
        ({**GOOD_GENEVAL, "exclude": [{"class": "dog", "count": 1}]}, r"exclude\[0\]\.count: fewer than 1 dog contradicts"),
        ({**GOOD_GENEVAL, "exclude": [{"class": "dog", "count": 0}]}, r"exclude\[0\]\.count: Input should be greater"),
        ({**GOOD_GENEVAL, "exclude": [{"class": "dog", "count": 99}]}, r"exclude\[0\]\.count: fewer than 99 always holds"),
        (["a", "list"], r"not a JSON object"),
    ]
    for row, message in cases:
        path = _write_jsonl(tmp_path / "m.jsonl", [GOOD_GENEVAL, row])
        with pytest.raises(InputError, match=rf"^{_e(path)}:2: {message}"):
            load_geneval(path, NAMES)


# --- unreadable files and other benchmarks ------------------------------------------------------------------


def test_non_json_and_blank_lines(tmp_path):
    path = _write_jsonl(tmp_path / "m.jsonl", [GOOD_GENEVAL, GOOD_GENEVAL, '{"tag": "colors", "include": [}'])
    with pytest.raises(InputError, match=rf"^{_e(path)}:3: not JSON \(Expecting value at column 31\)$"):
        load_geneval(path, NAMES)
    path = _write_jsonl(tmp_path / "d.jsonl", [{"item_id": "a", "prompt": "x"}, "", {"item_id": "b", "prompt": "y"}])
    with pytest.raises(InputError, match=rf"^{_e(path)}:2: empty line$"):
        load_dpg_prompts(path)
    path = tmp_path / "ir.json"
    path.write_text('[\n {"id": "a", "prompt": "x"},\n {"id": "b" "prompt": "y"}\n]')
    with pytest.raises(InputError, match=rf"^{_e(path)}:3: not JSON"):
        load_imagereward(path)


def test_missing_and_empty_files(tmp_path):
    missing = tmp_path / "nope.jsonl"
    for load in (lambda p: load_geneval(p, NAMES), load_dpg_prompts, load_hps, load_imagereward):
        with pytest.raises(InputError, match=rf"^{_e(missing)}: file not found$"):
            load(missing)
    with pytest.raises(InputError, match=rf"^{_e(missing)}: file not found$"):
        load_geneval(GENEVAL, missing)  # the object names file
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(InputError, match=rf"^{_e(empty)}: no prompts"):
        load_dpg_prompts(empty)
    with pytest.raises(InputError, match=r"^x\.parquet: no prompts"):
        validate_embedded([], WorldConfig(), "x.parquet")


def test_dpg_hps_imagereward_rows(tmp_path):
    path = _write_jsonl(tmp_path / "d.jsonl", [{"item_id": "a", "prompt": "x"}, {"item_id": "a", "prompt": "y"}])
    with pytest.raises(InputError, match=rf"^{_e(path)}:2: item_id: 'a' repeats {_e(path)}:1$"):
        load_dpg_prompts(path)
    path = _write_jsonl(tmp_path / "d.jsonl", [{"item_id": "../a", "prompt": "x"}])
    with pytest.raises(InputError, match=rf"^{_e(path)}:1: item_id: String should match pattern"):
        load_dpg_prompts(path)
    path = _write_jsonl(tmp_path / "d.jsonl", [{"prompt": "x"}])
    with pytest.raises(InputError, match=rf"^{_e(path)}:1: item_id: missing$"):
        load_dpg_prompts(path)
    styles = [{"tag": t, "prompt": "p"} for t in ("anime", "concept", "paintings", "photo")]
    path = _write_jsonl(tmp_path / "h.jsonl", [*styles, {"tag": "sketch", "prompt": "p"}])
    with pytest.raises(InputError, match=rf"^{_e(path)}:5: tag: Input should be 'anime', 'concept', 'paintings' or 'photo'"):
        load_hps(path)
    path = _write_jsonl(tmp_path / "h.jsonl", styles[:3])
    with pytest.raises(InputError, match=rf"^{_e(path)}: no prompts of style photo"):
        load_hps(path)
    path = tmp_path / "ir.json"
    path.write_text(json.dumps([{"id": "a", "prompt": "x"}, {"id": "b", "prompt": ""}]))
    with pytest.raises(InputError, match=rf"^{_e(path)}:item 1: prompt: empty prompt$"):
        load_imagereward(path)
    path.write_text(json.dumps({"id": "a", "prompt": "x"}))
    with pytest.raises(InputError, match=rf"^{_e(path)}: expected a non-empty JSON list"):
        load_imagereward(path)
