"""Deployments of the `pipeline` and `benchmark` flows, served from this process for the Prefect UI.

    prefect server start            # one terminal: the API and the UI at http://127.0.0.1:4200
    python -m pipelines.serve       # another: registers the deployments and runs what the UI triggers

`pipeline/cogrpo` runs on demand with typed parameters (mode, steps, seed, overrides); `pipeline/nightly`
runs the same at 02:00 every day, created paused (resume it in the UI); `benchmark/cogrpo` evaluates a
model. One flow run at a time: two trainings on one small machine only slow each other down.
"""

from __future__ import annotations

from adapters.env import apply_defaults


def deployments() -> list:
    from prefect.deployments.runner import EntrypointType

    from flows.pipeline import benchmark, pipeline

    common = {"entrypoint_type": EntrypointType.MODULE_PATH, "tags": ["cogrpo"]}
    return [
        pipeline.to_deployment(name="cogrpo", description="The whole experiment, every stage cached by content.",
                               **common),
        pipeline.to_deployment(name="nightly", cron="0 2 * * *", paused=True,
                               description="The default experiment every night (resume to enable).", **common),
        benchmark.to_deployment(name="cogrpo", description="GenEval-style benchmark of one model and schedule.",
                                **common),
    ]


def main() -> None:
    apply_defaults()
    from prefect import serve

    serve(*deployments(), limit=1)


if __name__ == "__main__":
    main()
