"""P4 and P5 (issue 14): co vs model vs schedule, each tuned over the same grid, then trained with several seeds
at its best setting, all at the default rollout budget; held-out and seen GenEval-style accuracy at 2/4/8/16 steps.

1. Tune: every mode trains once per grid point (seed --tune-seed, not among the reported seeds); its best point
   is the one with the highest *seen* accuracy at the trained step count (held-out prompts never pick a setting).
2. Seeds: every mode at its best point, --seeds.
3. Report: per mode, split and step count, the mean over seeds and its 95% t-interval; P4 = (mode − base) ÷
   (model − base) for every co-optimised mode (co, alternate, their :policy forms), held-out at the trained step
   count and at 8 steps (the issue's count), with a 95% bootstrap interval over seeds (goal ≥ 1.3);
   P5 = each co-optimised mode at 4 steps against the base at 8, held-out. P4 and co:prompt − co also get a
   paired interval (seeds resampled together) where both sides have the same seeds.

Each run is the `pipeline` Prefect flow (its MLflow parent run and nested stage runs) with the run's overrides,
the benchmark stage evaluating the trained model under its learned schedule at every step count on the held-out
(`embedded`) and seen (`embedded_seen`) prompts; the base model under the base schedule comes from the first
run. Every stage goes through the store, so an interrupted ablation, rerun, recomputes nothing it finished.

    python bench/modes.py [--seeds 0 1 2 3 4] [--tune-seed 100] [--modes co model schedule]
                          [--grid '{"lr_scale": [1, 3], "train.step_fraction": [0.5, 1.0]}'] [--out reports/modes]
                          [--set '{"schedule.steps": 4}'] [--reuse reports/modes.json] [--summarize]
lr_scale multiplies both learning rates of params.yaml (each mode uses the one it trains); --set overrides params
for every run (the trained step count is then --set's). A one-point grid (`--grid '{}'`: params.yaml's setting)
skips tuning. A mode written `co:prompt` is co with the prompt-conditioned schedule policy
(train.schedule_policy: prompt; `co:state`, `alternate:state`: the state-conditioned one), seeded like the others at co's chosen point when co comes before it in --modes (a
drop-in for co's per-step policy: the same setting, only the policy differs), else tuned on its own.
--reuse takes a seeded run from an earlier report instead of running it when mode, seed and overrides are the same
(the record says where it came from): e.g. co's seeds from the ablation beside a new co:prompt, when the code changed
in between only off their path (a changed store key, the same outputs). The first run made fresh also scores the base
model, and a base that differs from the earlier report's stops the ablation (not the same setting).
Writes <out>.json and <out>.md, after every run.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from pathlib import Path

import numpy as np

from cogrpo.config import MODES

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # flows/, tasks/ beside src/

STEPS = [2, 4, 8, 16]
SPLITS = {"heldout": "embedded", "seen": "embedded_seen"}


def grid_points(grid: dict[str, list], lr_model: float, lr_schedule: float) -> dict[str, dict]:
    """Every combination of the grid's values, as params overrides, named by its values."""
    points = {}
    for values in itertools.product(*grid.values()):
        chosen = dict(zip(grid, values))
        over = {k: v for k, v in chosen.items() if k != "lr_scale"}
        if "lr_scale" in chosen:
            over |= {"train.lr_model": lr_model * chosen["lr_scale"], "train.lr_schedule": lr_schedule * chosen["lr_scale"]}
        points[",".join(f"{k.split('.')[-1]}={v}" for k, v in chosen.items())] = over
    return points


def scores(table_csv: Path, variant: str) -> dict[str, dict[int, float]]:
    """split → steps → GenEval-style overall, of one variant of a benchmark table."""
    import polars as pl

    t = pl.read_csv(table_csv).filter((pl.col("metric") == "geneval.overall") & (pl.col("variant") == variant))
    return {split: {str(r["steps"]): r["value"] for r in t.filter(pl.col("suite") == suite).iter_rows(named=True)}
            for split, suite in SPLITS.items()}


def interval(values: list[float]) -> tuple[float, float, float]:
    """Mean and its 95% t-interval (the interval is the mean alone for one value)."""
    from scipy import stats

    x = np.asarray(values, dtype=float)
    if len(x) < 2:
        return float(x.mean()), float(x.mean()), float(x.mean())
    half = stats.t.ppf(0.975, len(x) - 1) * x.std(ddof=1) / np.sqrt(len(x))
    return float(x.mean()), float(x.mean() - half), float(x.mean() + half)


def bootstrap(statistic, a: list[float], b: list[float], paired: bool = False,
              draws: int = 10_000) -> tuple[float, float, float]:
    """statistic(mean a, mean b) and its 95% bootstrap interval: each side's seeds resampled on their own, or
    (paired: a[i] and b[i] are the same seed) the seeds resampled together, which the shared prompt draws and noise
    of a seed make the fairer interval, usually the tighter."""
    rng = np.random.default_rng(0)
    a, b = np.asarray(a), np.asarray(b)
    if paired:
        rows = [rng.integers(0, len(a), len(a)) for _ in range(draws)]
        boot = [statistic(a[i].mean(), b[i].mean()) for i in rows]
    else:
        boot = [statistic(rng.choice(a, len(a)).mean(), rng.choice(b, len(b)).mean()) for _ in range(draws)]
    low, high = np.percentile(boot, [2.5, 97.5])
    return float(statistic(a.mean(), b.mean())), float(low), float(high)


def estimate(name: str, statistic, a: list[float], b: list[float], paired: bool = False) -> dict:
    """{name: statistic(mean a, mean b), low, high} by the bootstrap, and paired_low, paired_high when a[i] and b[i]
    are the same seed."""
    point, low, high = bootstrap(statistic, a, b)
    out = {name: point, "low": low, "high": high}
    if paired:
        out["paired_low"], out["paired_high"] = bootstrap(statistic, a, b, paired=True)[1:]
    return out


def p4(co: list[float], model: list[float], base: float, paired: bool = False) -> dict:
    """(mean co − base) ÷ (mean model − base), with its intervals."""
    return estimate("P4", lambda c, m: (c - base) / (m - base), co, model, paired)


def difference(a: list[float], b: list[float], paired: bool = False) -> dict:
    """mean(a) − mean(b), with its intervals."""
    return estimate("difference", lambda x, y: x - y, a, b, paired)


def run(mode: str, seed: int, overrides: dict, variants: list[str], checker) -> dict:
    """One pipeline flow run; its result and the benchmark table's scores."""
    from flows.pipeline import pipeline

    start = time.monotonic()
    trained, _, policy = mode.partition(":")
    policy_over = {"train.schedule_policy": policy} if policy else {}
    result = pipeline(mode=trained, seed=seed, overrides=overrides | policy_over | {"benchmark.variants": variants})
    if not isinstance(result, dict):
        raise SystemExit(f"the pipeline failed for {mode} seed {seed} {overrides}: {result}")
    folder = Path(result["stages"]["benchmark"]["out"])
    cached = all(s["cached"] for s in result["stages"].values())
    with_base = "base-base" in variants
    return {"mode": mode, "seed": seed, "overrides": overrides, "mlflow_run_id": result["mlflow_run_id"],
            "minutes": None if cached else (time.monotonic() - start) / 60, "benchmark": str(folder),
            "trained": scores(folder / "table.csv", "trained-learned"), "entropy": entropies(folder, "trained-learned", checker),
            "base": scores(folder / "table.csv", "base-base") if with_base else None,
            "base_entropy": entropies(folder, "base-base", checker) if with_base else None}


def reusable(earlier: list[dict], mode: str, seed: int, overrides: dict) -> dict | None:
    """The earlier report's seeded run of this mode and seed with these overrides, if it has one."""
    return next((r for r in earlier if (r["mode"], r["seed"], r["overrides"]) == (mode, seed, overrides)), None)


def entropies(folder: Path, variant: str, checker) -> dict[str, float]:
    """steps → colour entropy (bits) of the variant's samples on the held-out prompts that name no colour
    (bench/side_effects.py; a plug-in estimate over the 4 samples per prompt: for comparing runs, not absolute)."""
    from bench.side_effects import colour_diversity
    from tasks.benchmark import cell_folder

    cells = {t: cell_folder(folder, variant, t, SPLITS["heldout"]) for t in STEPS}
    return {str(t): colour_diversity(cell, checker)["entropy_bits"] for t, cell in cells.items()}


def summarize(report: dict, train_steps: int) -> dict:
    modes = sorted({r["mode"] for r in report["seeds"]})
    base = report["base"]
    summary: dict = {"base": base | {"entropy": report.get("base_entropy")}, "modes": {}}
    for mode in modes:
        runs = [r for r in report["seeds"] if r["mode"] == mode]
        summary["modes"][mode] = {split: {str(t): interval([r["trained"][split][str(t)] for r in runs]) for t in STEPS}
                                  for split in SPLITS} | {"seeds": [r["seed"] for r in runs]}
        measured = [r for r in runs if r.get("entropy")]  # runs reused from reports older than entropies have none
        summary["modes"][mode]["entropy"] = ({str(t): interval([r["entropy"][str(t)] for r in measured]) for t in STEPS}
                                             if measured else None)
    joint = [m for m in modes if m not in ("model", "schedule")]  # the co-optimised modes, each set against model
    def held(mode: str, steps: int) -> dict[int, float]:  # seed → held-out accuracy at that step count
        return {r["seed"]: r["trained"]["heldout"][str(steps)] for r in report["seeds"] if r["mode"] == mode}

    values = lambda by_seed: [v for _, v in sorted(by_seed.items())]  # noqa: E731
    if "model" in modes:
        summary["P4"] = {}
        for mode, t in itertools.product(joint, sorted({train_steps, 8})):
            a, b = held(mode, t), held("model", t)
            if len(a) > 1 and len(b) > 1:
                summary["P4"].setdefault(mode, {})[str(t)] = p4(values(a), values(b), base["heldout"][str(t)],
                                                                 paired=a.keys() == b.keys())
    if "co:prompt" in modes and "co" in modes:
        a, b = held("co:prompt", train_steps), held("co", train_steps)
        summary["prompt_vs_per_step"] = difference(values(a), values(b), paired=a.keys() == b.keys())
    summary["P5"] = {"base_at_8": base["heldout"]["8"],
                     "at_4": {mode: interval(values(held(mode, 4))) for mode in joint}}
    return summary


def markdown(report: dict, summary: dict, train_steps: int) -> str:
    lines = [f"# Modes at equal budget: tuned alike, then seeded (trained at {train_steps} steps)", "",
             "Mean over seeds [95% t-interval], GenEval-style overall; base = base model, base schedule.", ""]
    titles = {"heldout": "held-out prompts", "seen": "seen prompts",
              "entropy": "colour entropy, bits (held-out prompts that name no colour; bench/side_effects.py)"}
    for table, title in titles.items():
        base = summary["base"][table]
        lines += [f"## {title}", "", "| mode | " + " | ".join(f"{t} steps" for t in STEPS) + " | seeds |",
                  "|---" * (len(STEPS) + 2) + "|",
                  "| base | " + " | ".join(f"{base[str(t)]:.3f}" if base else "—" for t in STEPS) + " | — |"]
        for mode, s in summary["modes"].items():
            if s[table] is None:
                lines.append(f"| {mode} | " + " | ".join("—" for _ in STEPS) + f" | {len(s['seeds'])} |")
                continue
            cells = [f"{m:.3f} [{lo:.3f}, {hi:.3f}]" for m, lo, hi in (s[table][str(t)] for t in STEPS)]
            lines.append(f"| {mode} | " + " | ".join(cells) + f" | {len(s['seeds'])} |")
        lines.append("")
    if report.get("set"):
        lines += [f"Every run with {json.dumps(report['set'])}.", ""]
    for mode, s in summary["modes"].items():
        reused = [r for r in report["seeds"] if r["mode"] == mode and r.get("reused_from")]
        if reused:
            lines += [f"{len(reused)} of {mode}'s {len(s['seeds'])} seeded runs are `{reused[0]['reused_from']}`'s "
                      "(--reuse).", ""]
    if report["tuning"]:
        lines += ["## Tuning (one seed each; chosen by seen accuracy at the trained step count)", "",
                  "| mode | point | seen | held-out |", "|---|---|---|---|"]
    for r in report["tuning"]:
        mark = " (chosen)" if report["best"].get(r["mode"]) == r["point"] else ""
        lines.append(f"| {r['mode']} | {r['point']}{mark} | {r['trained']['seen'][str(train_steps)]:.3f} | "
                     f"{r['trained']['heldout'][str(train_steps)]:.3f} |")
    if summary.get("P4"):
        lines += ["", "**P4** = (mode − base) ÷ (model − base), held-out (95% bootstrap over seeds; paired: seeds "
                  "resampled together; goal ≥ 1.3):", "",
                  "| mode | steps | P4 | bootstrap | paired |", "|---|---|---|---|---|"]
        for mode, by_steps in summary["P4"].items():
            for t, p in by_steps.items():
                paired = f"[{p['paired_low']:.2f}, {p['paired_high']:.2f}]" if "paired_low" in p else "—"
                lines.append(f"| {mode} | {t} | {p['P4']:.2f} | [{p['low']:.2f}, {p['high']:.2f}] | {paired} |")
    if "prompt_vs_per_step" in summary:
        d = summary["prompt_vs_per_step"]
        paired = f"; [{d['paired_low']:+.3f}, {d['paired_high']:+.3f}] paired by seed" if "paired_low" in d else ""
        lines += ["", f"**Prompt-conditioned vs per-step schedule policy** (co, held-out at {train_steps} steps): "
                  f"{d['difference']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}] (95% bootstrap over seeds{paired})."]
    for mode, (m, lo, hi) in summary["P5"]["at_4"].items():
        lines += ["", f"**P5**: {mode} at 4 steps {m:.3f} [{lo:.3f}, {hi:.3f}] vs base at 8 steps "
                  f"{summary['P5']['base_at_8']:.3f} (goal: at 4 ≥ base at 8)."]
    return "\n".join(lines) + "\n"


def write_report(report: dict, out: str) -> None:
    """<out>.json, and once a seeded run and the base are in, its summary and <out>.md."""
    from cogrpo.io import write_json, write_text_atomic

    if report["seeds"] and report["base"]:
        report["summary"] = summarize(report, report["train_steps"])
        write_text_atomic(f"{out}.md", markdown(report, report["summary"], report["train_steps"]))
    write_json(f"{out}.json", report)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    ap.add_argument("--tune-seed", type=int, default=100)
    ap.add_argument("--modes", nargs="+", default=list(MODES))
    ap.add_argument("--grid", default='{"lr_scale": [1, 3], "train.step_fraction": [0.5, 1.0]}')
    ap.add_argument("--out", default="reports/modes")
    ap.add_argument("--set", default="{}", help="params overrides for every run, JSON")
    ap.add_argument("--reuse", help="an earlier report whose matching seeded runs are taken, not rerun")
    ap.add_argument("--summarize", action="store_true", help="only rewrite <out>.md (and the summary) from <out>.json")
    args = ap.parse_args(argv)
    if args.summarize:
        report = json.loads(Path(f"{args.out}.json").read_text())
        write_report(report, args.out)
        print(Path(f"{args.out}.md").read_text())
        return report

    from adapters.env import apply_defaults

    apply_defaults()
    from adapters.prefect_api import temporary_api
    from cogrpo.validate import load_params
    from cogrpo.world.checker import Checker
    from cogrpo.world.scenes import World

    common = json.loads(args.set)
    params = load_params("params.yaml", common)
    checker = Checker(World(params.world))
    train_steps = params.schedule.steps
    common |= {"benchmark.suites": list(SPLITS.values()), "benchmark.steps": STEPS}
    points = grid_points(json.loads(args.grid), params.train.lr_model, params.train.lr_schedule)
    report: dict = {"train_steps": train_steps, "grid": json.loads(args.grid), "set": json.loads(args.set),
                    "tune_seed": args.tune_seed, "tuning": [], "best": {}, "seeds": [], "base": None}

    earlier = json.loads(Path(args.reuse).read_text()) if args.reuse else None
    fresh_base: list[dict] = []  # the base scored by a run of this invocation, once there is one

    def variants() -> list[str]:  # the base model under the base schedule: from the first run made here
        return ["trained-learned"] if fresh_base else ["base-base", "trained-learned"]

    def record(r: dict) -> dict:
        base, base_entropy = r.pop("base"), r.pop("base_entropy")
        if base is not None and not r.get("reused_from"):
            if earlier and earlier["base"] != base:
                raise SystemExit(f"--reuse {args.reuse}: its base model scores {earlier['base']} differ from this "
                                 f"run's {base}: its runs are not of this setting")
            fresh_base.append(base)
        report["base"] = report["base"] or base
        report["base_entropy"] = report.get("base_entropy") or base_entropy
        return r

    def seeded(mode: str, seed: int, overrides: dict) -> dict:
        old = reusable(earlier["seeds"], mode, seed, overrides) if earlier else None
        if old is None:
            return run(mode, seed, overrides, variants(), checker)
        return old | {"reused_from": args.reuse, "base": earlier["base"], "base_entropy": earlier.get("base_entropy")}

    def save() -> None:
        write_report(report, args.out)

    with temporary_api():
        for mode in args.modes:
            trained = mode.partition(":")[0]
            if len(points) == 1 or (trained != mode and trained in report["best"]):
                report["best"][mode] = report["best"].get(trained, next(iter(points)))
                continue
            for name, over in points.items():
                r = run(mode, args.tune_seed, common | over, variants(), checker)
                report["tuning"].append(record(r) | {"point": name})
                save()
            mine = [r for r in report["tuning"] if r["mode"] == mode]
            report["best"][mode] = max(mine, key=lambda r: r["trained"]["seen"][str(train_steps)])["point"]
        for seed in args.seeds:  # seed-major: an interrupted run still holds every mode
            for mode in args.modes:
                r = seeded(mode, seed, common | points[report["best"][mode]])
                report["seeds"].append(record(r))
                save()
    print(Path(f"{args.out}.md").read_text())
    return report


if __name__ == "__main__":
    main()
