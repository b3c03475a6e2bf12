"""Retake the screenshots of this folder after a `make run` (README.md here says what each shows).

Starts the Prefect UI and the lean MLflow UI as the README does, on the project's own stores (`.prefect/`,
`mlflow.db`), renders each page in headless Chromium through Playwright and stops the servers; terminal outputs
(`dvc metrics show`, `python -m pipelines.compare`) are rendered as plain text pages. Neither Playwright nor Chromium
is a project dependency: run this with any Python that has `playwright` (pip), beside Debian's `chromium`:
    python -m venv .venv-screens && .venv-screens/bin/pip install playwright && apt-get install chromium
    .venv-screens/bin/python docs/screenshots/take.py [--only NAME ...]
"""

from __future__ import annotations

import argparse
import html
import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
BIN = ROOT / ".venv" / "bin"  # the project's environment (`make run` built it)
PREFECT, MLFLOW = "http://127.0.0.1:4200", "http://127.0.0.1:5000"
ML = "workflowType=machine_learning"  # MLflow 3.17's sidebar defaults to its GenAI view in a new browser


def _get(url: str, body: dict | None = None) -> dict | list:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def _wait(url: str, seconds: float = 180) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url, timeout=5)
            return
        except OSError:
            time.sleep(1)
    raise SystemExit(f"{url}: no answer in {seconds:.0f} s")


@contextmanager
def servers():
    """Both UIs as the README starts them, stopped on the way out."""
    env = os.environ | {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false", "PATH": f"{BIN}:{os.environ['PATH']}"}
    logs = Path(tempfile.mkdtemp(prefix="screenshots-"))
    procs = [subprocess.Popen([BIN / "prefect", "server", "start"], cwd=ROOT, env=env,
                              stdout=open(logs / "prefect.log", "w"), stderr=subprocess.STDOUT),
             subprocess.Popen([BIN / "mlflow", "ui", "--backend-store-uri", "sqlite:///mlflow.db", "--workers", "1"],
                              cwd=ROOT, env=env, stdout=open(logs / "mlflow.log", "w"), stderr=subprocess.STDOUT)]
    try:
        _wait(PREFECT + "/api/health")
        _wait(MLFLOW + "/health")
        yield
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(30)


def text_page(shown: str, command: list[str]) -> str:
    """A terminal's output as a page (a file URL): the command as a user types it and what it printed."""
    out = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300,
                         env=os.environ | {"COLUMNS": "200", "PATH": f"{BIN}:{os.environ['PATH']}"})
    page = (f"<html><body style='background:#111;color:#ddd;font:13px monospace;margin:12px'><pre>$ "
            f"{html.escape(shown)}\n{html.escape(out.stdout + out.stderr)}</pre></body></html>")
    with tempfile.NamedTemporaryFile("w", suffix=".html", delete=False) as f:
        f.write(page)
    return Path(f.name).as_uri()


def mlflow_pages() -> dict[str, tuple[str, tuple[int, int], str | None]]:
    """name → (url, viewport, text typed into the page's chart search box, if any)."""
    exp = _get(MLFLOW + "/api/2.0/mlflow/experiments/get-by-name?experiment_name=cogrpo")["experiment"]
    runs = _get(MLFLOW + "/api/2.0/mlflow/runs/search", {"experiment_ids": [exp["experiment_id"]], "max_results": 200,
                                                        "order_by": ["attributes.start_time DESC"]})["runs"]
    train = next(r["info"]["run_id"] for r in runs if r["info"]["run_name"].startswith("train"))  # the newest
    e = exp["experiment_id"]
    return {"mlflow_runs_chart.png": (f"{MLFLOW}/#/experiments/{e}/runs?{ML}&compareRunsMode=CHART", (1440, 1000),
                                      None),
            "mlflow_train_samples.png": (f"{MLFLOW}/#/experiments/{e}/runs/{train}/model-metrics?{ML}", (1440, 1000),
                                         "samples"),
            "mlflow_logged_models.png": (f"{MLFLOW}/#/experiments/{e}/models?{ML}", (1440, 900), None),
            "mlflow_registered_model.png": (f"{MLFLOW}/#/models/cogrpo?{ML}", (1440, 700), None)}


def prefect_pages() -> dict[str, tuple[str, tuple[int, int], str | None]]:
    runs = _get(PREFECT + "/api/flow_runs/filter", {"sort": "START_TIME_DESC", "limit": 50})
    train = next(r["id"] for r in runs if r["name"] == "stage-train")
    return {"prefect_runs.png": (f"{PREFECT}/runs", (1440, 1000), None),
            "prefect_train_run.png": (f"{PREFECT}/runs/flow-run/{train}", (1440, 1000), None)}


def failed_run() -> dict[str, tuple[str, tuple[int, int], str | None]]:
    """A `pipeline/cogrpo` run triggered with a bad parameter, as from the UI's form, served by `pipelines.serve`: the
    run's page shows its one-line error."""
    env = os.environ | {"PREFECT_API_URL": PREFECT + "/api", "PATH": f"{BIN}:{os.environ['PATH']}"}
    serve = subprocess.Popen([BIN / "python", "-m", "pipelines.serve"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                deployment = _get(PREFECT + "/api/deployments/name/pipeline/cogrpo")
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise SystemExit("pipelines.serve registered no deployment in 180 s") from None
                time.sleep(2)
        run = _get(f"{PREFECT}/api/deployments/{deployment['id']}/create_flow_run",
                   {"parameters": {"overrides": {"train.learning_rate": 1e-4}}})
        while _get(f"{PREFECT}/api/flow_runs/{run['id']}")["state_type"] not in ("FAILED", "COMPLETED", "CRASHED"):
            if time.monotonic() > deadline + 180:
                raise SystemExit(f"flow run {run['id']} did not end in 6 minutes")
            time.sleep(2)
    finally:
        serve.terminate()
        serve.wait(30)
    return {"prefect_bad_parameter.png": (f"{PREFECT}/runs/flow-run/{run['id']}", (1440, 900), None)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", nargs="*", help="file names to retake (default: all)")
    args = ap.parse_args()
    chromium = shutil.which("chromium")
    if not chromium:
        raise SystemExit("chromium: not found (Debian: apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    want = lambda name: not args.only or name in args.only  # noqa: E731
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=["--no-sandbox"])

        def shoot(name: str, url: str, size: tuple[int, int], search: str | None = None, wait_s: float = 8) -> None:
            page = browser.new_page(viewport={"width": size[0], "height": size[1]})
            page.goto(url)
            page.wait_for_timeout(wait_s * 1000)
            if search:  # the image card of that key, at its last step, full screen and scrolled to the image
                page.get_by_placeholder("Search metric charts").fill(search)
                page.wait_for_timeout(3000)
                page.locator("input[type=number]").first.fill("1000000")  # past the last step: the slider's end
                page.mouse.click(426, 276)  # the card's full-screen button (MLflow 3.17, this viewport)
                page.wait_for_timeout(5000)
                page.mouse.move(700, 500)
                page.mouse.wheel(0, 850)  # MLflow prints every param of the run above the image
                page.wait_for_timeout(2000)
            page.screenshot(path=str(HERE / name))
            page.close()
            print(f"{name}: {url}")

        terminals = {"terminal_dvc_metrics_show.png": ("dvc metrics show", [BIN / "dvc", "metrics", "show"],
                                                       (1440, 160)),
                     "terminal_compare.png": ("python -m pipelines.compare",
                                              [BIN / "python", "-m", "pipelines.compare"], (1440, 520))}
        for name, (shown, command, size) in terminals.items():
            if want(name):
                shoot(name, text_page(shown, [str(c) for c in command]), size, wait_s=0.5)
        if want("dvc_plots.png"):
            subprocess.run([BIN / "dvc", "plots", "show", "-o", ROOT / "dvc_plots"], cwd=ROOT, check=True,
                           capture_output=True)
            shoot("dvc_plots.png", (ROOT / "dvc_plots" / "index.html").as_uri(), (1440, 1400), wait_s=3)
        with servers():
            pages = mlflow_pages() | prefect_pages() | (failed_run() if want("prefect_bad_parameter.png") else {})
            for name, (url, size, search) in pages.items():
                if want(name):
                    shoot(name, url, size, search)
        browser.close()


if __name__ == "__main__":
    main()
