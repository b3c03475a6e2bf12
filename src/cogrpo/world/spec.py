"""GenEval-style specs and their exact evaluation on a list of objects.

A spec is a row of GenEval's `evaluation_metadata.jsonl`: {tag, include: [{class, count, color?,
position?: [relation, index]}], exclude: [{class, count}], prompt}. Semantics follow GenEval:
include asks for at least `count` objects of the class (with the colour, placed relative to every
object matched by include[index]); exclude asks for fewer than `count`. On top, `strict` adds one
fact GenEval lacks: the image is clean — no malformed blob and no object the prompt did not ask for —
because a lenient checker was gamed by GRPO within minutes (DESIGN.md §2).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

RELATIONS = ("left of", "right of", "above", "below")


class Obj(NamedTuple):
    shape: str
    color: str
    row: int
    col: int


def relation_holds(obj: Obj, target: Obj, relation: str) -> bool:
    """Relative position, exact on the cell grid: at least one cell apart on that axis."""
    if relation == "left of":
        return obj.col < target.col
    if relation == "right of":
        return obj.col > target.col
    if relation == "above":
        return obj.row < target.row
    if relation == "below":
        return obj.row > target.row
    raise KeyError(f"unknown relation {relation!r}")


@dataclass(frozen=True)
class Verdict:
    correct: bool  # every fact holds (strict: including cleanliness)
    geneval_correct: bool  # GenEval's own semantics, without the cleanliness fact
    reason: str  # the failed facts, '; '-separated; empty when correct
    facts: int
    satisfied: int

    @property
    def score(self) -> float:
        """Fraction of facts satisfied: the DPG-style score and the default training reward."""
        return self.satisfied / self.facts


def _unexpected(objs: list[Obj], spec: dict) -> list[str]:
    """Objects no include entry asks for, or more of a class than the spec's counts add up to."""
    out = []
    for o in objs:
        if not any(i["class"] == o.shape and i.get("color", o.color) == o.color for i in spec["include"]):
            out.append(f"unexpected {o.color} {o.shape}")
    for cls in sorted({o.shape for o in objs}):  # sorted: the reason text must not follow the hash seed
        allowed = sum(i["count"] for i in spec["include"] if i["class"] == cls)
        found = sum(o.shape == cls for o in objs)
        if allowed and found > allowed:
            out.append(f"{found} {cls}s, asked for {allowed}")
    return out


def evaluate_objects(objs: list[Obj], spec: dict, problems: list[str] = (), strict: bool = True) -> Verdict:
    """Decide each fact of the spec on detected objects; `problems` are blobs that are no object."""
    failed: list[str] = []
    facts = 0
    matched_groups: list[list[Obj] | None] = []
    for inc in spec["include"]:
        cls, count = inc["class"], inc["count"]
        of_class = [o for o in objs if o.shape == cls]
        ok = len(of_class) >= count
        facts += 1
        if not ok:
            failed.append(f"expected {cls}>={count}, found {len(of_class)}")
        matches = of_class
        if "color" in inc:
            facts += 1
            matches = [o for o in of_class if o.color == inc["color"]]
            if len(matches) < count:
                ok = False
                failed.append(f"expected {inc['color']} {cls}>={count}, found {len(matches)}")
        if "position" in inc:
            facts += 1
            relation, index = inc["position"]
            target = matched_groups[index] if index < len(matched_groups) else None
            if target is None:
                ok = False
                failed.append(f"no target for {cls} to be {relation}")
            else:
                placed = [o for o in matches if all(relation_holds(o, t, relation) for t in target)]
                if len(placed) < count:
                    ok = False
                    failed.append(f"expected {cls} {relation} target")
        matched_groups.append(matches if ok else None)
    for exc in spec.get("exclude", []):
        facts += 1
        found = sum(o.shape == exc["class"] for o in objs)
        if found >= exc["count"]:
            failed.append(f"expected {exc['class']}<{exc['count']}, found {found}")
    geneval_correct = not failed
    if strict:
        facts += 1
        dirty = list(problems) + _unexpected(objs, spec)
        if dirty:
            failed.append("not clean: " + ", ".join(dirty))
    return Verdict(not failed, geneval_correct, "; ".join(failed), facts, facts - len(failed))
