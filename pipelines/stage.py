"""One DVC stage: `python -m pipelines.stage NAME` (dvc.yaml's commands; see flows/stages.py for the stages).

Validates params.yaml first (one line naming the key, exit 2, nothing touched), then runs the `stage` flow:
the stage through the store, its output copied to its workspace folder, its metrics files written.
"""

import argparse

from pipelines.cli import run_main


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("name", help="the stage, as named in dvc.yaml")
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--root", default="runs", help="the store and training folders")
    args = ap.parse_args(argv)

    def check():  # before Prefect starts: bad input fails in a second, with one line, touching nothing
        from cogrpo.validate import load_params
        from flows.stages import STAGES

        if args.name not in STAGES:
            ap.error(f"unknown stage {args.name!r} (stages: {', '.join(STAGES)})")
        load_params(args.params)

    def body():
        from flows.pipeline import stage

        return stage(args.name, args.params, args.root)

    return run_main(body, check)


if __name__ == "__main__":
    main()
