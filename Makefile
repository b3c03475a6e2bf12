# Two commands do everything on a fresh machine: `make run` (the pipeline) and `make test`.
VENV := .venv
STAMP := $(VENV)/.installed
# image-reward and hpsv2 live in an environment of their own (reward_server/requirements.txt says why)
REWARD_VENV := .venv-reward
REWARD_STAMP := $(REWARD_VENV)/.installed
export PATH := $(abspath $(VENV))/bin:$(PATH)
# environment defaults (no hub downloads, no telemetry) are applied by every entry point: adapters/env.py

.PHONY: run test bench clean lock reward-env reward-lock

# constraints-cpu.txt is the lock: the CPU build of torch that pip takes from local disk, and every other package
$(STAMP): pyproject.toml constraints-cpu.txt
	test -d $(VENV) || python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q -c constraints-cpu.txt -e '.[dev]'
	touch $@

# the reward environment, installed from its lock (torch 2.14.1 + torchvision: about 6 GB, 2-3 minutes)
$(REWARD_STAMP): reward_server/requirements.txt reward_server/constraints.txt
	test -d $(REWARD_VENV) || python3 -m venv $(REWARD_VENV)
	$(REWARD_VENV)/bin/pip install -q -c reward_server/constraints.txt -r reward_server/requirements.txt
	touch $@

reward-env: $(REWARD_STAMP)

# after editing pyproject.toml's dependencies: resolve afresh (torch held at the CPU build) and write the lock
lock:
	rm -rf $(VENV) && python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q torch==2.13.0 -e '.[dev]'
	{ sed -n 1,4p constraints-cpu.txt; $(VENV)/bin/pip freeze --all | grep -v -E '^(pip==|-e |# Editable)'; } > constraints.tmp
	mv constraints.tmp constraints-cpu.txt
	touch $(STAMP)

# after editing reward_server/requirements.txt: resolve it afresh and write the lock
reward-lock:
	rm -rf $(REWARD_VENV) && python3 -m venv $(REWARD_VENV)
	$(REWARD_VENV)/bin/pip install -q -r reward_server/requirements.txt
	{ sed -n 1,2p reward_server/constraints.txt; $(REWARD_VENV)/bin/pip freeze --all | grep -v '^pip=='; } > reward_server/constraints.tmp
	mv reward_server/constraints.tmp reward_server/constraints.txt
	touch $(REWARD_STAMP)

# `dvc repro` with one Prefect server for all its stages (pipelines/repro.py)
run: $(STAMP)
	python -m pipelines.repro

test: $(STAMP) $(REWARD_STAMP)
	python -m pytest

bench: $(STAMP) $(REWARD_STAMP)
	python -m pytest -m slow
	python bench/sampler_throughput.py
	python bench/update_cost.py
	python bench/amused_cost.py
	python bench/amused_learning.py
	python bench/meissonic_learning.py
	python bench/reward_serving.py

clean:
	rm -rf .prefect mlflow.db mlartifacts
