"""The benchmarks' prompt files are the published ones, byte for byte, with the row counts their papers give."""

import csv
import hashlib
import json
from collections import Counter
from pathlib import Path

import pytest

FOLDER = Path(__file__).resolve().parents[1] / "data" / "benchmarks"
SHA256 = {
    "dpg_bench_prompts.jsonl": "37be24937a64fdfdde4970904570617bd5d02062df329c93e1c41e3213eca42d",
    "dsg_tifa160_dev_anns.csv": "5f79461a24112992084b8e785209b0c7c6fba14a9cd3a0d5437316e3f44da886",
    "geneval_evaluation_metadata.jsonl": "5c48e0813e812e3c373fa5c8ed07a8f0a483be30272b4427b0559c8048e67c13",
    "geneval_object_names.txt": "608f6a0e5c8ca1c7a92b818430141fe268c85b7930b50f4160f1d65893b5bacd",
    "hpsv2_benchmark_prompts.jsonl": "fe480986b6513f1020eb843dae15dd04ec4ea43d75f3cdacdc2cff9c29d23de7",
    "imagereward_benchmark_prompts.json": "34682e824ebb3ad8e2531b3cde1b362dc72e1e29946ff6fab77bb49e9edb4b21",
}


@pytest.mark.parametrize("name", sorted(SHA256))
def test_each_file_is_the_published_one(name):
    assert hashlib.sha256((FOLDER / name).read_bytes()).hexdigest() == SHA256[name]


def _jsonl(name: str) -> list[dict]:
    return [json.loads(line) for line in (FOLDER / name).read_text().splitlines() if line.strip()]


def test_row_counts_and_fields():
    geneval = _jsonl("geneval_evaluation_metadata.jsonl")
    assert len(geneval) == 553 and {r["tag"] for r in geneval} == {
        "single_object", "two_object", "counting", "colors", "position", "color_attr"}
    assert len((FOLDER / "geneval_object_names.txt").read_text().split("\n")[:80]) == 80
    dpg = _jsonl("dpg_bench_prompts.jsonl")
    assert len(dpg) == 1065 and len({r["item_id"] for r in dpg}) == 1065
    hps = _jsonl("hpsv2_benchmark_prompts.jsonl")
    assert Counter(r["tag"] for r in hps) == {"anime": 800, "concept": 800, "paintings": 800, "photo": 800}
    assert len(json.loads((FOLDER / "imagereward_benchmark_prompts.json").read_text())) == 100
    with open(FOLDER / "dsg_tifa160_dev_anns.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 920 and {"item_id", "proposition_id", "dependency", "category_broad",
                                 "question_natural_language"} <= set(rows[0])
