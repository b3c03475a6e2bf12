"""Generate one shard of the benchmark stage's images: `python -m pipelines.benchmark --shard I --shards N`.

For spreading generation over workers (one process or GPU each): shard I of N generates batches b with
b mod N = I of every cell into the benchmark stage's state folder (the one `dvc repro benchmark` resumes from),
reading the upstream stages' workspace folders as `dvc repro` does. Run the N shards anywhere that sees that
folder, then `dvc repro benchmark`: it finds their batches done, generates whatever is missing and scores. Any N
gives the same images (tasks/benchmark.py). Nothing is scored here.
"""

import argparse

from pipelines.cli import run_main


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shard", type=int, required=True, help="this worker's shard, 0 ≤ I < N")
    ap.add_argument("--shards", type=int, default=None, help="N (default: benchmark.shards of the params file)")
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--root", default="runs", help="the store and state folders")
    args = ap.parse_args(argv)

    def check():
        from cogrpo.validate import load_params

        params = load_params(args.params)
        shards = args.shards or params.benchmark.shards
        if not 0 <= args.shard < shards:
            ap.error(f"--shard {args.shard}: must be in [0, {shards})")

    def body():
        from pathlib import Path

        from adapters.progress import Reporter
        from cogrpo.validate import load_params
        from flows.stages import STAGES, state_folder
        from tasks.benchmark import generate_all

        params = load_params(args.params)
        inputs = {arg: Path(STAGES[src].out) for arg, src in STAGES["benchmark"].inputs.items()}
        for path in inputs.values():
            if not path.exists():
                raise FileNotFoundError(f"{path}: input of the benchmark stage not found (run `dvc repro train`)")
        folder = state_folder("benchmark", params, inputs, args.root)
        ran = generate_all(params, inputs, folder / "cells", args.shard, args.shards or params.benchmark.shards,
                           Reporter())
        return {"state_folder": str(folder), "batches_generated": ran}

    return run_main(body, check)


if __name__ == "__main__":
    main()
