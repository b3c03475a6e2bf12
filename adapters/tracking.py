"""MLflow tracking: a local sqlite store in the repo, runs addressed by id (MLflow's active run is per thread).

Every run has one lifecycle (`_lifecycle`, under `run(...)` and the `dvc repro` group run, `dvc_group()`): a
RUNNING run with the provenance tags (git commit, host and pid; the stages add the sha256 of the files they read
and wrote), FINISHED when its block ends, FAILED when it raises, KILLED on Ctrl-C. A run whose process died
(kill -9, power loss) is found by its pid on the next start and marked FAILED.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import mlflow
import polars as pl
import yaml
from mlflow.entities import DatasetInput, InputTag, Metric, Param, RunStatus
from mlflow.tracking import MlflowClient

EXPERIMENT = "cogrpo"
# read once at import: mlflow.set_tracking_uri() below writes the variable, and must not be taken for the user's
_USER_URI = os.environ.get("MLFLOW_TRACKING_URI")


def setup(root: str | Path = ".") -> str:
    """Point MLflow at <root>/mlflow.db with artifacts under <root>/mlartifacts; return the experiment id.
    MLFLOW_TRACKING_URI, when set, wins (a shared server, or `dvc exp` runs outside the workspace)."""
    root = Path(root).resolve()
    db = root / "mlflow.db"
    mlflow.set_tracking_uri(_USER_URI or f"sqlite:///{db}")
    if not _USER_URI and db.is_file():
        _follow_the_checkout(db, (root / "mlartifacts").as_uri())
    if mlflow.get_experiment_by_name(EXPERIMENT) is None:
        # MLflow 3's UI opens an experiment of no kind in its GenAI view, which hides runs' metrics and charts
        mlflow.create_experiment(EXPERIMENT, artifact_location=(root / "mlartifacts").as_uri(),
                                 tags={"mlflow.experimentKind": "custom_model_development"})
    return mlflow.set_experiment(EXPERIMENT).experiment_id


def _follow_the_checkout(db: Path, artifacts: str) -> None:
    """MLflow stores artifact folders as absolute URIs and paths: the experiments' (MLflow's own `Default` too), each
    run's, each logged model's and model version's. The project's store lives in the checkout: when the checkout
    was copied or moved, point every one under the old checkout at this one (whose files came along), so that no run
    ever writes into, or reads from, another folder."""
    import sqlite3
    from urllib.parse import unquote, urlparse

    with contextlib.closing(sqlite3.connect(db)) as con, con:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if not {"experiments", "runs"} <= tables:
            return
        moved = con.execute("SELECT artifact_location FROM experiments WHERE name = ? AND artifact_location != ?",
                            (EXPERIMENT, artifacts)).fetchone()
        if moved is None:
            return
        old_root, new_root = moved[0].removesuffix("/mlartifacts"), artifacts.removesuffix("/mlartifacts")
        prefixes = [(old_root + "/", new_root + "/"),  # as URIs and as plain paths (MLflow writes both)
                    (unquote(urlparse(old_root).path) + "/", unquote(urlparse(new_root).path) + "/")]
        columns = [("experiments", "artifact_location"), ("runs", "artifact_uri"),
                   ("logged_models", "artifact_location"), ("model_versions", "storage_location")]
        for table, column in columns:
            if table not in tables:
                continue
            for old, new in prefixes:
                con.execute(f"UPDATE {table} SET {column} = ? || substr({column}, ?) WHERE substr({column}, 1, ?) = ?",
                            (new, len(old) + 1, len(old), old))


def git_commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def provenance_tags() -> dict[str, str]:
    return {"git_commit": git_commit(), "cogrpo.host": socket.gethostname(), "cogrpo.pid": str(os.getpid())}


def fail_dead_runs() -> list[str]:
    """Mark FAILED the RUNNING runs of this host whose process is gone; return their ids."""
    client = MlflowClient()
    exp = mlflow.get_experiment_by_name(EXPERIMENT)
    dead = []
    for run in client.search_runs([exp.experiment_id], "attributes.status = 'RUNNING'", max_results=1000):
        tags = run.data.tags
        if tags.get("cogrpo.host") != socket.gethostname() or not tags.get("cogrpo.pid", "").isdigit():
            continue
        try:
            os.kill(int(tags["cogrpo.pid"]), 0)
        except ProcessLookupError:
            client.set_tag(run.info.run_id, "cogrpo.ended", "process died before the run finished")
            client.set_terminated(run.info.run_id, RunStatus.to_string(RunStatus.FAILED))
            dead.append(run.info.run_id)
        except PermissionError:  # alive, owned by another user
            pass
    return dead


def start_run(name: str, tags: dict[str, str] | None = None, parent_id: str | None = None) -> str:
    """A RUNNING run (nested under parent_id when given) with the provenance tags; returns its id."""
    exp = mlflow.get_experiment_by_name(EXPERIMENT)
    all_tags = provenance_tags() | (tags or {}) | {"mlflow.runName": name}
    if parent_id:
        all_tags["mlflow.parentRunId"] = parent_id
    return MlflowClient().create_run(exp.experiment_id, tags=all_tags, run_name=name).info.run_id


@contextlib.contextmanager
def _lifecycle(run_id: str) -> Iterator[None]:
    """End `run_id` with the block: FINISHED when it ends, KILLED on Ctrl-C, FAILED when it raises."""
    try:
        yield
    except KeyboardInterrupt:
        end_run(run_id, status="KILLED")
        raise
    except BaseException:
        end_run(run_id, status="FAILED")
        raise
    end_run(run_id)


@contextlib.contextmanager
def run(name: str, tags: dict[str, str] | None = None, parent_id: str | None = None,
        params: dict | None = None) -> Iterator[str]:
    """A run for the block (nested under parent_id when given), logging `params` flattened; yields its id."""
    run_id = start_run(name, tags, parent_id)
    with _lifecycle(run_id):
        if params:
            log_params(run_id, params)
        yield run_id


def is_dvc(cmdline: list[str]) -> bool:
    """Whether a command line runs dvc: `dvc …`, `python …/bin/dvc …`, or `python -m dvc …` (`make run`'s)."""
    if cmdline[1:3] == ["-m", "dvc"]:
        return True
    return any(Path(part).name == "dvc" for part in cmdline[:2])


def _dvc_pid() -> int | None:
    """The `dvc` process that runs this stage's command (an ancestor: dvc → shell → python), or None."""
    pid = os.getppid()
    for _ in range(4):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
            if is_dvc(cmdline):
                return pid
            pid = int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1])
        except (OSError, ValueError, IndexError):
            return None
    return None


@contextlib.contextmanager
def dvc_group() -> Iterator[str | None]:
    """The parent run of every stage run of one `dvc repro` / `dvc exp run` (one dvc process), named after the
    experiment; it holds the status of its latest stage. Yields None outside DVC."""
    pid = _dvc_pid() if "DVC_STAGE" in os.environ else None
    if pid is None:
        yield None
        return
    client = MlflowClient()
    exp = mlflow.get_experiment_by_name(EXPERIMENT)
    host = socket.gethostname()
    found = client.search_runs([exp.experiment_id], f"tags.`cogrpo.dvc_pid` = '{pid}' AND tags.`cogrpo.host` = '{host}'",
                               order_by=["attributes.start_time DESC"], max_results=1)
    if found:
        group = found[0].info.run_id
        client.update_run(group, status="RUNNING")
    else:
        name = f"dvc exp run · {os.environ['DVC_EXP_NAME']}" if os.environ.get("DVC_EXP_NAME") else "dvc repro"
        group = start_run(name, {"cogrpo.dvc_pid": str(pid), "cogrpo.pid": str(pid)})
    with _lifecycle(group):
        yield group


def set_tags(run_id: str, tags: dict[str, str]) -> None:
    client = MlflowClient()
    for k, v in tags.items():
        client.set_tag(run_id, k, v)


def end_run(run_id: str, status: str = "FINISHED") -> None:
    MlflowClient().set_terminated(run_id, status)


def flatten(d: dict, prefix: str = "") -> dict[str, object]:
    out: dict[str, object] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out |= flatten(v, key + ".")
        elif isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
            for i, x in enumerate(v):
                out |= flatten(x, f"{key}.{i}.")
        else:
            out[key] = v
    return out


def log_params(run_id: str, params: dict) -> None:
    items = [Param(k, str(v)[:6000]) for k, v in flatten(params).items()]
    client = MlflowClient()
    for i in range(0, len(items), 100):  # MLflow's batch limit
        client.log_batch(run_id, params=items[i:i + 100])


def log_schedule(run_id: str, knobs: list[list[float]], prefix: str) -> None:
    """Every step's knob values as params: <prefix>.step3.cfg = 3.0."""
    from cogrpo.core.schedule import KNOBS

    log_params(run_id, {f"{prefix}.step{t + 1}.{k}": round(v, 6) for t, row in enumerate(knobs)
                        for k, v in zip(KNOBS, row)})


def log_prompt_set(run_id: str, path: str | Path, context: str) -> None:
    """A prompt parquet file as an MLflow dataset input (name, digest, source path, schema)."""
    path = Path(path)
    from mlflow.data.dataset_source_registry import get_registered_sources

    # the class itself: a plain path string is ambiguous to MLflow (two local sources register) and warns
    local = next(s for s in get_registered_sources() if s.__name__ == "LocalArtifactDatasetSource")
    df = pl.read_parquet(path).select("prompt", "tag")
    dataset = mlflow.data.from_polars(df, source=local(str(path)), name=path.stem)
    MlflowClient().log_inputs(run_id, [DatasetInput(dataset._to_mlflow_entity(),
                                                    [InputTag("mlflow.data.context", context)])])


def log_metrics(run_id: str, metrics: dict, step: int | None = None, prefix: str = "",
                model_id: str | None = None) -> None:
    """The numbers of a (nested) dict, in batches: one store transaction per 1,000, not one per metric.
    Lists (curves such as a stage's history) are not metrics and are skipped. model_id: a logged model
    (log_checkpoint) they also belong to."""
    now = int(time.time() * 1000)

    def numbers(d: dict) -> dict:
        return {k: numbers(v) if isinstance(v, dict) else v for k, v in d.items() if not isinstance(v, list)}

    metrics = numbers(metrics)
    items = [Metric(k, float(v), now, step or 0, model_id=model_id) for k, v in flatten(metrics, prefix).items()
             if isinstance(v, (int, float)) and not isinstance(v, bool)]
    client = MlflowClient()
    for i in range(0, len(items), 1000):  # MLflow's batch limit
        client.log_batch(run_id, metrics=items[i:i + 1000])


def log_image(run_id: str, image, key: str, step: int) -> None:
    """An image under a key, one per step: the MLflow UI shows a key's images with a step slider."""
    MlflowClient().log_image(run_id, image, key=key, step=step)


def project_path(path: str | Path) -> str:
    """A path as tags name it: relative to the project (the working folder) when inside it, so that a copied or
    moved checkout's runs still name their own folders; absolute otherwise."""
    path = Path(path).resolve()
    return str(path.relative_to(Path.cwd())) if path.is_relative_to(Path.cwd()) else str(path)


def log_checkpoint(run_id: str, model_folder: str | Path, iteration: int, state_dir: str | Path) -> str:
    """A training checkpoint as an MLflow logged model of the run (`checkpoint-<iteration>`), the model folder as
    its artifacts, tagged with the training folder and iteration (so a resumed run finds its predecessor's);
    returns its model_id, to link the iteration's metrics to (log_metrics)."""
    client = MlflowClient()
    tags = {"cogrpo.run_dir": project_path(state_dir), "cogrpo.iteration": str(iteration)}
    model = client.create_logged_model(client.get_run(run_id).info.experiment_id, name=f"checkpoint-{iteration:06d}",
                                       source_run_id=run_id, tags=tags, params={"iteration": str(iteration)},
                                       model_type="cogrpo-checkpoint")
    client.log_model_artifacts(model.model_id, str(model_folder))
    client.finalize_logged_model(model.model_id, "READY")
    return model.model_id


def register_checkpoint(state_dir: str | Path, iteration: int, name: str, alias: str) -> str | None:
    """Register the newest logged model of the training folder's checkpoint at `iteration` as a version of the
    registered model `name`, and point `alias` at it; returns the version (None: no such logged model)."""
    client = MlflowClient()
    found = client.search_logged_models(
        [client.get_experiment_by_name(EXPERIMENT).experiment_id],
        filter_string=f"tags.`cogrpo.run_dir` = '{project_path(state_dir)}' AND "
                      f"tags.`cogrpo.iteration` = '{iteration}'",
        order_by=[{"field_name": "creation_time", "ascending": False}], max_results=1)
    if not found:
        return None
    if not client.search_registered_models(f"name = '{name}'"):
        client.create_registered_model(name, description="cogrpo's exported models (pipelines' train stage)")
    model_id = found[0].model_id
    version = client.create_model_version(name, f"models:/{model_id}", model_id=model_id).version
    client.set_registered_model_alias(name, alias, version)
    return version


def log_artifacts(run_id: str, folder: str | Path, artifact_path: str) -> None:
    MlflowClient().log_artifacts(run_id, str(folder), artifact_path)


def log_results_table(run_id: str, results_jsonl: str | Path) -> None:
    """GenEval results rows (one per image) as an MLflow table: filterable by tag, verdict and reason in the UI."""
    import json

    rows = [json.loads(line) for line in Path(results_jsonl).read_text().splitlines()]
    columns = [c for c in rows[0] if c != "metadata"] if rows else []
    with warnings.catch_warnings():  # MLflow's own pandas call warns about pandas 3 dtypes; nothing for us to do
        warnings.simplefilter("ignore")
        MlflowClient().log_table(run_id, {c: [r[c] for r in rows] for c in columns}, "results.json")


def log_artifacts_file(run_id: str, file: str | Path, artifact_path: str) -> None:
    MlflowClient().log_artifact(run_id, str(file), artifact_path)


def claim_training(run_id: str, state_dir: str | Path, resumed_at: int) -> None:
    """Tag the run with the training folder it owns; when it resumed, link it to the run that wrote the checkpoint."""
    client = MlflowClient()
    folder = project_path(state_dir)
    tags = {"cogrpo.run_dir": folder, "resumed_at_iteration": str(resumed_at)}
    if resumed_at > 0:
        before = client.search_runs([client.get_run(run_id).info.experiment_id], f"tags.`cogrpo.run_dir` = '{folder}'",
                                    order_by=["attributes.start_time DESC"], max_results=2)
        earlier = [r.info.run_id for r in before if r.info.run_id != run_id]
        if earlier:
            tags["resumed_from"] = earlier[0]
    set_tags(run_id, tags)
