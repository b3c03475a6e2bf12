"""Prefect tasks: one per stage step, thin wrappers that call the library, write files, return paths."""
