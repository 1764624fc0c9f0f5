# StreamConsumer — developer entry points. Every target installs what it needs.
SHELL := bash
.DEFAULT_GOAL := help

PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMPS := .stamps
PYTEST_ARGS ?=

.PHONY: help
help:  ## list the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

$(STAMPS)/venv: pyproject.toml
	@mkdir -p $(STAMPS)
	@echo "==> Python environment ($(VENV))"
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@$(BIN)/pip install --quiet --upgrade pip
	@$(BIN)/pip install --quiet -e '.[dev]'
	@touch $@

$(STAMPS)/emulators: tests/kinesis/package.json tests/kinesis/package-lock.json
	@mkdir -p $(STAMPS)
	@echo "==> Kinesis emulators (npm: kinesis-local, kinesalite)"
	@cd tests/kinesis && npm ci --no-audit --no-fund --loglevel=error
	@touch $@

.PHONY: venv emulators controlplane
venv: $(STAMPS)/venv  ## create .venv with the package and the dev tools
emulators: $(STAMPS)/emulators  ## install the Kinesis emulators
controlplane:  ## build etcd, kube-apiserver, kube-controller-manager, kubectl (cached)
	@tests/controlplane/build.sh >/dev/null

.PHONY: test
test: venv emulators controlplane  ## unit, property and integration tests on the real parts
	$(BIN)/pytest $(PYTEST_ARGS)

.PHONY: lint
lint: venv  ## ruff and mypy
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

.PHONY: fmt
fmt: venv  ## format and autofix
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

.PHONY: cluster
cluster: venv controlplane  ## run a local control plane in the foreground (prints its kubeconfig)
	PYTHONPATH=tests $(BIN)/python -m testbed.controlplane

.PHONY: clean
clean:  ## remove the venv and stamps (the control-plane cache stays in ~/.cache/streamconsumer)
	rm -rf $(VENV) $(STAMPS) tests/kinesis/node_modules

.PHONY: crds
crds: venv  ## regenerate crds/streamconsumer.yaml from the pydantic models
	$(BIN)/python -m streamconsumer.crd > crds/streamconsumer.yaml

.PHONY: bench
bench: venv emulators controlplane  ## benchmarks; figures also go to bench/results.json
	@rm -f bench/results.json
	$(BIN)/python -m bench.lease_engine
	PYTHONPATH=tests $(BIN)/python -m bench.system

.PHONY: demo
demo: venv emulators controlplane  ## the whole system live: 3 workers, 4 shards, a split and a pod kill
	PYTHONPATH=tests $(BIN)/python -m testbed.demo
