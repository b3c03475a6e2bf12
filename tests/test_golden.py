"""The TINY pipeline's outputs are held byte-identical across refactors (DESIGN.md, "Figures").

Every file the stages write into the project (prompt sets, tokenizer, models, evaluations, benchmark tables,
metrics) is hashed and compared with `tests/golden/tiny_outputs.json`. Float rounding differs between CPUs and
torch builds, so the record is kept per machine fingerprint; on a machine with no record the test skips and says
how to add one. An issue that changes what is computed re-records in the commit that says why:

    COGRPO_RECORD_GOLDEN=1 python -m pytest tests/test_golden.py
"""

import hashlib
import json
import os
import platform
from pathlib import Path

import pytest
import torch

GOLDEN = Path(__file__).parent / "golden" / "tiny_outputs.json"
HASHED = ("data", "models", "outputs", "metrics", "reports")  # what the stages write; logs and stores are not results
UNSTABLE = ("metrics/pretrain.json",)  # holds the pretraining's wall-clock minutes


def fingerprint() -> str:
    """What decides float rounding here: the CPU (model and instruction sets), its kernels, torch, threads."""
    flags = model = ""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and not model:
                model = value.strip()
            elif key.strip() == "flags" and not flags:
                flags = hashlib.sha256(" ".join(sorted(value.split())).encode()).hexdigest()[:12]
    return (f"{platform.machine()} | {model or platform.processor()} | flags {flags} | "
            f"{torch.backends.cpu.get_cpu_capability()} | torch {torch.__version__} | {os.cpu_count()} cpus")


def output_hashes(project: Path) -> dict[str, str]:
    hashes = {}
    for top in HASHED:
        for path in sorted((project / top).rglob("*")):
            name = path.relative_to(project).as_posix()
            if path.is_file() and name not in UNSTABLE:
                hashes[name] = hashlib.sha256(path.read_bytes()).hexdigest()
    return hashes


def test_the_tiny_pipeline_writes_the_recorded_bytes(tiny_built):
    hashes = output_hashes(tiny_built)
    assert len(hashes) > 100, f"the TINY pipeline wrote only {len(hashes)} files"
    records = json.loads(GOLDEN.read_text()) if GOLDEN.is_file() else {}
    here = fingerprint()
    if os.environ.get("COGRPO_RECORD_GOLDEN"):
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(json.dumps(records | {here: hashes}, indent=1, sort_keys=True) + "\n")
        return
    if here not in records:
        pytest.skip(f"no golden record for this machine ({here}): record one with COGRPO_RECORD_GOLDEN=1")
    expected = records[here]
    changed = sorted(n for n in expected.keys() & hashes.keys() if expected[n] != hashes[n])
    assert not changed and hashes.keys() == expected.keys(), (
        f"{len(changed)} outputs changed (first: {changed[:5]}), "
        f"new {sorted(hashes.keys() - expected.keys())[:5]}, gone {sorted(expected.keys() - hashes.keys())[:5]}")
