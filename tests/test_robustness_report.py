"""bench/robustness.py's judgement of one case (issue 24, item 1): each criterion can fail on its own."""

import importlib.util
import math
from pathlib import Path

_spec = importlib.util.spec_from_file_location("robustness",
                                               Path(__file__).resolve().parents[1] / "bench" / "robustness.py")
robustness = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(robustness)

TAGS = robustness.TAGS


def _summary(overall: float, dpg: float, tag: float = 0.5, **tags: float) -> dict:
    return {"geneval": {"overall": overall} | {t: tags.get(t, tag) for t in TAGS}, "dpg": {"score": dpg}}


def _history(first: float, last: float, n: int = 40, nan_at: int | None = None) -> list[dict]:
    rows = [{"iteration": i + 1, "reward_mean": first if i < n // 2 else last, "model/kl": 0.01} for i in range(n)]
    if nan_at is not None:
        rows[nan_at]["model/kl"] = math.nan
    return rows


def test_a_learning_case_passes_every_check():
    r = robustness.judge(_history(0.80, 0.86), _summary(0.53, 0.47), _summary(0.64, 0.48, tag=0.6))
    assert all(r["pass"].values()) and math.isclose(r["gain"], 0.11)


def test_each_failure_is_named():
    base = _summary(0.53, 0.47)
    assert robustness.judge(_history(0.83, 0.81), base, _summary(0.60, 0.47))["pass"]["reward"] is False
    assert robustness.judge(_history(0.8, 0.9, nan_at=33), base, _summary(0.60, 0.47))["pass"]["finite"] is False
    assert robustness.judge(_history(0.8, 0.9), base, _summary(0.502, 0.47))["pass"]["gain"] is False
    assert robustness.judge(_history(0.8, 0.9), base, _summary(0.60, 0.438))["pass"]["dpg"] is False
    worse = robustness.judge(_history(0.8, 0.9), base, _summary(0.60, 0.47, counting=0.2))
    assert worse["pass"]["tags"] is False and worse["worst_tag"] == "counting"


def test_the_table_says_which_checks_failed_and_the_verdict():
    good = {"case": "train.seed=0"} | robustness.judge(_history(0.8, 0.9), _summary(0.5, 0.4), _summary(0.65, 0.41))
    bad = {"case": "pretrain.seed=1"} | robustness.judge(_history(0.8, 0.7), _summary(0.5, 0.4), _summary(0.52, 0.41))
    text = robustness.markdown({"set": {}, "cases": [good, bad]})
    assert "| pretrain.seed=1 |" in text and "no: reward, gain" in text and "all: FAIL" in text


def test_a_tags_standard_error_counts_each_prompt_rows_own_accuracy(tmp_path):
    """counting: one row of 4 images at p̂ = 0.5 (s² = 4/3 · 0.25) and one at p̂ = 1 → Var = 4 · s² / 8², SE
    √(4/3) / 8 (all 8 images pooled would give √1.5 / 8); a tag always right has none. The worst tag's Δ carries the
    two evaluations' combined error."""
    import json

    def row(tag: str, prompt_row: int, correct: bool) -> str:
        return json.dumps({"filename": f"{prompt_row:05d}/samples/0000.png", "tag": tag, "correct": correct})

    lines = [row("counting", 0, c) for c in (True, True, False, False)] + [row("counting", 1, True)] * 4
    lines += [row("colors", 2, True)] * 4
    (tmp_path / "results.jsonl").write_text("\n".join(lines) + "\n")
    se = robustness.tag_standard_errors(tmp_path / "results.jsonl")
    assert math.isclose(se["counting"], math.sqrt(4 / 3) / 8) and se["colors"] == 0.0
    base = {t: 0.05 for t in TAGS}
    r = robustness.judge(_history(0.8, 0.9), _summary(0.5, 0.4), _summary(0.65, 0.41, counting=0.3), base, base)
    assert r["worst_tag"] == "counting" and math.isclose(r["worst_tag_se"], 0.05 * math.sqrt(2))
    assert "counting -0.200 ± 0.071" in robustness.markdown({"set": {}, "eval_samples": 16, "cases": [
        {"case": "train.seed=0"} | r]})
