"""DVC stage `prompts`: train / held-out eval prompt sets → data/prompts, split report → metrics/prompts.json."""

from cogrpo.io import write_json
from pipelines._stage import run_stage


def main() -> None:
    from flows.prepare import prepare_prompts

    def body(params, run_id):
        report = prepare_prompts(params)
        write_json("metrics/prompts.json", report)
        return {name: {"prompts": r["prompts"]} for name, r in report.items() if name != "heldout"}

    run_stage("prompts", ["world", "prompts"], body, datasets=("train", "eval_heldout", "eval_seen"))


if __name__ == "__main__":
    main()
