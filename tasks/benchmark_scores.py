"""Scoring a generated benchmark cell (tasks/cells.py's layout), one function per suite: each writes its
per-image or per-prompt records next to the images and returns {metric: value}.

embedded     the world's exact checker; results.jsonl holds GenEval's six tags' rows (GenEval's summary script on it
             prints metrics' geneval.overall), results_dpg.jsonl the DPG-style rows.
geneval      GenEval's own evaluator, an external command (benchmark.geneval.command, stopped after its timeout_s),
             writes results.jsonl, read strictly; the summary is GenEval's summary_scores.py's, computed from it.
dpg          a VQA model answers DPG's questions on each sample (the four samples are the 2×2 grid's tiles).
imagereward, hpsv2   the reward server (reward_server/), one score per image; summaries as their benchmarks'.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
from pathlib import Path

from cogrpo.benchmarks.aggregate import geneval_summary, hps_summary, imagereward_summary
from cogrpo.config import Params
from cogrpo.errors import InputError
from cogrpo.io import write_text_atomic
from tasks.cells import Suite, read_images

SERVER_BATCH = 32  # images per request to the reward server


def _jsonl(path: Path, rows: list[dict]) -> None:
    write_text_atomic(path, "".join(json.dumps(r) + "\n" for r in rows))


def score_embedded(params: Params, suite: Suite, cell: Path, out: Path) -> dict[str, float]:
    from cogrpo.benchmarks.geneval import score, summarize
    from cogrpo.world.checker import Checker
    from cogrpo.world.prompts import GENEVAL_TAGS
    from cogrpo.world.scenes import World

    images, prompt_index = read_images(suite, cell, params.eval.batch_prompts)
    rows = score(Checker(World(params.world)), images, suite.metadata, prompt_index)
    _jsonl(out / "results.jsonl", [r for r in rows if r["tag"] in GENEVAL_TAGS])
    _jsonl(out / "results_dpg.jsonl", [r for r in rows if r["tag"] not in GENEVAL_TAGS])
    summary = summarize(rows)
    return {f"geneval.{k}": v for k, v in summary["geneval"].items()} | {"dpg.score": summary["dpg"]["score"]}


def score_geneval(params: Params, suite: Suite, cell: Path, out: Path) -> dict[str, float]:
    cfg = params.benchmark.geneval
    if not cfg.command:
        raise InputError("benchmark.geneval.command: not set; GenEval's evaluator (its object detector and colour "
                         "classifier) scores the geneval suite, where you installed it")
    results = (out / "results.jsonl").resolve()
    filled = cfg.command.replace("{images}", shlex.quote(str((cell / "images").resolve()))).replace(
        "{results}", shlex.quote(str(results)))
    code, output = _run_evaluator(filled, cfg.timeout_s)
    if code != 0 or not results.is_file():
        last = output.strip().splitlines()[-1:] or ["no output"]
        raise InputError(f"benchmark.geneval.command exited {code} without writing {results}: {last[0]}")
    return {f"geneval.{k}": v for k, v in geneval_summary(read_geneval_results(results, suite)).items()}


def _run_evaluator(command: str, timeout_s: float) -> tuple[int, str]:
    """(exit status, stderr or else stdout) of the shell command, in a process group of its own so that a
    timeout or an interrupt ends the shell's children too (`cd ~/geneval && python …` outlives a killed shell)."""
    proc = subprocess.Popen(command, shell=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise InputError(f"benchmark.geneval.command: still running after benchmark.geneval.timeout_s = "
                         f"{timeout_s:g} s, stopped") from None
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    return proc.returncode, stderr or stdout


def read_geneval_results(results: Path, suite: Suite) -> list[dict]:
    """The evaluator's rows, read strictly: one per image of the cell (its `filename` ends in GenEval's
    <prompt:05d>/samples/<sample:04d>.png), `correct` a JSON boolean (bool("false") would count as correct), the
    tag of that prompt's spec. Rows are keyed {"tag", "correct", "metadata": the prompt's folder}, as
    geneval_summary reads them (GenEval groups a prompt's images by their metadata: one prompt, one folder)."""
    tags = {f"{p:05d}/samples/{j:04d}.png": meta["tag"] for p, meta in enumerate(suite.metadata)
            for j in range(suite.samples)}
    line_of: dict[str, int] = {}
    rows = []
    for n, line in enumerate(results.read_text().splitlines(), 1):
        try:
            row = json.loads(line)
            image, tag, correct = "/".join(Path(row["filename"]).parts[-3:]), row["tag"], row["correct"]
        except (ValueError, KeyError, TypeError) as err:
            raise InputError(f"{results}:{n}: not a GenEval results row ({type(err).__name__}: {err})") from None
        if not isinstance(correct, bool):
            raise InputError(f"{results}:{n}: correct is {json.dumps(correct)}, not a JSON boolean (true or false)")
        if image not in tags:
            raise InputError(f"{results}:{n}: {row['filename']!r} is no image of this cell ({len(suite.prompts)} "
                             f"prompts × {suite.samples} samples, <prompt:05d>/samples/<sample:04d>.png)")
        if image in line_of:
            raise InputError(f"{results}:{n}: a second row for {image} (the first is line {line_of[image]})")
        if tag != tags[image]:
            raise InputError(f"{results}:{n}: tag {tag!r} for {image}, whose spec's tag is {tags[image]!r}")
        line_of[image] = n
        rows.append({"tag": tag, "correct": correct, "metadata": image.split("/")[0]})
    missing = [image for image in tags if image not in line_of]
    if missing:
        raise InputError(f"{results}: no row for {len(missing)} of {len(tags)} images (first: {missing[0]})")
    return rows


def score_dpg(params: Params, suite: Suite, cell: Path, out: Path) -> dict[str, float]:
    """Each prompt's samples tiled into DPG's grid image (written to dpg_grids/<item_id>.png, the layout DPG's own
    script reads), every question asked of every tile. The question graph is read as DPG reads it (strict=False:
    its quirks kept, cogrpo.benchmarks.dpg); an item DPG's script would fail is left out, as DPG leaves it out."""
    import math

    import numpy as np
    from PIL import Image

    from cogrpo.benchmarks import dpg

    cfg = params.benchmark.dpg
    if not cfg.csv or not cfg.vqa_model:
        raise InputError("benchmark.dpg.csv and benchmark.dpg.vqa_model: DPG-Bench's question graph (dpg_bench.csv) "
                         "and a VQA model's folder are needed to score the dpg suite")
    graph = dpg.load_question_graph(cfg.csv, strict=False)
    vqa = _vqa(cfg.vqa, cfg.vqa_model)
    images, _ = read_images(suite, cell, params.eval.batch_prompts)
    side = math.isqrt(suite.samples)
    (out / "dpg_grids").mkdir(parents=True, exist_ok=True)
    records, scores = [], []
    for p, meta in enumerate(suite.metadata):
        mine = images[p * suite.samples:(p + 1) * suite.samples]
        grid = np.concatenate([np.concatenate(list(mine[r * side:(r + 1) * side]), axis=1) for r in range(side)])
        Image.fromarray(grid).save(out / "dpg_grids" / f"{meta['item_id']}.png")
        item = graph.get(meta["item_id"])
        if item is None:
            records.append({"item_id": meta["item_id"], "score": None, "failed": "no questions in the CSV"})
            continue
        try:
            result = dpg.score_images(vqa, item, grid, grid=side)
        except dpg.MissingParent as err:  # DPG's script drops the image
            records.append({"item_id": meta["item_id"], "score": None, "failed": str(err)})
            continue
        scores.append(result)
        records.append({"item_id": meta["item_id"], "score": result.score})
    _jsonl(out / "dpg_scores.jsonl", records)
    summary = dpg.summarize(scores)
    return {"dpg.score": summary["score"], "dpg.items": float(summary["items"])} | {
        f"dpg.l1.{k}": v for k, v in summary["l1"].items()} | {
        f"dpg.broad.{k}": v for k, v in summary["category_broad"].items()}


_VQA: dict[tuple[str, str], object] = {}


def _vqa(kind: str, path: str):
    """The VQA model, loaded once per process (every cell of a stage asks the same one)."""
    from cogrpo.benchmarks.vqa import load_vqa

    if (kind, path) not in _VQA:
        _VQA[(kind, path)] = load_vqa(kind, path)
    return _VQA[(kind, path)]


def _served(params: Params, url: str, label: str, suite: Suite, cell: Path) -> list[float]:
    from cogrpo.rewards.remote import RewardClient

    client = RewardClient(url, params.reward_models.request_timeout_s)
    images, prompt_index = read_images(suite, cell, params.eval.batch_prompts)
    prompts = [suite.prompts[p] for p in prompt_index.tolist()]
    return [s for i in range(0, len(images), SERVER_BATCH)
            for s in client.score(label, images[i:i + SERVER_BATCH], prompts[i:i + SERVER_BATCH])]


def score_imagereward(params: Params, suite: Suite, cell: Path, out: Path, url: str) -> dict[str, float]:
    scores = _served(params, url, "imagereward", suite, cell)
    index = [p for p in range(len(suite.prompts)) for _ in range(suite.samples)]
    _jsonl(out / "scores.jsonl", [{"prompt_index": p, "id": suite.metadata[p]["id"], "score": s}
                                  for p, s in zip(index, scores)])
    return {f"imagereward.{k}": v for k, v in imagereward_summary(scores, index).items()}


def score_hps(params: Params, suite: Suite, cell: Path, out: Path, url: str) -> dict[str, float]:
    metrics = {}
    for version in params.benchmark.hpsv2_versions:
        cosines = _served(params, url, f"hpsv2_{version}", suite, cell)
        index = [p for p in range(len(suite.prompts)) for _ in range(suite.samples)]
        styles = [suite.metadata[p]["tag"] for p in index]
        _jsonl(out / f"scores_hpsv2_{version}.jsonl", [{"prompt_index": p, "style": st, "cosine": c}
                                                       for p, st, c in zip(index, styles, cosines, strict=True)])
        metrics |= {f"hpsv2_{version}.{k}": v for k, v in hps_summary(cosines, styles).items()}
    return metrics
