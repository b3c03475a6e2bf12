"""Command line of the `pipeline` Prefect flow (flows/pipeline.py): every stage, through the shared store.

    python -m pipelines.pipeline [--params params.yaml] [--mode co|alternate|model|schedule] [--steps T] [--seed S]
                                 [--set train.lr_schedule=0.3 ...] [--root runs]
"""

import argparse
import json

import yaml

from cogrpo.config import MODES
from cogrpo.errors import InputError
from pipelines.cli import run_main


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--mode", choices=MODES)
    ap.add_argument("--steps", type=int, help="inference steps (schedule.steps)")
    ap.add_argument("--seed", type=int, help="training seed (train.seed)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override a params key, the value read as YAML; repeatable")
    ap.add_argument("--root", default="runs", help="the store and training folders (shared with dvc repro)")
    args = ap.parse_args(argv)

    overrides = {}

    def check():  # bad input: one line, in a second, before Prefect starts
        for item in args.set:
            key, sep, value = item.partition("=")
            if not sep:
                raise InputError(f"--set {item}: expected KEY=VALUE")
            overrides[key] = yaml.safe_load(value)
        from flows.pipeline import resolve_params

        resolve_params(args.params, args.mode, args.steps, args.seed, overrides)

    def body():
        from flows.pipeline import pipeline

        result = pipeline(args.params, args.mode, args.steps, args.seed, overrides, args.root)
        print(json.dumps({k: result[k]["heldout"]["geneval"]["overall"] for k in ("baseline", "eval")}))
        return result

    return run_main(body, check)


if __name__ == "__main__":
    main()
