"""Prefect flows: the stage declarations (stages.py), the Co-GRPO training loop (train.py), and the flows a user
runs — the whole pipeline, one DVC stage, one model's benchmark (pipeline.py)."""
