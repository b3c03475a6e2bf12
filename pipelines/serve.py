"""Deployments of the `pipeline` and `benchmark` flows, served from this process for the Prefect UI.

    prefect server start            # one terminal: the API and the UI at http://127.0.0.1:4200
    python -m pipelines.serve       # another: registers the deployments and runs what the UI triggers

`pipeline/cogrpo` runs on demand with typed parameters (mode, steps, seed, overrides); `pipeline/nightly`
runs the same at 02:00 every day once its schedule is switched on (the schedule's toggle in the UI, or
`prefect deployment schedule resume pipeline/nightly <schedule id>`), and stays as set when this process
restarts; `benchmark/cogrpo` evaluates a model. One flow run at a time: two trainings on one small machine
only slow each other down.
"""

from __future__ import annotations

import asyncio

from adapters.env import apply_defaults

NIGHTLY = "nightly-2am"  # the slug of the nightly schedule


def nightly_active() -> bool:
    """Whether the nightly schedule is switched on now (in the UI or with `prefect deployment schedule resume`):
    serving re-registers the deployments and would otherwise reset it. Off when the deployment does not exist."""
    from prefect import get_client
    from prefect.exceptions import ObjectNotFound

    async def read() -> bool:
        async with get_client() as client:
            try:
                deployment = await client.read_deployment_by_name("pipeline/nightly")
            except ObjectNotFound:
                return False
            return any(s.active for s in deployment.schedules if s.slug == NIGHTLY)

    return asyncio.run(read())


def deployments(nightly_on: bool = False) -> list:
    from prefect.deployments.runner import EntrypointType
    from prefect.schedules import Cron

    from flows.pipeline import benchmark, generate, pipeline

    common = {"entrypoint_type": EntrypointType.MODULE_PATH, "tags": ["cogrpo"]}
    return [
        pipeline.to_deployment(name="cogrpo", description="The whole experiment, every stage cached by content.",
                               **common),
        pipeline.to_deployment(name="nightly", schedules=[Cron("0 2 * * *", active=nightly_on, slug=NIGHTLY)],
                               description="The default experiment every night at 02:00 (switch its schedule on).",
                               **common),
        benchmark.to_deployment(name="cogrpo", description="Benchmarks of a trained model: variants × step counts × suites.",
                                **common),
        generate.to_deployment(name="cogrpo", description="One shard of a stage's image generation: start one run "
                               "per worker (shard 0 … shards-1), then the stage.", **common),
    ]


def main() -> None:
    apply_defaults()
    from prefect import serve

    serve(*deployments(nightly_active()), limit=1)


if __name__ == "__main__":
    main()
