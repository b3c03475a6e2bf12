import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import yaml  # noqa: E402

from cogrpo.config import PromptsConfig, WorldConfig  # noqa: E402
from cogrpo.prompts import make_prompt_sets  # noqa: E402
from cogrpo.scenes import World  # noqa: E402


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
