"""DVC stage `schedule_sweep`: the base model under hand-set schedules → metrics/schedule_sweep.json.

Evidence that the knobs matter: the spread of held-out GenEval-style overall accuracy across schedules.
"""

from cogrpo.io import write_json
from pipelines._stage import run_stage


def main() -> None:
    from flows.evaluate import schedule_sweep

    def body(params, run_id):
        results = schedule_sweep(params)
        overall = {name: r["geneval"]["overall"] for name, r in results.items()}
        report = {"schedules": results, "spread": max(overall.values()) - min(overall.values())}
        write_json("metrics/schedule_sweep.json", report)
        return {"overall": overall, "spread": report["spread"]}

    run_stage("schedule_sweep", ["schedule", "eval", "sweep"], body)


if __name__ == "__main__":
    main()
