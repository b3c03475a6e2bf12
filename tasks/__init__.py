"""Prefect tasks: one per stage step, thin wrappers that call the library, write files, return paths.

Importing the package sets the environment defaults every entry point needs (before prefect, mlflow or
transformers read them): no hub downloads, no telemetry.
"""

import os

for _k, _v in {"HF_HUB_OFFLINE": "1", "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
               "MLFLOW_DISABLE_TELEMETRY": "true", "TOKENIZERS_PARALLELISM": "false"}.items():
    os.environ.setdefault(_k, _v)
