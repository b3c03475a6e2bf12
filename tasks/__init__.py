"""The work of each pipeline stage and of each Co-GRPO iteration step, run as Prefect tasks by `flows/`."""
