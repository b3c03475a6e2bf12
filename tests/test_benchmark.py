"""The benchmark harness on a tiny random aMUSEd and a few prompts of each published benchmark: GenEval's layout,
shards and resumption giving the same bytes, the external GenEval evaluator read back, DPG scoring with a scripted
VQA on the real sample question graph, the summaries as the benchmarks' own scripts compute them."""

import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from cogrpo.backbones.amused import AmusedGenerator
from cogrpo.backbones.tiny_amused import make_tiny_amused
from cogrpo.benchmarks.aggregate import geneval_summary, hps_summary, imagereward_summary
from cogrpo.config import ModelConfig, Params, parse_params
from cogrpo.core.schedule import base_knobs
from cogrpo.errors import InputError
from tasks.benchmark import cell_folder, load_suite
from tasks.cells import Suite, generate_cell

SAMPLE_CSV = Path(__file__).resolve().parents[1] / "data" / "benchmarks" / "dsg_tifa160_dev_anns.csv"


@pytest.fixture(scope="module")
def gen(tmp_path_factory) -> AmusedGenerator:
    folder = make_tiny_amused(tmp_path_factory.mktemp("hub") / "tiny-amused")
    torch.manual_seed(0)
    return AmusedGenerator(folder, ModelConfig(backbone="amused", pretrained=str(folder), device="cpu"))


def amused_params(**benchmark) -> Params:
    return parse_params({"model": {"backbone": "amused", "pretrained": "unused"}, "schedule": {"steps": 3},
                         "benchmark": {"max_prompts": 5, "samples_per_prompt": {"geneval": 2}} | benchmark})


def files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_every_published_suite_loads_and_a_few_prompts_generate_in_genevals_layout(gen, tmp_path):
    params = amused_params(suites=["geneval", "dpg", "imagereward", "hpsv2"], max_prompts=2)
    knobs = base_knobs(params.schedule)
    for name, samples in (("geneval", 2), ("dpg", 4), ("imagereward", 10), ("hpsv2", 1)):
        suite = load_suite(name, params, tmp_path)
        assert len(suite.prompts) == 2 and suite.samples == samples
        cell = cell_folder(tmp_path, "base-base", 3, name)
        assert generate_cell(gen, suite, knobs, 0, 64, cell) == 1
        folders = sorted(p.name for p in (cell / "images").iterdir())
        assert folders == ["00000", "00001"]
        for i, folder in enumerate(folders):
            meta = json.loads((cell / "images" / folder / "metadata.jsonl").read_text())
            assert meta == suite.metadata[i] and meta["prompt"] == suite.prompts[i]
            pngs = sorted(p.name for p in (cell / "images" / folder / "samples").iterdir())
            assert pngs == [f"{j:04d}.png" for j in range(samples)]
    full = load_suite("geneval", amused_params(), tmp_path)
    assert len(full.prompts) == 5 and full.metadata[0]["tag"] == "single_object"


def test_shards_and_a_crash_give_the_same_images_and_nothing_is_generated_twice(gen, tmp_path):
    suite = load_suite("geneval", amused_params(), tmp_path)  # 5 prompts × 2 samples, batches of 2 prompts: 3
    knobs = base_knobs(amused_params().schedule)
    whole = tmp_path / "whole"
    assert generate_cell(gen, suite, knobs, 7, 2, whole) == 3

    sharded = tmp_path / "sharded"
    assert generate_cell(gen, suite, knobs, 7, 2, sharded, shard=1, shards=2) == 1  # batch 1
    assert generate_cell(gen, suite, knobs, 7, 2, sharded, shard=0, shards=2) == 2  # batches 0 and 2
    assert files(sharded) == files(whole)

    crashed = tmp_path / "crashed"

    def crash(b: int) -> None:
        if b == 1:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        generate_cell(gen, suite, knobs, 7, 2, crashed, on_batch=crash)
    assert sorted(p.name for p in (crashed / "done").iterdir()) == ["00000", "00001"]
    (crashed / "done" / "00001").unlink()  # as if killed before its marker: that batch is generated again, whole
    ran = []
    assert generate_cell(gen, suite, knobs, 7, 2, crashed, on_batch=ran.append) == 2 and ran == [1, 2]
    assert files(crashed) == files(whole)
    assert generate_cell(gen, suite, knobs, 7, 2, crashed) == 0

    from tasks.cells import undo_damaged  # a done batch's image damaged on disk: found, generated again

    png = crashed / "images" / "00002" / "samples" / "0001.png"  # prompt 2: batch 1
    png.write_bytes(png.read_bytes()[:-4])
    warned = []
    assert undo_damaged(crashed, warned.append) == [1] and str(png) in warned[0] and len(warned) == 1
    assert generate_cell(gen, suite, knobs, 7, 2, crashed) == 1 and files(crashed) == files(whole)
    assert undo_damaged(crashed, warned.append) == [] and len(warned) == 1


FAKE_GENEVAL = """
import json, os, sys
images, out = sys.argv[1], sys.argv[2]
rows = []
for folder in sorted(os.listdir(images)):
    meta = json.loads(open(os.path.join(images, folder, "metadata.jsonl")).read())
    for name in sorted(os.listdir(os.path.join(images, folder, "samples"))):
        # a scripted verdict: the first sample of every prompt passes
        rows.append({"filename": f"{folder}/samples/{name}", "tag": meta["tag"], "prompt": meta["prompt"],
                     "correct": name == "0000.png", "reason": "", "metadata": json.dumps(meta)})
open(out, "w").write("".join(json.dumps(r) + "\\n" for r in rows))
"""


def test_geneval_is_scored_by_the_external_evaluator_and_summarized_as_geneval_does(gen, tmp_path):
    from tasks.benchmark_scores import score_geneval

    script = tmp_path / "evaluate_images.py"
    script.write_text(FAKE_GENEVAL)
    params = amused_params(geneval={"command": f"{sys.executable} {script} {{images}} {{results}}"})
    suite = load_suite("geneval", params, tmp_path)
    cell, out = tmp_path / "cell", tmp_path / "out"
    out.mkdir()
    generate_cell(gen, suite, base_knobs(params.schedule), 0, 64, cell)
    metrics = score_geneval(params, suite, cell, out)
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 10
    # the five first GenEval prompts are single_object: one tag, half its images correct
    assert metrics == {"geneval.overall": 0.5, "geneval.single_object": 0.5, "geneval.images_correct": 0.5,
                       "geneval.prompts_correct": 1.0}

    broken = amused_params(geneval={"command": f"{sys.executable} -c 'import sys; sys.exit(\"no detector\")'"})
    with pytest.raises(InputError, match="exited 1 without writing .*no detector"):
        score_geneval(broken, suite, cell, out / "x")
    with pytest.raises(InputError, match="benchmark.geneval.command: not set"):
        score_geneval(amused_params(), suite, cell, out)


TWO_PROMPTS = Suite("geneval", ["a photo of a bench", "a photo of two cows"],
                    [{"tag": "single_object", "prompt": "a photo of a bench"},
                     {"tag": "counting", "prompt": "a photo of two cows"}], 2)


def results_rows(suite: Suite = TWO_PROMPTS) -> list[dict]:
    """A well-formed results.jsonl's rows for the suite (GenEval's filename is the image's full path)."""
    return [{"filename": f"/abs/images/{p:05d}/samples/{j:04d}.png", "tag": meta["tag"], "prompt": meta["prompt"],
             "correct": j == 0, "reason": "", "metadata": json.dumps(meta)}
            for p, meta in enumerate(suite.metadata) for j in range(suite.samples)]


@pytest.mark.parametrize("fault, message", [
    (lambda rows: rows[1].update(correct="false"), r"results.jsonl:2: correct is \"false\", not a JSON boolean"),
    (lambda rows: rows[1].update(correct=0), r"results.jsonl:2: correct is 0, not a JSON boolean"),
    (lambda rows: rows.insert(3, dict(rows[2])), r"results.jsonl:4: a second row for 00001/samples/0000.png "
     r"\(the first is line 3\)"),
    (lambda rows: rows.pop(2), r"results.jsonl: no row for 1 of 4 images \(first: 00001/samples/0000.png\)"),
    (lambda rows: rows.append(dict(rows[0], filename="/abs/images/00002/samples/0000.png")),
     r"results.jsonl:5: '/abs/images/00002/samples/0000.png' is no image of this cell \(2 prompts × 2 samples"),
    (lambda rows: rows[3].update(tag="colors"),
     r"results.jsonl:4: tag 'colors' for 00001/samples/0001.png, whose spec's tag is 'counting'"),
], ids=["string-false", "number", "duplicated", "missing", "extra", "wrong-tag"])
def test_genevals_results_are_read_strictly_one_boolean_row_per_image_with_its_specs_tag(tmp_path, fault, message):
    from tasks.benchmark_scores import read_geneval_results

    results = tmp_path / "results.jsonl"
    rows = results_rows()
    results.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert [(r["tag"], r["correct"]) for r in read_geneval_results(results, TWO_PROMPTS)] == [
        ("single_object", True), ("single_object", False), ("counting", True), ("counting", False)]
    fault(rows)
    results.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(InputError, match=message) as err:
        read_geneval_results(results, TWO_PROMPTS)
    assert "\n" not in str(err.value)


def test_a_geneval_evaluator_past_its_timeout_is_stopped_with_its_children(tmp_path):
    import os
    import time

    from tasks.benchmark_scores import score_geneval

    pid_file = tmp_path / "child.pid"
    params = amused_params(geneval={"command": f"sleep 60 & echo $! > {pid_file}; wait; echo {{images}} {{results}}",
                                    "timeout_s": 1})
    start = time.monotonic()
    with pytest.raises(InputError, match=r"^benchmark.geneval.command: still running after "
                                         r"benchmark.geneval.timeout_s = 1 s, stopped$"):
        score_geneval(params, TWO_PROMPTS, tmp_path / "cell", tmp_path)
    assert time.monotonic() - start < 10
    child = int(pid_file.read_text())
    for _ in range(50):  # the shell's child (a detector run) is killed too, not left behind
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"the evaluator's child {child} outlived the timeout")


def test_genevals_summary_is_the_mean_over_tags_of_each_tags_image_accuracy():
    rows = ([{"tag": "counting", "correct": c, "metadata": f"c{i // 2}"} for i, c in enumerate([1, 0, 0, 0])]
            + [{"tag": "colors", "correct": c, "metadata": f"k{i}"} for i, c in enumerate([1, 1])])
    s = geneval_summary(rows)
    assert s["counting"] == 0.25 and s["colors"] == 1.0 and s["overall"] == 0.625
    assert s["images_correct"] == 0.5 and s["prompts_correct"] == 0.75  # c0 yes, c1 no, k0 yes, k1 yes


def test_imagereward_and_hps_summaries_follow_their_scripts():
    # ImageReward: the mean of per-prompt means (prompt 0 has 3 images, prompt 1 one)
    assert imagereward_summary([1.0, 2.0, 3.0, 10.0], [0, 0, 0, 1]) == {"mean": 6.0}
    # HPS: ×100; per style the mean of chunk-of-80 means (100 scores: a chunk of 80 and one of 20)
    cos = [0.2] * 80 + [0.3] * 20 + [0.25] * 4
    styles = ["anime"] * 100 + ["photo"] * 4
    s = hps_summary(cos, styles)
    assert s["anime"] == pytest.approx(25.0) and s["photo"] == pytest.approx(25.0)  # (20 + 30) / 2, not 22
    assert s["average"] == pytest.approx(100 * np.mean(cos))


class ScriptedVQA:
    """Says yes to everything except the questions it was told to deny; tile 3 (bottom right) denies all."""

    def __init__(self, deny: set[str]):
        self.deny, self.calls = deny, 0

    def answer(self, images, questions):
        self.calls += 1
        n = len(questions) // 4
        return [("no" if q in self.deny or i // n == 3 else "yes") for i, q in enumerate(questions)]


def test_dpg_is_scored_on_2x2_grids_of_the_samples_with_its_dependency_rule(gen, tmp_path, monkeypatch):
    from cogrpo.benchmarks import dpg
    from tasks import benchmark_scores

    graph = dpg.load_question_graph(SAMPLE_CSV, strict=False)
    whole = lambda v: all(p == 0 or p in v.questions for q in v.questions.values() for p in q.parents)  # noqa: E731
    first, item = next((k, v) for k, v in graph.items() if whole(v) and any(any(q.parents) for q in v.questions.values()))
    child = next(q for q in item.questions.values() if any(q.parents))
    parent = item.questions[next(p for p in child.parents if p)]
    suite = Suite("dpg", [first], [{"item_id": first, "prompt": first}], 4)
    params = amused_params(dpg={"csv": str(SAMPLE_CSV), "vqa_model": str(tmp_path)})
    cell, out = tmp_path / "cell", tmp_path / "out"
    out.mkdir()
    generate_cell(gen, suite, base_knobs(params.schedule), 0, 64, cell)
    vqa = ScriptedVQA({parent.question})
    monkeypatch.setattr("cogrpo.benchmarks.vqa.load_vqa", lambda kind, path: vqa)
    metrics = benchmark_scores.score_dpg(params, suite, cell, out)
    # DPG's rule by hand: denied questions score 0, then in CSV order a question with a parent at 0 scores 0
    score = {q.qid: float(q.question != parent.question) for q in item.questions.values()}
    for q in item.questions.values():
        if any(p and score[p] == 0 for p in q.parents):
            score[q.qid] = 0.0
    assert score[child.qid] == 0.0 and sum(score.values()) > 0
    # three tiles answer so; the fourth (bottom right) says no to everything
    assert metrics["dpg.score"] == pytest.approx(100 * 3 * np.mean(list(score.values())) / 4)
    grid = np.asarray(Image.open(out / "dpg_grids" / f"{first}.png"))
    tile = np.asarray(Image.open(cell / "images/00000/samples/0003.png"))
    h, w = tile.shape[:2]
    assert grid.shape[:2] == (2 * h, 2 * w) and (grid[h:, w:] == tile).all()  # sample 3 is the bottom-right tile
    assert vqa.calls == 1


def test_published_suites_need_a_backbone_that_reads_text_and_dpg_a_square_grid():
    with pytest.raises(InputError, match="benchmark.suites.*amused"):
        parse_params({"benchmark": {"suites": ["embedded", "geneval"]}})
    with pytest.raises(InputError, match="benchmark.samples_per_prompt.dpg.*square"):
        parse_params({"benchmark": {"samples_per_prompt": {"dpg": 3}}})
    with pytest.raises(InputError, match="benchmark.steps.1 = 17 exceeds the 16 tokens"):
        parse_params({"benchmark": {"steps": [2, 17]}})


def test_a_batch_claimed_by_a_live_worker_is_left_to_it_and_a_dead_workers_claim_is_taken_over(gen, tmp_path):
    import os
    import subprocess
    import time

    from tasks.cells import HOST, REMOTE_CLAIM_S

    suite = load_suite("geneval", amused_params(), tmp_path)  # 3 batches of 2 prompts
    knobs, cell = base_knobs(amused_params().schedule), tmp_path / "cell"
    done = cell / "done"
    done.mkdir(parents=True)
    live = subprocess.Popen(["sleep", "30"])
    (done / "00001.lock").write_text(f"{HOST} {live.pid}")  # a live worker of this machine
    dead = subprocess.Popen(["true"])
    dead.wait()
    (done / "00002.lock").write_text(f"{HOST} {dead.pid}")  # one killed mid-batch
    (done / "00000.lock").write_text(f"elsewhere {os.getpid()}")  # another machine's, fresh: its pid means nothing here
    try:
        assert generate_cell(gen, suite, knobs, 0, 2, cell) == 1  # batch 2 only
        assert sorted(p.name for p in done.iterdir()) == ["00000.lock", "00001.lock", "00002"]
        old = time.time() - REMOTE_CLAIM_S - 1
        os.utime(done / "00000.lock", (old, old))  # the other machine's claim, long abandoned
        assert generate_cell(gen, suite, knobs, 0, 2, cell) == 1  # batch 0
        assert sorted(p.name for p in done.iterdir()) == ["00000", "00001.lock", "00002"]
    finally:
        live.kill()


def test_a_wait_on_another_workers_batch_says_what_it_waits_for_and_how_long(monkeypatch, tmp_path):
    """A stopped shard worker holds its batch for ever (its pid lives): the stage's wait names the lock, the
    holder and the time waited, instead of waiting in silence."""
    import subprocess

    import tasks.cells as cells
    from tasks.cells import HOST, Cell, wait_for_cells

    params = amused_params()
    suite = load_suite("geneval", params, tmp_path)
    cell = Cell(tmp_path / "cell", suite, base_knobs(params.schedule), "model")
    (cell.folder / "done").mkdir(parents=True)
    worker = subprocess.Popen(["sleep", "30"])  # stands in for a suspended worker: alive, never finishing
    (cell.folder / "done" / "00001.lock").write_text(f"{HOST} {worker.pid}")
    polls = iter([False] * 5 + [True])
    monkeypatch.setattr(cells, "generate_cells", lambda *a, **k: {})
    monkeypatch.setattr(cells, "cell_done", lambda *a: next(polls))
    monkeypatch.setattr(cells, "WAIT_SAY_S", 0.0)
    said: list[str] = []
    try:
        wait_for_cells(params, {}, [cell], poll_s=0.01, warn=said.append)
    finally:
        worker.kill()
    assert len(said) == 5  # one per poll here (every WAIT_SAY_S)
    assert said[0].startswith("waited ") and "for 1 batch other workers hold" in said[0]
    assert f"{cell.folder}/done/00001.lock (pid {worker.pid} on {HOST}, claimed " in said[0]


def test_the_state_folder_keeps_images_only_while_what_makes_them_is_unchanged(tmp_path):
    from flows.stage_runs import state_folder

    inputs = {}
    for arg in ("prompts", "tokenizer", "base", "trained"):
        (tmp_path / arg).mkdir()
        (tmp_path / arg / "f").write_text(arg)
        inputs[arg] = tmp_path / arg
    base = parse_params({})
    folder = lambda params, inputs=inputs: state_folder("benchmark", params, inputs, str(tmp_path))  # noqa: E731
    same = {"benchmark.suites": ["embedded"], "benchmark.steps": [3], "benchmark.variants": ["trained-base"],
            "eval.shards": 4, "benchmark.geneval.timeout_s": 60}
    changed = {"benchmark.max_prompts": 3, "benchmark.samples_per_prompt.geneval": 2, "eval.seed": 5,
               "eval.batch_prompts": 8, "schedule.cfg": 2.0, "model.dim": 64}
    from cogrpo.config import with_overrides

    for key, value in same.items():
        assert folder(with_overrides(base, {key: value})) == folder(base), key
    for key, value in changed.items():
        assert folder(with_overrides(base, {key: value})) != folder(base), key
    before = folder(base)
    (tmp_path / "trained" / "f").write_text("another model")
    assert folder(base) != before  # a retrained model: its images are made again


def test_a_dpg_question_graph_without_the_benchmarks_prompts_fails_before_generation(tmp_path):
    params = amused_params(suites=["dpg"], dpg={"csv": str(SAMPLE_CSV)})  # a real graph, of other prompts
    with pytest.raises(InputError, match="of 5 DPG-Bench prompts have no questions there"):
        load_suite("dpg", params, tmp_path)


def test_scorers_missing_or_misconfigured_fail_at_params_load(gen):
    from cogrpo.config import ParamsError
    from cogrpo.validate import cross_check

    amused = {"model": {"backbone": "amused", "pretrained": str(gen.folder)}}
    with pytest.raises(ParamsError, match="benchmark.geneval.command.*lacks \\{results\\}"):
        cross_check(parse_params(amused | {"benchmark": {"suites": ["geneval"],
                                                         "geneval": {"command": "run {images}"}}}))
    with pytest.raises(ParamsError, match="benchmark.dpg.csv"):
        cross_check(parse_params(amused | {"benchmark": {"suites": ["dpg"]}}))
    with pytest.raises(ParamsError, match="reward_models.hpsv2.v2_1"):
        cross_check(parse_params(amused | {"benchmark": {"suites": ["hpsv2"]}}))


def test_the_stage_reports_per_variant_the_steps_to_reach_the_bases_score_at_8_and_16_steps(tmp_path):
    import polars as pl

    from flows.metrics import benchmark_json, benchmark_report
    from tasks.benchmark import steps_to_base

    grid = [2, 4, 6, 8, 12, 16]
    curves = {("geneval.overall", "base-base"): [0.1, 0.3, 0.4, 0.5, 0.6, 0.7],
              ("geneval.overall", "trained-learned"): [0.2, 0.5, 0.55, 0.6, 0.65, 0.68],  # base@8 at 4, never 0.7
              ("geneval.colors", "base-base"): [0.0] * 6, ("geneval.colors", "trained-learned"): [1.0] * 6,
              ("dpg.score", "base-base"): [0.3, 0.4, 0.45, 0.5, 0.55, 0.6],
              ("dpg.score", "trained-learned"): [0.3, 0.4, 0.45, 0.5, 0.55, 0.6]}
    rows = [{"suite": "embedded", "metric": m, "steps": t, "variant": v, "model": v.split("-")[0],
             "schedule": v.split("-")[1], "value": x} for (m, v), xs in curves.items() for t, x in zip(grid, xs)]
    pl.DataFrame(rows).write_csv(tmp_path / "table.csv")
    scores = {"embedded": {}}
    for r in rows:
        scores["embedded"].setdefault(r["metric"], {}).setdefault(r["variant"], {})[str(r["steps"])] = r["value"]

    steps = steps_to_base(scores)["embedded"]
    assert set(steps) == {"geneval.overall", "dpg.score"}  # the headline metrics only
    assert steps["geneval.overall"]["trained-learned"] == {"8": {"steps": 4.0, "saved": 2.0},
                                                          "16": {"steps": None, "saved": None}}
    assert steps["geneval.overall"]["base-base"] == {"8": {"steps": 8.0, "saved": 1.0},
                                                    "16": {"steps": 16.0, "saved": 1.0}}
    assert steps["dpg.score"]["trained-learned"]["16"]["steps"] == 16.0

    result = {"scores": scores, "steps_to_base": steps_to_base(scores)}
    metrics = json.loads(benchmark_json(result, tmp_path))
    assert metrics["steps_to_base"]["embedded"] == steps and metrics["embedded"] == scores["embedded"]
    report = benchmark_report(result, tmp_path)
    assert "| 6 steps" in report and "| 12 steps" in report and "## Steps saved" in report
    assert re.search(r"\| embedded \| geneval.overall \| trained-learned \| 4.0 +\| 2.00× +\| > 16 +\| — +\|", report)

    # a grid without 8 or 16 (or without the base variant) has none: the outputs are the scores alone, as before
    few = {"embedded": {m: {v: {s: x for s, x in c.items() if s in ("2", "4")} for v, c in vs.items()}
                        for m, vs in scores["embedded"].items()}}
    assert steps_to_base(few) == {}
    assert json.loads(benchmark_json({"scores": few, "steps_to_base": {}}, tmp_path)) == few
    no_base = {"embedded": {m: {"trained-learned": vs["trained-learned"]} for m, vs in scores["embedded"].items()}}
    assert steps_to_base(no_base) == {}
    assert "Steps saved" not in benchmark_report({"scores": few, "steps_to_base": {}}, tmp_path)
