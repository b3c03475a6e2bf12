"""Prefect flows composing the tasks: data preparation, pretraining, evaluation, the whole pipeline."""
