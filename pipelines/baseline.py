"""DVC stage `baseline`: the pretrained model under the base schedule on held-out prompts.

Writes GenEval's layout to outputs/baseline and metrics/baseline.json; seen prompts go to
metrics/baseline_seen.json.
"""

from cogrpo.io import write_json
from pipelines._stage import run_stage


def main() -> None:
    from PIL import Image

    from flows.evaluate import evaluate
    from tasks import tracking

    def body(params, run_id):
        heldout = evaluate(params, out_dir="outputs/baseline") | {"steps": params.schedule.steps}
        seen = evaluate(params, prompts_file="data/prompts/eval_seen.parquet") | {"steps": params.schedule.steps}
        write_json("metrics/baseline.json", heldout)
        write_json("metrics/baseline_seen.json", seen)
        tracking.log_image(run_id, Image.open("outputs/baseline/grid.png"), "samples/baseline_grid.png")
        return {"baseline": {"heldout": heldout, "seen": seen}}

    run_stage("baseline", ["schedule", "eval"], body, datasets=("eval_heldout", "eval_seen"))


if __name__ == "__main__":
    main()
