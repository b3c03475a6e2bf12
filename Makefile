# Two commands do everything on a fresh machine: `make run` (the pipeline) and `make test`.
VENV := .venv
STAMP := $(VENV)/.installed
export PATH := $(abspath $(VENV))/bin:$(PATH)
# environment defaults (no hub downloads, no telemetry) are applied by every entry point: adapters/env.py

.PHONY: run test bench clean

# constraints-cpu.txt pins the CPU build of torch that pip takes from local disk
$(STAMP): pyproject.toml constraints-cpu.txt
	test -d $(VENV) || python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q -c constraints-cpu.txt -e '.[dev]'
	touch $@

run: $(STAMP)
	dvc repro

test: $(STAMP)
	python -m pytest

bench: $(STAMP)
	python -m pytest -m slow
	python bench/sampler_throughput.py
	python bench/update_cost.py
	python bench/amused_cost.py
	python bench/amused_learning.py

clean:
	rm -rf .prefect mlflow.db mlartifacts
