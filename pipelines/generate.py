"""Generate one shard of a stage's images: `python -m pipelines.generate STAGE --shard I --shards N`.

For spreading generation over workers (one process or GPU each): shard I of N generates batches b with
b mod N = I of every cell of STAGE (baseline, evaluate or benchmark) into the stage's state folder, the one its
`dvc repro` resumes from, reading the upstream stages' workspace folders as `dvc repro` does. Run the N shards
anywhere that sees that folder (the `generate` Prefect flow does the same from a work pool), then `dvc repro STAGE`:
it finds their batches done, generates whatever is missing and scores. Any N gives the same images
(tasks/cells.py). Nothing is scored here.
"""

import argparse

from pipelines.cli import run_main


def main(argv: list[str] | None = None) -> dict:
    from flows.stages import STAGES

    sharded = sorted(name for name, stage in STAGES.items() if stage.cells)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("stage", choices=sharded, help="the stage whose images to generate")
    ap.add_argument("--shard", type=int, required=True, help="this worker's shard, 0 ≤ I < N")
    ap.add_argument("--shards", type=int, default=None, help="N (default: eval.shards of the params file)")
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--root", default="runs", help="the store and state folders")
    args = ap.parse_args(argv)

    def check():
        from cogrpo.validate import load_params

        shards = args.shards or load_params(args.params).eval.shards
        if not 0 <= args.shard < shards:
            ap.error(f"--shard {args.shard}: must be in [0, {shards})")

    def body():
        from flows.pipeline import generate

        return generate(args.stage, args.shard, args.shards, args.params, args.root)

    return run_main(body, check)


if __name__ == "__main__":
    main()
