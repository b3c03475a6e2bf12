"""DVC stage `pretrain`: masked-token pretraining → models/base; loss curve → metrics/pretrain_loss.csv."""

from cogrpo.io import write_json, write_text_atomic
from pipelines._stage import run_stage


def main() -> None:
    from flows.pretrain import pretrain
    from tasks import tracking

    def body(params, run_id):
        history = pretrain(params, run_id=run_id)
        write_text_atomic("metrics/pretrain_loss.csv",
                          "step,loss\n" + "".join(f"{h['step']},{h['loss']:.5f}\n" for h in history))
        summary = {"final_loss": history[-1]["loss"], "steps": history[-1]["step"], "minutes": history[-1]["minutes"]}
        write_json("metrics/pretrain.json", summary)
        tracking.log_artifacts(run_id, "models/base", "checkpoint")
        return summary

    run_stage("pretrain", ["model", "pretrain"], body)


if __name__ == "__main__":
    main()
