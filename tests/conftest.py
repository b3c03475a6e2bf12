import os

import numpy as np
import pytest
import yaml

from adapters.env import apply_defaults
from cogrpo.config import PromptsConfig, WorldConfig
from cogrpo.world.prompts import make_prompt_sets
from cogrpo.world.scenes import World

apply_defaults()  # before any test imports Prefect, MLflow or transformers


@pytest.fixture(scope="session")
def world() -> World:
    return World(WorldConfig())


@pytest.fixture(scope="session")
def prompt_sets(world):
    return make_prompt_sets(world, PromptsConfig(dpg_train=200, dpg_eval=24))


@pytest.fixture
def rng():
    return np.random.default_rng(0)


@pytest.fixture(scope="session")
def prefect_api():
    """One real temporary Prefect API server (and database) for every test that runs flows."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


@pytest.fixture(scope="module")
def tiny_project(tmp_path_factory, prefect_api):
    """A fresh working folder holding only params.yaml (the TINY params), as the current directory."""
    from tests.tiny import TINY

    work = tmp_path_factory.mktemp("project")
    (work / "params.yaml").write_text(yaml.safe_dump(TINY))
    old = os.getcwd()
    os.chdir(work)
    try:
        yield work
    finally:
        os.chdir(old)
