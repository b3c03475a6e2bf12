"""Benchmarks: GenEval-style and DPG-style evaluation of a model under a schedule."""
