"""DPG-Bench scoring, matching DPG's own script (TencentQQGYLab/ELLA `dpg_bench/compute_dpg_bench.py`).

DPG asks every question of a prompt's question graph of every tile of the prompt's image (a 2x2 grid of
samples); an answer scores 1 when it is exactly "yes". A question with a parent (dependency id != 0) that
scored 0 scores 0 itself. The prompt's score is the mean over tiles of the mean over questions; the benchmark's
score is the mean over prompts, x100. What DPG's script does oddly, and we keep on purpose:
- it skips the CSV's first data row (`skip_first_row`, ELLA issue #61), so the first item loses a question; where a sibling
  depends on it, the script fails on that item (we raise MissingParent from `score_item`, as DPG drops the image);
- its category scores use the answers *before* parent zeroing, and of the *last tile only* (ELLA issue #60);
- its categories come from the `tuple` column (L2 = text before "(", L1 = L2's text before "-"), not from the
  category columns; per-question scores are pooled over all items before the mean.
Our additions: per-`category_broad` means (after zeroing, averaged over tiles), stricter CSV checks.
"""

from __future__ import annotations

import csv
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
from PIL import Image

from cogrpo.errors import InputError

COLUMNS = ("item_id", "text", "keywords", "proposition_id", "dependency", "category_broad", "category_detailed",
           "tuple", "question_natural_language")


class MissingParent(InputError):
    """A question depends on a proposition its item lacks: DPG's script fails that image and leaves it out."""


@dataclass(frozen=True)
class Question:
    qid: int
    question: str
    parents: tuple[int, ...]  # in CSV order; 0 means "no parent"
    proposition: str  # the `tuple` column, e.g. "entity - whole (cat)"
    category_broad: str
    category_detailed: str
    line: int  # CSV line (the header is line 1)

    @property
    def category(self) -> str:
        """DPG's L2 category: the tuple's text before "(", stripped (e.g. "entity - whole")."""
        return self.proposition.split("(")[0].strip()


def l1_of(category: str) -> str:
    """DPG's L1 category of an L2 one: its text before the first "-", stripped."""
    return category.split("-")[0].strip()


@dataclass(frozen=True)
class Item:
    item_id: str
    text: str
    questions: dict[int, Question]  # by proposition id, in CSV order (DPG's zeroing order)


@dataclass(frozen=True)
class ItemScore:
    item_id: str
    score: float  # mean over tiles of the tile scores (DPG's per-prompt score)
    tile_scores: list[float]  # per tile: mean over questions after parent zeroing
    categories: dict[str, list[float]]  # DPG's L2 category -> per question 0/1, last tile, before zeroing
    broad: dict[str, list[float]]  # category_broad -> per question mean over tiles after zeroing (ours)

    @property
    def category_means(self) -> dict[str, float]:
        return {k: float(np.mean(v)) for k, v in self.categories.items()}

    @property
    def broad_means(self) -> dict[str, float]:
        return {k: float(np.mean(v)) for k, v in self.broad.items()}


def _int(value: str, what: str, where: str) -> int:
    try:
        return int(value.strip())
    except ValueError:
        raise InputError(f"{where}: {what} {value!r} is not an integer") from None


def load_question_graph(path: str | Path, skip_first_row: bool = True, strict: bool = True) -> dict[str, Item]:
    """Items of a CSV in DPG's `dpg_bench.csv` schema, by item_id, in file order.

    skip_first_row: drop the first data row, as DPG's script does (`if i == 0: continue`), so scores match its
    numbers; a dependency on that dropped proposition is allowed here and fails in `score_item`, as in DPG.
    Always an InputError naming file and line: missing file or column, a row of the wrong width, empty item_id
    or tuple, non-integer proposition_id or dependency. strict (default) also rejects an empty question, a
    dependency on a proposition not in the item, a proposition id repeated in an item and an item whose rows
    are not contiguous. strict=False reads these as DPG does: it asks a blank question verbatim, fails the item
    when it reaches a missing parent, lets a repeated proposition's last row replace the earlier one (in the
    earlier one's place), and restarts an item that reappears (its earlier rows are lost).
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: DPG question CSV not found")
    items: dict[str, Item] = {}
    skipped: tuple[str, int] | None = None
    last_id = None
    with path.open(encoding="utf-8-sig", newline="") as f:
        reader = csv.reader(f)
        header = next(reader, None)
        missing = [c for c in COLUMNS if c not in (header or [])]
        if missing:
            raise InputError(f"{path}:1: missing column(s) {', '.join(missing)}")
        col = {c: header.index(c) for c in COLUMNS}
        first = True
        for row in reader:
            if not row:  # blank line: pandas skips it too
                continue
            where = f"{path}:{reader.line_num}"
            if len(row) != len(header):
                raise InputError(f"{where}: {len(row)} fields, the header has {len(header)}")
            get = {c: row[i] for c, i in col.items()}
            for c in ("item_id", "tuple"):
                if not get[c].strip():
                    raise InputError(f"{where}: empty {c}")
            qid = _int(get["proposition_id"], "proposition_id", where)
            parents = tuple(_int(d, "dependency", where) for d in get["dependency"].split(","))
            if first and skip_first_row:
                first, skipped = False, (get["item_id"], qid)
                continue
            first = False
            if strict and not get["question_natural_language"].strip():
                raise InputError(f"{where}: empty question for {get['item_id']} proposition {qid}")
            item_id = get["item_id"]
            if item_id != last_id:  # a new run of rows: DPG starts the item afresh (in its first place)
                if strict and item_id in items:
                    raise InputError(f"{where}: item {item_id} appears again after other items")
                items[item_id] = Item(item_id, get["text"], {})
            item = items[item_id]
            if strict and qid in item.questions:
                raise InputError(f"{where}: proposition {qid} repeated in item {item_id}")
            item.questions[qid] = Question(qid, get["question_natural_language"], parents, get["tuple"],
                                           get["category_broad"], get["category_detailed"], reader.line_num)
            last_id = item_id
    if strict:
        for item in items.values():
            for q in item.questions.values():
                bad = [p for p in q.parents if p != 0 and p not in item.questions and (item.item_id, p) != skipped]
                if bad:
                    raise InputError(f"{path}:{q.line}: item {item.item_id} proposition {q.qid} depends on "
                                     f"{bad[0]}, which the item does not have")
    return items


def score_item(item: Item, answers_per_tile: Sequence[dict[int, str]]) -> ItemScore:
    """Score one prompt from its answers ({qid: answer} per tile), as DPG's script does.

    Zeroing walks the questions in CSV order and reads the scores it is zeroing (a zeroed parent zeroes its
    children that come after it); for each question it stops at its first parent scoring 0. A parent missing
    from the item raises InputError when reached (DPG's script then drops the image from every score).
    """
    if not answers_per_tile:
        raise InputError(f"item {item.item_id}: no tiles to score")
    qids = list(item.questions)
    tile_scores, after = [], {q: 0.0 for q in qids}
    before: dict[int, float] = {}
    for answers in answers_per_tile:
        lost = [q for q in qids if q not in answers]
        if lost:
            raise InputError(f"item {item.item_id}: no answer for proposition {lost[0]}")
        scores = {q: float(answers[q] == "yes") for q in qids}
        before = dict(scores)
        for q in qids:
            for p in item.questions[q].parents:
                if p == 0:
                    continue
                if p not in scores:
                    raise MissingParent(f"item {item.item_id}: proposition {q} depends on {p}, which the item does "
                                     f"not have (DPG's script fails this image)")
                if scores[p] == 0:
                    scores[q] = 0
                    break
        tile_scores.append(sum(scores.values()) / len(scores))
        for q in qids:
            after[q] += scores[q] / len(answers_per_tile)
    categories: dict[str, list[float]] = defaultdict(list)
    broad: dict[str, list[float]] = defaultdict(list)
    for q in qids:
        categories[item.questions[q].category].append(before[q])
        broad[item.questions[q].category_broad].append(after[q])
    return ItemScore(item.item_id, sum(tile_scores) / len(tile_scores), tile_scores, dict(categories), dict(broad))


def summarize(scores: Sequence[ItemScore]) -> dict:
    """DPG's printed numbers, x100: `score` (mean over items), `l1` and `l2` (per-question scores pooled over
    items, then averaged; sorted by name, where DPG prints L1 in set order), plus our `category_broad`."""
    if not scores:
        raise InputError("no DPG item scores to summarize")
    l2: dict[str, list[float]] = defaultdict(list)
    broad: dict[str, list[float]] = defaultdict(list)
    for s in scores:
        for k, v in s.categories.items():
            l2[k].extend(v)
        for k, v in s.broad.items():
            broad[k].extend(v)
    l1: dict[str, list[float]] = defaultdict(list)
    for k in sorted(l2):
        l1[l1_of(k)].extend(l2[k])
    pct = lambda d: {k: float(np.mean(d[k])) * 100 for k in sorted(d)}  # noqa: E731
    return {"score": float(np.mean([s.score for s in scores])) * 100, "items": len(scores),
            "l1": pct(l1), "l2": pct(l2), "category_broad": pct(broad)}


def tiles(image: np.ndarray | Image.Image, grid: int = 2) -> list[Image.Image]:
    """The grid x grid equal tiles of an image, row by row (DPG's crop order for 2x2: top-left, top-right,
    bottom-left, bottom-right). DPG crops a given `--resolution`; we take size // grid and reject sizes that
    grid does not divide. Arrays must be uint8 (H, W) or (H, W, C)."""
    if isinstance(image, np.ndarray):
        if image.dtype != np.uint8 or image.ndim not in (2, 3):
            raise InputError(f"image array must be uint8 (H, W) or (H, W, C), got {image.dtype} {image.shape}")
        image = Image.fromarray(image)
    w, h = image.size
    if grid < 1 or w % grid or h % grid:
        raise InputError(f"a {w}x{h} image does not split into a {grid}x{grid} grid")
    tw, th = w // grid, h // grid
    return [image.crop((c * tw, r * th, (c + 1) * tw, (r + 1) * th)) for r in range(grid) for c in range(grid)]


class VQA(Protocol):
    def answer(self, images: list[Image.Image], questions: list[str]) -> list[str]:
        """One answer per (image, question) pair."""
        ...


def score_images(vqa: VQA, item: Item, image: np.ndarray | Image.Image, grid: int = 2,
                 num_tiles: int | None = None) -> ItemScore:
    """Ask every question of the item of each tile (one batched call) and score it. num_tiles keeps the first
    tiles only, as DPG's `--pic-num` (its script defaults to 1, its `dist_eval.sh` to 4); None: all."""
    parts = tiles(image, grid)[:num_tiles]
    qids = list(item.questions)
    questions = [item.questions[q].question for q in qids]
    answers = vqa.answer([t for t in parts for _ in qids], questions * len(parts))
    if len(answers) != len(parts) * len(qids):
        raise RuntimeError(f"{type(vqa).__name__} gave {len(answers)} answers to {len(parts) * len(qids)} questions")
    n = len(qids)
    return score_item(item, [dict(zip(qids, answers[i * n : (i + 1) * n])) for i in range(len(parts))])
