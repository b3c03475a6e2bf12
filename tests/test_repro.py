"""`python -m pipelines.repro` (`make run`): one Prefect API for every stage of a `dvc repro`, none when nothing
runs."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

# each stage writes the Prefect API it was given, and the UI URL (empty: no dead "View at" links)
SEEN = "import os, sys; open(sys.argv[1], 'w').write(os.environ.get('PREFECT_API_URL', 'none') + ' ui=' + " \
       "os.environ.get('PREFECT_UI_URL', 'unset'))"


@pytest.fixture
def dvc_project(tmp_path, monkeypatch):
    """A git + DVC repository of two chained stages, as the current folder, no Prefect API named."""
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(Path(__file__).resolve().parents[1]),
                                                      os.environ.get("PYTHONPATH", "")]))
    monkeypatch.chdir(tmp_path)
    subprocess.run(["git", "init", "-q"], check=True)
    subprocess.run([sys.executable, "-m", "dvc", "init", "-q"], check=True)
    stages = {"a": {"cmd": f'{sys.executable} -c "{SEEN}" a.txt', "outs": ["a.txt"]},
              "b": {"cmd": f'{sys.executable} -c "{SEEN}" b.txt', "deps": ["a.txt"], "outs": ["b.txt"]}}
    Path("dvc.yaml").write_text(yaml.safe_dump({"stages": stages}))
    return tmp_path


def test_one_api_serves_every_stage_of_a_repro_and_none_starts_when_nothing_runs(dvc_project, monkeypatch):
    import httpx

    import adapters.prefect_api
    from pipelines.repro import needs_api, repro

    assert repro([]) == 0
    urls = {Path(f).read_text() for f in ("a.txt", "b.txt")}
    assert len(urls) == 1, urls  # one server for both stages
    url, ui = urls.pop().split(" ui=")
    assert url.startswith("http://127.0.0.1:") and ui == ""
    with pytest.raises(httpx.HTTPError):  # stopped with the repro
        httpx.get(f"{url}/health", timeout=2)
    assert "PREFECT_API_URL" not in os.environ and "PREFECT_UI_URL" not in os.environ

    def no_server():
        raise AssertionError("a server was started for an up-to-date repro")

    monkeypatch.setattr(adapters.prefect_api, "temporary_api", no_server)
    assert repro(["b"]) == 0
    assert needs_api(["--force"])
    Path("a.txt").write_text("changed")
    assert needs_api(["b"])
