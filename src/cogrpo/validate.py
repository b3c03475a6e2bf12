"""Params as every entry point loads them: the schema (`cogrpo.config`) plus the checks that need the library
(reward names from the registry, the training set's size, a pretrained backbone's weights), so a run that cannot
work fails at load with one line naming the key, before anything is written."""

from __future__ import annotations

from pathlib import Path

from cogrpo import config
from cogrpo.config import Params, ParamsError


def cross_check(params: Params, source: str = "params") -> Params:
    from cogrpo.rewards import REGISTRY
    from cogrpo.world.prompts import max_train_prompts
    from cogrpo.world.scenes import World

    for i, term in enumerate(params.train.rewards):
        if term.name not in REGISTRY:
            raise ParamsError(f"{source}: key 'train.rewards.{i}.name': unknown reward '{term.name}' "
                              f"(known: {', '.join(sorted(REGISTRY))})")

    _served_rewards_can_start(params, source)
    most = max_train_prompts(World(params.world), params.prompts)
    if params.train.prompts_per_iter > most:
        raise ParamsError(f"{source}: key 'train.prompts_per_iter': {params.train.prompts_per_iter} exceeds the "
                          f"at most {most} training prompts this world and prompts section make")
    if params.model.backbone == "amused":  # missing weights: one line now, not a traceback minutes later
        from cogrpo.backbones.amused import snapshot_folder

        snapshot_folder(params.model.pretrained)
    return params


def _served_rewards_can_start(params: Params, source: str) -> None:
    """Rewards the run's own reward server will score need its environment and their weight files, now."""
    from cogrpo.rewards import SERVED, Term
    from cogrpo.rewards.remote import server_files

    served = [Term.of(t) for t in params.train.rewards if t.name in SERVED]
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


def load_params(path: str | Path = "params.yaml") -> Params:
    return cross_check(config.load_params(path), str(path))


def with_overrides(params: Params, overrides: dict[str, object], source: str = "overrides") -> Params:
    return cross_check(config.with_overrides(params, overrides, source), source)
