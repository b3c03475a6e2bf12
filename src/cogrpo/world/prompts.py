"""The prompt grammar and the train / held-out split.

Prompts cover GenEval's six tags (single_object, two_object, counting, colors, position, color_attr)
and dense DPG-style prompts (tag "dpg": three or more objects with colours, counts and relations).
Every prompt carries its spec in GenEval's metadata shape (see cogrpo.world.spec).

The held-out eval set asks for combinations that no training prompt contains: colour–shape pairs,
two classes together, a count of a class, and a (class, relation, class) fact. Held-out colour–shape
pairs are also kept out of training scenes, which is fair because tokens factorise colour and shape.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import asdict, dataclass

import numpy as np

from cogrpo.config import PromptsConfig
from cogrpo.world.scenes import World
from cogrpo.world.spec import RELATIONS

GENEVAL_TAGS = ("single_object", "two_object", "counting", "colors", "position", "color_attr")
NUMBERS = {1: "one", 2: "two", 3: "three", 4: "four"}
INVERSE = {"left of": "right of", "right of": "left of", "above": "below", "below": "above"}


@dataclass(frozen=True)
class HeldOut:
    color_shapes: list[tuple[str, str]]  # (shape, colour)
    shape_pairs: list[tuple[str, str]]  # sorted (shape, shape)
    counts: list[tuple[int, str]]  # (count, shape), count ≥ 2
    relations: list[tuple[str, str, str]]  # (shape, relation, reference shape), both directions listed

    def allows_pair(self, shape: str, color: str) -> bool:
        return (shape, color) not in self.color_shapes

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1)

    @classmethod
    def from_json(cls, text: str) -> "HeldOut":
        d = json.loads(text)
        return cls(**{k: [tuple(x) for x in v] for k, v in d.items()})


def _take(rng: np.random.Generator, items: list, k: int, what: str) -> list:
    if k > len(items):
        raise ValueError(f"prompts.{what} = {k} exceeds the {len(items)} candidates of this world")
    return [items[i] for i in sorted(rng.choice(len(items), size=k, replace=False))]


def choose_heldout(world: World, cfg: PromptsConfig) -> HeldOut:
    rng = np.random.default_rng(cfg.seed)
    pairs = [(s, c) for s in world.shapes for c in world.colors]
    # never hold out every colour of a shape: the model must have seen each shape and each colour
    for _ in range(100):
        color_shapes = _take(rng, pairs, cfg.heldout_color_shapes, "heldout_color_shapes")
        if all(sum(p[0] == s for p in color_shapes) < len(world.colors) for s in world.shapes):
            break
    shape_pairs = _take(rng, list(itertools.combinations(world.shapes, 2)), cfg.heldout_shape_pairs, "heldout_shape_pairs")
    counts = _take(rng, [(n, s) for n in (2, 3, 4) for s in world.shapes], cfg.heldout_counts, "heldout_counts")
    triples = [(a, r, b) for a, b in itertools.permutations(world.shapes, 2) for r in ("left of", "above")]
    chosen = _take(rng, triples, cfg.heldout_relations, "heldout_relations")
    relations = sorted({t for a, r, b in chosen for t in ((a, r, b), (b, INVERSE[r], a))})
    return HeldOut(color_shapes, shape_pairs, counts, relations)


def involves(spec: dict, held: HeldOut) -> bool:
    """Whether the spec asks for any held-out combination."""
    inc = spec["include"]
    classes = [i["class"] for i in inc]
    if any("color" in i and (i["class"], i["color"]) in held.color_shapes for i in inc):
        return True
    if any(tuple(sorted(p)) in held.shape_pairs for p in itertools.combinations(classes, 2)):
        return True
    if any((i["count"], i["class"]) in held.counts for i in inc):
        return True
    return any(
        "position" in i and (i["class"], i["position"][0], inc[i["position"][1]]["class"]) in held.relations for i in inc
    )


def _a(word: str) -> str:
    return "an" if word[0] in "aeiou" else "a"


def _np(count: int, shape: str, color: str | None = None) -> str:
    """Noun phrase: 'a red circle', 'two squares'."""
    noun = shape if count == 1 else shape + "s"
    words = f"{color} {noun}" if color else noun
    return f"{_a(words)} {words}" if count == 1 else f"{NUMBERS[count]} {words}"


def geneval_specs(world: World) -> list[dict]:
    """Every GenEval-tag prompt of this world."""
    S, C = world.shapes, world.colors
    out = [{"tag": "single_object", "include": [{"class": s, "count": 1}], "prompt": f"a photo of {_np(1, s)}"} for s in S]
    for a, b in itertools.permutations(S, 2):
        out.append({"tag": "two_object", "include": [{"class": a, "count": 1}, {"class": b, "count": 1}],
                    "prompt": f"a photo of {_np(1, a)} and {_np(1, b)}"})
    for n, s in itertools.product((2, 3, 4), S):
        out.append({"tag": "counting", "include": [{"class": s, "count": n}], "exclude": [{"class": s, "count": n + 1}],
                    "prompt": f"a photo of {_np(n, s)}"})
    for s, c in itertools.product(S, C):
        out.append({"tag": "colors", "include": [{"class": s, "count": 1, "color": c}], "prompt": f"a photo of {_np(1, s, c)}"})
    for (a, b), r in itertools.product(itertools.permutations(S, 2), RELATIONS):
        out.append({"tag": "position", "include": [{"class": a, "count": 1}, {"class": b, "count": 1, "position": [r, 0]}],
                    "prompt": f"a photo of {_np(1, b)} {r} {_np(1, a)}"})
    for (a, b), (ca, cb) in itertools.product(itertools.permutations(S, 2), itertools.permutations(C, 2)):
        out.append({"tag": "color_attr",
                    "include": [{"class": a, "count": 1, "color": ca}, {"class": b, "count": 1, "color": cb}],
                    "prompt": f"a photo of {_np(1, a, ca)} and {_np(1, b, cb)}"})
    return out


def dpg_spec(world: World, rng: np.random.Generator) -> dict:
    """A dense prompt: 3–4 groups of distinct classes, each coloured, 1–2 objects, and 1–2 relations."""
    k = int(rng.integers(3, min(4, len(world.shapes)) + 1))
    shapes = [world.shapes[i] for i in rng.choice(len(world.shapes), size=k, replace=False)]
    include = [{"class": s, "count": int(rng.choice([1, 1, 2])), "color": world.colors[rng.integers(len(world.colors))]}
               for s in shapes]
    phrases = [_np(i["count"], i["class"], i["color"]) for i in include]
    relations = []
    for j in sorted(rng.choice(np.arange(1, k), size=int(rng.integers(1, 3)), replace=False)):
        i, r = int(rng.integers(j)), RELATIONS[rng.integers(4)]
        include[j]["position"] = [r, i]
        subj, ref = include[j], include[i]
        verb = "is" if subj["count"] == 1 else "are"
        ref_noun = ref["class"] if ref["count"] == 1 else ref["class"] + "s"
        relations.append(f"the {_np(subj['count'], subj['class'], subj['color']).split(' ', 1)[1]} {verb} {r} "
                         f"the {ref['color']} {ref_noun}")
    prompt = ", ".join(phrases[:-1]) + " and " + phrases[-1] + "; " + "; ".join(relations)
    return {"tag": "dpg", "include": include, "prompt": prompt}


def _satisfiable(world: World, spec: dict) -> bool:
    try:
        world.layout_for(spec, np.random.default_rng(0), tries=50)
        return True
    except ValueError:
        return False


def _fill(rng: np.random.Generator, specs: list[dict], n: int) -> list[dict]:
    """n specs drawn without replacement, cycling when there are fewer (repeats get new sampling seeds)."""
    if not specs:
        return []
    order = list(rng.permutation(len(specs)))
    return [specs[order[i % len(specs)]] for i in range(n)]


def max_train_prompts(world: World, cfg: PromptsConfig) -> int:
    """An upper bound on the training set's size, in milliseconds: every GenEval-tag prompt the held-out choice
    leaves, plus the DPG-style prompts asked for."""
    held = choose_heldout(world, cfg)
    return sum(not involves(s, held) for s in geneval_specs(world)) + cfg.dpg_train


def make_prompt_sets(world: World, cfg: PromptsConfig) -> tuple[dict[str, list[dict]], HeldOut]:
    """The train set and two eval sets (held-out combinations; seen prompts), and what was held out."""
    rng = np.random.default_rng(cfg.seed + 1)
    held = choose_heldout(world, cfg)
    all_geneval = geneval_specs(world)
    train = [s for s in all_geneval if not involves(s, held)]
    novel = [s for s in all_geneval if involves(s, held)]
    seen_dpg, novel_dpg, prompts_seen = [], [], set()
    for _ in range(100 * (cfg.dpg_train + cfg.dpg_eval) + 100):
        if len(seen_dpg) >= cfg.dpg_train and len(novel_dpg) >= cfg.dpg_eval:
            break
        spec = dpg_spec(world, rng)
        if spec["prompt"] in prompts_seen or not _satisfiable(world, spec):
            continue
        prompts_seen.add(spec["prompt"])
        (novel_dpg if involves(spec, held) else seen_dpg).append(spec)
    train += seen_dpg[: cfg.dpg_train]
    heldout, seen = [], []
    for tag in GENEVAL_TAGS:
        tag_novel = [s for s in novel if s["tag"] == tag]
        tag_train = [s for s in train if s["tag"] == tag]
        # single_object cannot hold a combination out; its eval prompts are the training ones
        heldout += _fill(rng, tag_novel or tag_train, cfg.eval_per_tag)
        seen += _fill(rng, tag_train, cfg.eval_per_tag)
    heldout += novel_dpg[: cfg.dpg_eval]
    seen += _fill(rng, seen_dpg[: cfg.dpg_train], cfg.dpg_eval)
    return {"train": train, "eval_heldout": heldout, "eval_seen": seen}, held


def split_report(sets: dict[str, list[dict]], held: HeldOut) -> dict:
    """Prompt counts per set and tag, and what was held out, for metrics/prompts.json."""
    report: dict = {name: {"prompts": len(specs), "unique": len({s["prompt"] for s in specs}),
                           "per_tag": {t: sum(s["tag"] == t for s in specs) for t in (*GENEVAL_TAGS, "dpg")}}
                    for name, specs in sets.items()}
    report["heldout"] = {"color_shapes": [" ".join(reversed(p)) for p in held.color_shapes],
                         "shape_pairs": [" + ".join(p) for p in held.shape_pairs],
                         "counts": [f"{n} {s}s" for n, s in held.counts],
                         "relations": [" ".join(t) for t in held.relations]}
    return report
