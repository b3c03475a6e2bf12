"""One table from bench/co_investigation.sh's reports: every mode and `co` variant, mean over seeds.

Reads reports/ablation.json and reports/co_*.json; writes reports/co_investigation.md.
Usage: python bench/summarize_investigation.py
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

COLUMNS = [("held-out@8", "heldout@8", "overall"), ("held-out@4", "heldout@4", "overall"),
           ("seen@8", "seen@8", "overall"), ("counting@8", "heldout@8", "counting"),
           ("two_object@8", "heldout@8", "two_object"), ("color_attr@8", "heldout@8", "color_attr")]


def rows(report: dict, label: str) -> dict[str, list[dict]]:
    groups: dict[str, list[dict]] = {}
    for name, run in report["runs"].items():
        key = "base" if name == "base" else f"{run['mode']}{label}"
        groups.setdefault(key, []).append(run)
    return groups


def cell(runs: list[dict], split: str, tag: str) -> str:
    values = [r["eval"][split]["geneval"][tag] for r in runs if split in r["eval"]]
    if not values:
        return "—"
    spread = f" ({min(values):.3f}–{max(values):.3f})" if len(values) > 1 else ""
    return f"{statistics.mean(values):.3f}{spread}"


def main() -> None:
    groups = rows(json.loads(Path("reports/ablation.json").read_text()), "")
    for path in sorted(Path("reports").glob("co_*.json")):
        report = json.loads(path.read_text())
        label = " " + json.dumps(report.get("train_overrides", {}), separators=(",", ":"))
        groups |= rows(report, label)
    lines = ["| run | seeds | " + " | ".join(c[0] for c in COLUMNS) + " | train reward (last 5) |",
             "|---" * (len(COLUMNS) + 3) + "|"]
    for name, runs in groups.items():
        rewards = [r["train_reward_last5"] for r in runs if "train_reward_last5" in r]
        reward = f"{statistics.mean(rewards):.3f}" if rewards else "—"
        lines.append(f"| {name} | {len(runs)} | " + " | ".join(cell(runs, s, t) for _, s, t in COLUMNS)
                     + f" | {reward} |")
    text = ("Mean over seeds (min–max), same base model and rollout budget in every run. Each row changes the train\n"
            "keys shown from the defaults in force then (step_fraction 0.25, sigma_init 0.3, sigma_floor 0.05;\n"
            "the last row is today's default). Made by bench/co_investigation.sh.\n\n"
            + "\n".join(lines) + "\n")
    Path("reports/co_investigation.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
