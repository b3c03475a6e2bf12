import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

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
