"""Command-line entry points: the DVC stages (`python -m pipelines.stage NAME`), the whole pipeline flow, the
Prefect deployments, dvc.yaml's generator, and run comparison. Each applies the environment defaults first
and turns bad input into one line naming the file, key or line (exit status 2)."""
