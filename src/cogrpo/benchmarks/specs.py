"""Schemas of every benchmark prompt file, checked whole before anything is generated.

A bad row used to be evaluated silently (an unknown colour scores 0, a count of 99 can never be met) or
crash with a KeyError deep in evaluation. Here each file is read and validated up front; the first bad row
raises `InputError` with one line naming the file, the row and the key:

    <file>:<n>: <key>: <what is wrong>      JSON lines: n is the 1-based line number (as editors show it)
    <file>:item <i>: <key>: ...             a JSON list: i is the 0-based item index
    <file>:row <i>: <key>: ...              a parquet prompt set: i is the 0-based row (as `read_specs` counts)

Every loader returns `Prompt` records of one shape, whatever the benchmark.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (AfterValidator, BaseModel, ConfigDict, Field, StrictInt, StrictStr, ValidationError,
                      ValidationInfo, field_validator, model_validator)

from cogrpo.config import WorldConfig
from cogrpo.errors import InputError
from cogrpo.world.prompts import GENEVAL_TAGS
from cogrpo.world.spec import RELATIONS

# djghosh13/geneval evaluation/evaluate_images.py (commit 16f1681): the colours its CLIP classifier chooses
# among. A colour outside this list can never be recognised, so such a prompt always scores 0.
GENEVAL_COLORS = ("red", "orange", "yellow", "green", "blue", "purple", "pink", "brown", "black", "white")
# the relations GenEval's relative_position() can return; the world's RELATIONS are the same four
GENEVAL_RELATIONS = ("left of", "right of", "above", "below")
# evaluate_images.py keeps at most `max_objects` (default 16) detections per class: a larger count can never be met
GENEVAL_MAX_OBJECTS = 16
HPS_STYLES = ("anime", "concept", "paintings", "photo")  # HPSv2 scores each style, then averages them
EMBEDDED_TAGS = (*GENEVAL_TAGS, "dpg")


@dataclass(frozen=True)
class Prompt:
    """One prompt of any benchmark.

    index: position in its file (0-based); GenEval names each prompt's output folder by it (00000, 00001, …).
    group: what the benchmark groups or joins scores by: the GenEval/world tag, the HPSv2 style, the DPG-Bench
        item_id (names its images and keys its question graph), the ImageReward id.
    metadata: the row as read (for GenEval-style specs, the spec to evaluate against); do not mutate it.
    """

    index: int
    prompt: str
    group: str
    metadata: dict = field(hash=False, compare=False)


# --- schemas ------------------------------------------------------------------------------------------------


def _not_blank(text: str) -> str:
    if not text.strip():
        raise ValueError("empty prompt")
    return text


Text = Annotated[StrictStr, AfterValidator(_not_blank)]
# DPG-Bench and ImageReward name image files by id: no path separators or spaces
FileId = Annotated[StrictStr, Field(pattern=r"^[A-Za-z0-9_.-]+$")]


class _Row(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)  # a misspelt key is an error, not silently ignored


@dataclass(frozen=True)
class Vocab:
    """What a GenEval-style spec may ask for, passed to the schema as validation context: the names, the
    largest count that can be met (and why), and the board size when all objects must fit on one (the
    embedded world; None for real GenEval)."""

    tags: tuple[str, ...]
    classes: tuple[str, ...]
    colors: tuple[str, ...]
    relations: tuple[str, ...]
    max_count: int
    max_count_why: str
    cells: int | None = None


def _vocab(info: ValidationInfo) -> Vocab:
    if not info.context or not isinstance(info.context.get("vocab"), Vocab):
        raise TypeError("validate GenEval-style specs with context={'vocab': Vocab(...)}")
    return info.context["vocab"]


def _one_of(value: str, known: tuple[str, ...], what: str) -> str:
    if value not in known:
        listing = ", ".join(known) if len(known) <= 12 else ", ".join(known[:8]) + f", … ({len(known)} in all)"
        raise ValueError(f"unknown {what} {value!r} (known: {listing})")
    return value


class _Named(_Row):
    class_: StrictStr = Field(alias="class")

    @field_validator("class_")
    @classmethod
    def _class(cls, v: str, info: ValidationInfo) -> str:
        return _one_of(v, _vocab(info).classes, "class")


class Include(_Named):
    count: StrictInt = Field(ge=1)  # GenEval asks for at least `count`: 0 or less is no fact at all
    color: StrictStr | None = None
    position: tuple[StrictStr, StrictInt] | None = None  # (relation, index of an earlier include entry)

    @field_validator("color")
    @classmethod
    def _color(cls, v: str | None, info: ValidationInfo) -> str | None:
        return v if v is None else _one_of(v, _vocab(info).colors, "colour")

    @field_validator("position")
    @classmethod
    def _relation(cls, v: tuple[str, int] | None, info: ValidationInfo) -> tuple[str, int] | None:
        if v is not None:
            _one_of(v[0], _vocab(info).relations, "relation")
        return v


class Exclude(_Named):
    count: StrictInt = Field(ge=1)  # "fewer than 0" could never hold


class GenEvalSpec(_Row):
    """A row of GenEval's evaluation_metadata.jsonl; names checked against the context's Vocab."""

    tag: StrictStr
    include: list[Include] = Field(min_length=1)
    exclude: list[Exclude] = []
    prompt: Text

    @field_validator("tag")
    @classmethod
    def _tag(cls, v: str, info: ValidationInfo) -> str:
        return _one_of(v, _vocab(info).tags, "tag")

    @model_validator(mode="after")
    def _consistent(self, info: ValidationInfo) -> GenEvalSpec:
        vocab = _vocab(info)
        for i, inc in enumerate(self.include):
            if inc.count > vocab.max_count:
                raise ValueError(f"include[{i}].count: {inc.count} can never be met ({vocab.max_count_why})")
        for j, exc in enumerate(self.exclude):
            if exc.count > vocab.max_count + 1:  # "fewer than 99" then always holds: a free point, not a fact
                raise ValueError(f"exclude[{j}].count: fewer than {exc.count} always holds ({vocab.max_count_why})")
        for i, inc in enumerate(self.include):
            # GenEval reads matched_groups[index]: only an earlier entry has been matched by then
            if inc.position is not None and not 0 <= inc.position[1] < i:
                raise ValueError(f"include[{i}].position: index {inc.position[1]} does not point at an earlier "
                                 "include entry")
        for j, exc in enumerate(self.exclude):
            need = max((inc.count for inc in self.include if inc.class_ == exc.class_), default=0)
            if exc.count <= need:  # no image could pass both facts
                raise ValueError(f"exclude[{j}].count: fewer than {exc.count} {exc.class_} contradicts include's "
                                 f"at least {need}")
        return self


class EmbeddedSpec(GenEvalSpec):
    """A spec of the embedded world (GenEval's shape, the world's names): it must fit on the board,
    one object per cell, as the renderer places them (World.layout_for)."""

    @model_validator(mode="after")
    def _fits(self, info: ValidationInfo) -> EmbeddedSpec:
        cells = _vocab(info).cells
        total = sum(inc.count for inc in self.include)
        if cells is not None and total > cells:  # each count alone was checked against max_count = cells
            raise ValueError(f"include: asks for {total} objects in all, the board has {cells} cells")
        return self


class DpgRow(_Row):
    item_id: FileId
    prompt: Text


class HpsRow(_Row):
    tag: Literal[HPS_STYLES]  # type: ignore[valid-type]  (Literal of a tuple = Literal of its items)
    prompt: Text


class ImageRewardRow(_Row):
    id: FileId
    prompt: Text


# --- reading and error lines --------------------------------------------------------------------------------


def _where(loc: tuple) -> str:
    """('include', 0, 'class') -> 'include[0].class'"""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _first_error(err: ValidationError) -> str:
    e = err.errors()[0]
    key = _where(e["loc"])
    if e["type"] == "missing":
        what = "missing"
    elif e["type"] == "extra_forbidden":
        what = "unknown key"
    elif e["type"] == "value_error":  # our own messages name the value (and, for model checks, the key)
        what = e["msg"].removeprefix("Value error, ")
    else:
        shown = repr(e["input"])
        what = f"{e['msg']} (got {shown if len(shown) <= 60 else shown[:57] + '...'})"
    return f"{key}: {what}" if key else what


def _check(model: type[BaseModel], row: Any, where: str, vocab: Vocab | None = None) -> None:
    if not isinstance(row, dict):
        raise InputError(f"{where}: not a JSON object (got {type(row).__name__})")
    try:
        model.model_validate(row, context={"vocab": vocab})
    except ValidationError as err:
        raise InputError(f"{where}: {_first_error(err)}") from None


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"{path}: file not found") from None
    except UnicodeDecodeError:
        raise InputError(f"{path}: not UTF-8 text") from None
    except OSError as err:
        raise InputError(f"{path}: cannot read ({err.strerror or type(err).__name__})") from None


def _jsonl(path: str | Path) -> Iterable[tuple[int, str, Any]]:
    """(line number, 'file:line', parsed row) for each line; a blank or non-JSON line is an error (a blank
    line would shift GenEval's folder numbering and break its own scripts)."""
    path = Path(path)
    lines = _read_text(path).splitlines()
    if not any(line.strip() for line in lines):
        raise InputError(f"{path}: no prompts (empty file)")
    for n, line in enumerate(lines, 1):
        where = f"{path}:{n}"
        if not line.strip():
            raise InputError(f"{where}: empty line")
        try:
            yield n, where, json.loads(line)
        except json.JSONDecodeError as err:
            raise InputError(f"{where}: not JSON ({err.msg} at column {err.colno})") from None


def _unique(path: Path, key: str, ids: list[tuple[str, str]]) -> None:
    """ids: (where, id); the id names output files, so a repeat would overwrite another prompt's images."""
    first: dict[str, str] = {}
    for where, i in ids:
        if i in first:
            raise InputError(f"{where}: {key}: {i!r} repeats {first[i]}")
        first[i] = where


# --- loaders ------------------------------------------------------------------------------------------------


def load_object_names(path: str | Path) -> tuple[str, ...]:
    """GenEval's class list, one name a line (blank lines ignored)."""
    names = tuple(line.strip() for line in _read_text(Path(path)).splitlines() if line.strip())
    if not names:
        raise InputError(f"{path}: no object names (empty file)")
    return names


def load_geneval(path: str | Path, object_names_path: str | Path) -> list[Prompt]:
    """GenEval's evaluation_metadata.jsonl; group = tag."""
    vocab = Vocab(GENEVAL_TAGS, load_object_names(object_names_path), GENEVAL_COLORS, GENEVAL_RELATIONS,
                  GENEVAL_MAX_OBJECTS, f"GenEval detects at most {GENEVAL_MAX_OBJECTS} objects of a class")
    out = []
    for n, where, row in _jsonl(path):
        _check(GenEvalSpec, row, where, vocab)
        out.append(Prompt(n - 1, row["prompt"], row["tag"], row))
    return out


def load_dpg_prompts(path: str | Path) -> list[Prompt]:
    """DPG-Bench prompts {item_id, prompt}; group = item_id (unique)."""
    out, ids = [], []
    for n, where, row in _jsonl(path):
        _check(DpgRow, row, where)
        out.append(Prompt(n - 1, row["prompt"], row["item_id"], row))
        ids.append((where, row["item_id"]))
    _unique(Path(path), "item_id", ids)
    return out


def load_hps(path: str | Path) -> list[Prompt]:
    """HPSv2 benchmark prompts {tag, prompt}; group = style. Every style must be present, because HPSv2's
    score is the mean over the four styles."""
    out = []
    for n, where, row in _jsonl(path):
        _check(HpsRow, row, where)
        out.append(Prompt(n - 1, row["prompt"], row["tag"], row))
    counts = Counter(p.group for p in out)
    missing = [s for s in HPS_STYLES if not counts[s]]
    if missing:
        raise InputError(f"{path}: no prompts of style {', '.join(missing)} (HPSv2 averages over {', '.join(HPS_STYLES)})")
    return out


def load_imagereward(path: str | Path) -> list[Prompt]:
    """ImageReward's benchmark-prompts.json, a JSON list of {id, prompt}; group = id (unique)."""
    path = Path(path)
    try:
        items = json.loads(_read_text(path))
    except json.JSONDecodeError as err:
        raise InputError(f"{path}:{err.lineno}: not JSON ({err.msg} at column {err.colno})") from None
    if not isinstance(items, list) or not items:
        raise InputError(f"{path}: expected a non-empty JSON list of {{id, prompt}}")
    out = []
    for i, row in enumerate(items):
        _check(ImageRewardRow, row, f"{path}:item {i}")
        out.append(Prompt(i, row["prompt"], row["id"], row))
    _unique(path, "id", [(f"{path}:item {p.index}", p.group) for p in out])
    return out


def world_vocab(world_cfg: WorldConfig) -> Vocab:
    """The embedded world's limits: its configured shapes and colours, the world's relations, GenEval's tags
    plus "dpg", and a grid×grid board holding one object per cell (as World.layout_for places them)."""
    cells = world_cfg.grid**2
    return Vocab(EMBEDDED_TAGS, tuple(world_cfg.shapes), tuple(world_cfg.colors), RELATIONS, cells,
                 f"the board has {cells} cells", cells)


def validate_embedded(specs: list[dict], world_cfg: WorldConfig, path: str | Path) -> list[Prompt]:
    """Check the specs of an embedded-world prompt set (as `cogrpo.io.read_specs` returns them) against the
    configured world; `path` only names the file in errors. group = tag."""
    if not specs:
        raise InputError(f"{path}: no prompts (empty prompt set)")
    vocab = world_vocab(world_cfg)
    out = []
    for i, spec in enumerate(specs):
        _check(EmbeddedSpec, spec, f"{path}:row {i}", vocab)
        out.append(Prompt(i, spec["prompt"], spec["tag"], spec))
    return out
