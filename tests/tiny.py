"""Params of a tiny but complete run of every stage: seconds on a CPU, same code paths as the real run."""

TINY: dict = {
    "prompts": {"dpg_train": 40, "dpg_eval": 6, "eval_per_tag": 3},
    "tokenizer": {"train_scenes": 150},
    "model": {"text_encoder": "tiny-random", "dim": 32, "layers": 1, "heads": 2},
    "pretrain": {"steps": 12, "batch_size": 16, "pool_size": 200, "log_every": 4},
    "schedule": {"steps": 4},
    "eval": {"samples_per_prompt": 2},
    "benchmark": {"steps": [2, 4], "variants": ["base-base", "trained-learned"]},
    "sweep": [{"name": "cold", "temperature": 0.5}],
    "train": {"iterations": 3, "prompts_per_iter": 2, "group_size": 2, "checkpoint_every": 2, "sample_every": 2},
}

STAGE_ORDER = ("prompts", "tokenizer", "pretrain", "baseline", "schedule_sweep", "train", "evaluate", "benchmark",
               "headline")  # the order `dvc repro` runs them in


def run_stage(name: str) -> dict:
    """One DVC stage as `dvc repro` runs it (`python -m pipelines.stage NAME`), in this process."""
    from pipelines.stage import main

    return main([name])


def count_calls(modules) -> list[int]:
    """Forward calls of each module, counted from now on (a gradient-checkpointed layer runs again in backward)."""
    counts = [0] * len(modules)
    for i, module in enumerate(modules):
        module.register_forward_hook(lambda *_, i=i: counts.__setitem__(i, counts[i] + 1))
    return counts
