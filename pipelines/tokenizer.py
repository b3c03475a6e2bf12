"""DVC stage `tokenizer`: learn the VQ tokenizer → models/tokenizer, round-trip pass rate → metrics/tokenizer.json."""

from cogrpo.io import write_json
from pipelines._stage import run_stage


def main() -> None:
    from flows.prepare import tokenizer
    from tasks import tracking

    def body(params, run_id):
        report = tokenizer(params)
        write_json("metrics/tokenizer.json", report)
        tracking.log_artifacts(run_id, "models/tokenizer", "tokenizer")  # includes roundtrip.png
        return report

    run_stage("tokenizer", ["world", "tokenizer"], body)


if __name__ == "__main__":
    main()
