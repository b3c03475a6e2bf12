"""DVC stage `train`: Co-GRPO from the base model → models/trained (model + learned schedule JSON).

Resumes from runs/train/checkpoint when a previous run was interrupted (DVC keeps it: persist).
"""

from cogrpo.io import write_json
from pipelines._stage import run_stage


def main() -> None:
    import json
    from pathlib import Path

    from flows.train import train
    from tasks import tracking

    def body(params, run_id):
        out = train(params, mlflow_run_id=run_id)
        tracking.log_artifacts(run_id, out, "trained")
        rows = json.loads((Path(out) / "schedule.json").read_text())["schedule"]
        write_json("metrics/learned_schedule.json", [{"step": t + 1} | r for t, r in enumerate(rows)])
        return {"iterations": params.train.iterations}

    run_stage("train", ["train", "schedule"], body)


if __name__ == "__main__":
    main()
