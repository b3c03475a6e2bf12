"""DVC stage `evaluate`: the trained model under its deterministic learned schedule on held-out prompts.

Writes GenEval's layout to outputs/eval, metrics/eval.json (the form of metrics/baseline.json) and
metrics/eval_seen.json.
"""

from cogrpo.io import write_json
from pipelines._stage import run_stage


def main() -> None:
    from PIL import Image

    from flows.evaluate import evaluate
    from tasks import tracking

    def body(params, run_id):
        kw = {"model_dir": "models/trained", "schedule_file": "models/trained/schedule.json"}
        steps = {"steps": params.schedule.steps}
        heldout = evaluate(params, out_dir="outputs/eval", **kw) | steps
        seen = evaluate(params, prompts_file="data/prompts/eval_seen.parquet", **kw) | steps
        write_json("metrics/eval.json", heldout)
        write_json("metrics/eval_seen.json", seen)
        tracking.log_image(run_id, Image.open("outputs/eval/grid.png"), "samples/eval_grid.png")
        return {"eval": {"heldout": heldout, "seen": seen}}

    run_stage("evaluate", ["schedule", "eval", "train"], body, datasets=("eval_heldout", "eval_seen"))


if __name__ == "__main__":
    main()
