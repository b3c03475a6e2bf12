"""Params as every entry point loads them: the schema (`cogrpo.config`) plus the checks that need the library
(reward names from the registry, the training set's size, a pretrained backbone's weights), so a run that cannot
work fails at load with one line naming the key, before anything is written."""

from __future__ import annotations

import json
from pathlib import Path

from cogrpo import config
from cogrpo.config import Params, ParamsError


def cross_check(params: Params, source: str = "params") -> Params:
    from cogrpo.rewards import REGISTRY, SERVED, served_terms
    from cogrpo.world.prompts import max_train_prompts
    from cogrpo.world.scenes import World

    for key in ("rewards", "eval_rewards"):
        for i, term in enumerate(getattr(params.train, key)):
            if term.name not in REGISTRY:
                raise ParamsError(f"{source}: key 'train.{key}.{i}.name': unknown reward '{term.name}' "
                                  f"(known: {', '.join(sorted(REGISTRY))})")

    if params.train.nodes > 1 and not params.reward_models.url and any(
            t.name in SERVED for t in served_terms(params.train)):
        raise ParamsError(f"{source}: key 'reward_models.url': a training over {params.train.nodes} nodes needs a "
                          "reward server every node reaches (the stage's own listens on 127.0.0.1)")
    _served_rewards_can_start(params, served_terms(params.train), source)
    _benchmark_scorers_can_run(params, source)
    most = max_train_prompts(World(params.world), params.prompts)
    if params.train.prompts_per_iter > most:
        raise ParamsError(f"{source}: key 'train.prompts_per_iter': {params.train.prompts_per_iter} exceeds the "
                          f"at most {most} training prompts this world and prompts section make")
    if params.model.backbone != "embedded":  # missing weights: one line now, not a traceback minutes later
        from cogrpo.backbones.snapshot import snapshot_folder

        snapshot_folder(params.model.pretrained, params.model.backbone)
    return params


def _benchmark_scorers_can_run(params: Params, source: str) -> None:
    """A published suite's scorer must be set up before hours of generation, not found missing after them."""
    cfg, suites = params.benchmark, params.benchmark.suites
    if "geneval" in suites:
        command = cfg.geneval.command or ""
        lacking = [p for p in ("{images}", "{results}") if p not in command]
        if lacking:
            raise ParamsError(f"{source}: key 'benchmark.geneval.command': {command!r} lacks {' and '.join(lacking)}: "
                              "GenEval's evaluator, run where you installed it, scores the geneval suite")
    if "dpg" in suites:
        if not cfg.dpg.csv or not Path(cfg.dpg.csv).is_file():
            raise ParamsError(f"{source}: key 'benchmark.dpg.csv': {cfg.dpg.csv!r} is not a file: give the path of "
                              "DPG-Bench's question graph (dpg_bench.csv of its repository)")
        if not cfg.dpg.vqa_model or not Path(cfg.dpg.vqa_model).is_dir():
            raise ParamsError(f"{source}: key 'benchmark.dpg.vqa_model': {cfg.dpg.vqa_model!r} is not a folder: give "
                              "the VQA model's weights (DPG's mPLUG-large, or a transformers BLIP VQA)")
    _served_rewards_can_start(params, benchmark_reward_terms(params), source)


def benchmark_reward_terms(params: Params) -> list:
    """The reward models (cogrpo.rewards.Term) the benchmark's suites are scored by."""
    from cogrpo.rewards import Term

    suites = params.benchmark.suites
    return ([Term("imagereward")] if "imagereward" in suites else []) + (
        [Term("hpsv2", version=v) for v in params.benchmark.hpsv2_versions] if "hpsv2" in suites else [])


def _served_rewards_can_start(params: Params, terms: list, source: str) -> None:
    """Rewards the run's own reward server will score need its environment and their weight files, now."""
    from cogrpo.rewards import SERVED
    from cogrpo.rewards.remote import server_files

    served = [t for t in terms if t.name in SERVED]
    if not served or params.reward_models.url:
        return
    for label, key, path, where in server_files(params.reward_models, served):
        if not path or not Path(path).is_file():
            raise ParamsError(f"{source}: key '{key}': reward {label!r} needs {path!r}, which is not a file; "
                              f"download {where} there, or give the path")
    python = params.reward_models.python
    if not Path(python).is_file():
        raise ParamsError(f"{source}: key 'reward_models.python': {python!r} not found: build the reward "
                          "environment with `make reward-env`, or give reward_models.url of a running server")


_LOADED: dict[tuple, Params] = {}


def load_params(path: str | Path = "params.yaml", overrides: dict[str, object] | None = None) -> Params:
    """The params file with dotted-key overrides applied, parsed and cross-checked once per process for the same
    bytes and overrides (an entry point checks before Prefect starts, its flow loads again: one check, and a
    copy each, so no caller sees another's changes)."""
    path = Path(path)
    key = (str(path.resolve()), path.read_bytes() if path.is_file() else None,
           json.dumps(overrides or {}, sort_keys=True, default=str))
    if key not in _LOADED:
        params = config.load_params(path)
        if overrides:
            params = config.with_overrides(params, overrides, "overrides")
        _LOADED[key] = cross_check(params, f"{path} with overrides" if overrides else str(path))
    return _LOADED[key].model_copy(deep=True)

