"""Command line of the `pipeline` Prefect flow (flows/pipeline.py): every stage, cached across runs.

    python -m pipelines.pipeline [--params params.yaml] [--mode co|model|schedule] [--steps T] [--seed S]
                                 [--set train.lr_schedule=0.3 ...] [--root runs/pipeline]
"""

import argparse
import json
import sys

import yaml

from tasks import tracking  # noqa: F401  (first: environment defaults)

from cogrpo.errors import InputError  # noqa: E402
from pipelines._stage import one_line_input_errors  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--mode", choices=["co", "model", "schedule"])
    ap.add_argument("--steps", type=int, help="inference steps (schedule.steps)")
    ap.add_argument("--seed", type=int, help="training seed (train.seed)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override a params key, the value read as YAML; repeatable")
    ap.add_argument("--root", default="runs/pipeline", help="outputs and cache records of every stage")
    args = ap.parse_args(argv)
    one_line_input_errors()
    try:
        overrides = {}
        for item in args.set:
            key, sep, value = item.partition("=")
            if not sep:
                raise InputError(f"--set {item}: expected KEY=VALUE")
            overrides[key] = yaml.safe_load(value)
        from flows.pipeline import pipeline

        result = pipeline(args.params, args.mode, args.steps, args.seed, overrides, args.root)
    except (InputError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    print(json.dumps({k: result[k]["heldout"]["geneval"]["overall"] for k in ("baseline", "eval")}))


if __name__ == "__main__":
    main()
