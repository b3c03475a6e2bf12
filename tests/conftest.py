import contextlib
import os
import shutil
import warnings
from pathlib import Path

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
    """One real temporary Prefect API server (and database) for every test that runs flows, named in the
    environment too, so the entry points (pipelines/cli.py) use it rather than start one each."""
    from prefect.settings import get_current_settings
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        old = os.environ.get("PREFECT_API_URL")
        os.environ["PREFECT_API_URL"] = str(get_current_settings().api.url)
        try:
            yield
        finally:
            if old is None:
                os.environ.pop("PREFECT_API_URL", None)
            else:
                os.environ["PREFECT_API_URL"] = old


@contextlib.contextmanager
def _working_folder(folder: Path):
    old = os.getcwd()
    os.chdir(folder)
    try:
        yield folder
    finally:
        os.chdir(old)


@pytest.fixture(scope="module")
def tiny_project(tmp_path_factory, prefect_api):
    """A fresh working folder holding only params.yaml (the TINY params), as the current directory."""
    from tests.tiny import TINY

    work = tmp_path_factory.mktemp("project")
    (work / "params.yaml").write_text(yaml.safe_dump(TINY))
    with _working_folder(work):
        yield work


@pytest.fixture(scope="session")
def tiny_built(tmp_path_factory, prefect_api) -> Path:
    """The TINY project after every DVC stage's entry point ran in order (`dvc repro`'s commands, in this process),
    built once per session; a normal run prints no warnings."""
    from tests.tiny import STAGE_ORDER, TINY, run_stage

    work = tmp_path_factory.mktemp("built")
    (work / "params.yaml").write_text(yaml.safe_dump(TINY))
    with _working_folder(work), warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        for name in STAGE_ORDER:
            run_stage(name)
    return work


@pytest.fixture(scope="module")
def built_project(tiny_built, tmp_path_factory):
    """A copy of the built TINY project of this module's own (a copied checkout is a whole project: its store,
    MLflow runs and artifacts follow it), as the current directory."""
    from adapters import tracking

    work = tmp_path_factory.mktemp("copy") / "project"
    shutil.copytree(tiny_built, work, symlinks=True)
    with _working_folder(work):
        tracking.setup(work)  # MLflow's store is process-wide: this copy's own
        yield work
