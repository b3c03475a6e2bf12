"""Adapters between the pipeline and the tools around it: MLflow tracking, the stage store (the one cache of
stage outputs), the code a stage depends on, progress in the Prefect UI, environment defaults.
Nothing here computes a result, so none of it enters a stage's cache key."""
