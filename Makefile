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
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-14s %s\n", $$1, $$2}'

$(STAMPS)/venv: pyproject.toml requirements/dev.lock
	@mkdir -p $(STAMPS)
	@echo "==> Python environment ($(VENV))"
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@$(BIN)/pip install --quiet --upgrade pip
	@$(BIN)/pip install --quiet -c requirements/dev.lock -e '.[dev]'
	@touch $@

.PHONY: lock
lock:  ## re-resolve the dev dependencies into requirements/dev.lock
	@rm -rf .lockenv && $(PYTHON) -m venv .lockenv && .lockenv/bin/pip install --quiet -e '.[dev]'
	@{ sed -n 1,2p requirements/dev.lock; .lockenv/bin/pip freeze --exclude-editable; } > requirements/dev.lock.new
	@mv requirements/dev.lock.new requirements/dev.lock && rm -rf .lockenv

$(STAMPS)/distenv: requirements/dist.lock
	@mkdir -p $(STAMPS)
	@test -x .distenv/bin/python || $(PYTHON) -m venv .distenv
	@.distenv/bin/pip install --quiet -r requirements/dist.lock
	@touch $@

.PHONY: dist
dist: $(STAMPS)/distenv  ## the wheel and sdist in dist/, checked by twine
	@rm -rf dist
	@.distenv/bin/python -m build --outdir dist . > /dev/null
	@.distenv/bin/twine check --strict dist/*

$(STAMPS)/emulators: tests/kinesis/package.json tests/kinesis/package-lock.json
	@mkdir -p $(STAMPS)
	@echo "==> Kinesis emulators (npm: kinesis-local, kinesalite)"
	@cd tests/kinesis && npm ci --no-audit --no-fund --loglevel=error
	@touch $@

# DynamoDB Local and sqlite4java's native library, from Maven Central, into tests/dynamodb/lib.
$(STAMPS)/dynamodb-local: tests/dynamodb/pom.xml
	@mkdir -p $(STAMPS)
	@echo "==> DynamoDB Local (Maven Central: com.amazonaws:DynamoDBLocal, sqlite4java) into tests/dynamodb/lib"
	@rm -rf tests/dynamodb/lib
	@cd tests/dynamodb && mvn -B -Dstyle.color=never dependency:copy-dependencies \
	  -DoutputDirectory=lib -DincludeScope=runtime 2>&1 \
	  | sed -u 's/\x1b\[[0-9;]*m//g' | grep --line-buffered -E '^\[(ERROR|WARNING)\]|BUILD|Downloaded from'
	@test -n "$$(ls tests/dynamodb/lib/DynamoDBLocal-*.jar)"
	@touch $@

.PHONY: venv emulators dynamodb-local controlplane helm kstatus actionlint prometheus kubevalidate node-packages node-binaries node-images
venv: $(STAMPS)/venv  ## create .venv with the package and the dev tools
emulators: $(STAMPS)/emulators $(STAMPS)/dynamodb-local  ## install the Kinesis emulators and DynamoDB Local
dynamodb-local: $(STAMPS)/dynamodb-local  ## install DynamoDB Local (Maven Central, Java 17)
controlplane:  ## build etcd, kube-apiserver, kube-controller-manager, kubectl (cached)
	@tests/controlplane/build.sh >/dev/null
helm:  ## build helm from Go modules for the chart tests (cached; a helm on PATH is used)
	@tests/helm/build.sh >/dev/null
kstatus: controlplane  ## build kstatus (Flux's readiness verdict) from Go modules, for the status tests (cached)
	@tests/kstatus/build.sh >/dev/null
actionlint:  ## build actionlint from Go modules and apt-get shellcheck, for .github/workflows (cached)
	@tests/actionlint/build.sh >/dev/null
prometheus:  ## build prometheus and promtool from Go modules, to test the PromQL we ship (cached)
	@tests/prometheus/build.sh >/dev/null
kubevalidate:  ## build the chart's manifest checker once per Kubernetes minor 1.30-1.34 (cached)
	@tests/kubevalidate/build.sh >/dev/null
node-packages:  ## apt-get the real node's Debian packages when missing (podman, containerd, ...)
	@tests/node/packages.sh
node-binaries: controlplane  ## build kubelet, kube-scheduler, kube-proxy, pause (cached)
	@tests/node/build.sh >/dev/null
node-images: venv node-packages  ## build our images with podman, FROM a debootstrapped bookworm (cached)
	@PYTHONPATH=tests $(BIN)/python -m testbed.images >/dev/null

# The tests wait on leases, emulators and JVMs more than they compute: xdist runs them on
# TEST_WORKERS processes (tests/conftest.py keeps the real node, Spark and each integration
# file on one worker, and orders the longest first). The tools are independent builds and downloads, made side by side.
TEST_WORKERS ?= 3
# A run that has not ended by then is interrupted, and says what failed and what was
# still running: well within CI's 90 minutes, whatever hangs.
TEST_BUDGET_SECONDS ?= 3600
# peers-deps: the real KCL (kclpy's MultiLangDaemon and jars) for the migration e2e.
TEST_TOOLS := venv emulators peers-deps controlplane helm-after-controlplane kstatus actionlint prometheus kubevalidate node-packages node-binaries node-images

# helm compiles the control plane's client packages at the same versions
# (tests/controlplane/go.mod): built after it, it finds them in Go's build cache.
.PHONY: helm-after-controlplane
helm-after-controlplane: controlplane
	@tests/helm/build.sh >/dev/null

.PHONY: test test-tools
test-tools: $(TEST_TOOLS)
test:  ## unit, property, integration, end-to-end and real-node tests (prints the slowest)
	@$(MAKE) --no-print-directory -j4 --output-sync=line test-tools
	timeout --signal=INT --kill-after=60 $(TEST_BUDGET_SECONDS) \
	  $(BIN)/pytest -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder --durations=25 $(PYTEST_ARGS)

.PHONY: lint
lint: venv  ## ruff, mypy and the layer contract (import-linter)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports --no-cache

.PHONY: fmt
fmt: venv  ## format and autofix
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

.PHONY: release-dry-run pin-bases
release-dry-run: venv helm actionlint node-packages  ## every step of the release workflow that runs here; pushes and signs nothing
	@PYTHONPATH=tests $(BIN)/python -m release.dry_run
pin-bases:  ## the digest the images' base tag names today (docker or skopeo, and Docker Hub)
	@release/pin-bases.sh

.PHONY: soak
SOAK_MINUTES ?= 20
soak: venv  ## the protocol simulation on new fault schedules for SOAK_MINUTES (default 20)
	PYTHONPATH=tests $(BIN)/python -m sim.soak --minutes $(SOAK_MINUTES)

.PHONY: cluster node
cluster: venv controlplane  ## run a local control plane in the foreground (prints its kubeconfig)
	PYTHONPATH=tests $(BIN)/python -m testbed.controlplane
node: venv node-packages node-binaries node-images  ## a control plane and a real node in the foreground (prints its kubeconfig)
	PYTHONPATH=tests $(BIN)/python -m testbed.node

.PHONY: clean
clean:  ## remove the venv and stamps (the control-plane cache stays in ~/.cache/streamconsumer)
	rm -rf $(VENV) $(STAMPS) tests/kinesis/node_modules tests/dynamodb/lib

.PHONY: crds
crds: venv  ## regenerate crds/streamconsumer.yaml and the chart's admission policy from the models
	$(BIN)/python -m streamconsumer.crd > crds/streamconsumer.yaml
	$(BIN)/python -m streamconsumer.crd --chart > charts/streamconsumer/templates/crd.yaml
	$(BIN)/python -m streamconsumer.admission > charts/streamconsumer/templates/admission-policy.yaml

.PHONY: bench
bench: venv emulators controlplane node-packages node-binaries node-images  ## benchmarks; figures also go to bench/results.json
	@rm -f bench/results.json
	$(BIN)/python -m bench.lease_engine
	$(BIN)/python -m bench.decode
	PYTHONPATH=tests $(BIN)/python -m bench.system
	PYTHONPATH=tests $(BIN)/python -m bench.fanout
	PYTHONPATH=tests $(BIN)/python -m bench.parallelism
	PYTHONPATH=tests $(BIN)/python -m bench.asynchronous
	PYTHONPATH=tests $(BIN)/python -m bench.processes
	PYTHONPATH=tests $(BIN)/python -m bench.lease_groups
	PYTHONPATH=tests $(BIN)/python -m bench.etcd_cost
	PYTHONPATH=tests $(BIN)/python -m bench.busy
	PYTHONPATH=tests $(BIN)/python -m bench.batching_window
	PYTHONPATH=tests $(BIN)/python -m bench.spark
	PYTHONPATH=tests:examples $(BIN)/python -m bench.cdc_merge
	PYTHONPATH=tests:examples $(BIN)/python -m bench.containers

.PHONY: bench-many
bench-many: venv emulators controlplane  ## 200 consumers of 50 shards on one operator (not in `bench`: no steady state on 2 cores shared with the apiserver)
	PYTHONPATH=tests $(BIN)/python -m bench.many_consumers

.PHONY: peers-deps bench-peers
PEERS_RUNS ?= 3
PEERS_RECORDS ?= 100000
peers-deps: venv  ## kclpy 3.1.3 + its KCL jars, DynamoDB Local, into build/peers (cached)
	@$(BIN)/python -m bench.peers.install
bench-peers: venv emulators controlplane peers-deps  ## KCL (kclpy) vs our worker on the same records (PEERS_RUNS, PEERS_RECORDS)
	PYTHONPATH=tests $(BIN)/python -m bench.peers --runs $(PEERS_RUNS) --records $(PEERS_RECORDS)

.PHONY: demo
PIPELINE ?= recording
demo: venv emulators controlplane  ## the system live: 4 shards, a split, a pod kill (PIPELINE=recording|spark|bronze|cdc)
	PYTHONPATH=tests:examples $(BIN)/python -m testbed.demo --pipeline $(PIPELINE)

# --- for users with Docker and kind (these cannot run on machines without a Docker engine) ---
KIND_CLUSTER ?= streamconsumer
IMAGE_TAG ?= dev
OPERATOR_IMAGE ?= streamconsumer/operator:$(IMAGE_TAG)
WORKER_IMAGE ?= streamconsumer/worker:$(IMAGE_TAG)
EXAMPLE_IMAGE ?= streamconsumer/clickstream:$(IMAGE_TAG)
KINESIS_LOCAL_IMAGE ?= streamconsumer/kinesis-local:$(IMAGE_TAG)
KIND_CONTEXT := kind-$(KIND_CLUSTER)

.PHONY: kind-up images kind-load deploy e2e-kind kind-tools quickstart-check quickstart kind-down
kind-tools:
	@for tool in docker kind kubectl helm; do command -v $$tool >/dev/null || { \
	  echo "make: $$tool is not on PATH; the kind targets need docker, kind, kubectl and helm" \
	    "(https://kind.sigs.k8s.io/docs/user/quick-start/). Without Docker: make demo" >&2; \
	  exit 1; }; done
	@docker info >/dev/null 2>&1 || { \
	  echo "make: docker is installed but its engine does not answer (is it running?)" >&2; exit 1; }

kind-up: kind-tools  ## create the kind cluster (unless it exists)
	@kind get clusters 2>/dev/null | grep -qx '$(KIND_CLUSTER)' \
	  || kind create cluster --name $(KIND_CLUSTER)

images:  ## build the operator, worker and example images
	docker build -f operator/Dockerfile -t $(OPERATOR_IMAGE) .
	docker build -f worker-image/Dockerfile -t $(WORKER_IMAGE) .
	docker build -f examples/clickstream/Dockerfile --build-arg WORKER_IMAGE=$(WORKER_IMAGE) -t $(EXAMPLE_IMAGE) .

kind-load: kind-up images  ## load the images into the kind cluster
	kind load docker-image --name $(KIND_CLUSTER) $(OPERATOR_IMAGE) $(WORKER_IMAGE) $(EXAMPLE_IMAGE)

# A kind cluster of one's own is single-tenant: every namespace may name any stream.
deploy: kind-load  ## install the chart into the kind cluster
	helm upgrade --install streamconsumer charts/streamconsumer \
	  --namespace streamconsumer-system --create-namespace --wait \
	  --set image.repository=$(firstword $(subst :, ,$(OPERATOR_IMAGE))) --set image.tag=$(IMAGE_TAG) \
	  --set awsAccess.allowAllNamespaces=true

e2e-kind: deploy  ## apply the example (edit its stream and credentials first) and wait for Ready
	kubectl apply -f examples/clickstream/streamconsumer.yaml
	kubectl wait streamconsumer/clickstream --for=condition=Ready --timeout=180s

# examples/quickstart names the images of the default IMAGE_TAG (dev).
QUICKSTART_IMAGES := streamconsumer/clickstream:dev streamconsumer/kinesis-local:dev
QUICKSTART := kubectl --context $(KIND_CONTEXT) -n quickstart
quickstart-check: kind-tools
	@test "$(EXAMPLE_IMAGE) $(KINESIS_LOCAL_IMAGE)" = "$(QUICKSTART_IMAGES)" || { \
	  echo "make: examples/quickstart runs $(QUICKSTART_IMAGES); leave IMAGE_TAG unset" >&2; exit 1; }

quickstart: quickstart-check kind-up kind-load  ## Docker + kind: the chart, kinesis-local, the clickstream example consuming
	docker build -f examples/quickstart/kinesis-local/Dockerfile -t $(KINESIS_LOCAL_IMAGE) .
	kind load docker-image --name $(KIND_CLUSTER) $(KINESIS_LOCAL_IMAGE)
	helm upgrade --install streamconsumer charts/streamconsumer --kube-context $(KIND_CONTEXT) \
	  --namespace streamconsumer-system --create-namespace --wait --timeout 5m \
	  --set image.repository=$(firstword $(subst :, ,$(OPERATOR_IMAGE))) --set image.tag=$(IMAGE_TAG) \
	  --values examples/quickstart/values.yaml
	kubectl --context $(KIND_CONTEXT) apply -k examples/quickstart
	$(QUICKSTART) rollout status deployment/kinesis-local --timeout=3m
	$(QUICKSTART) rollout status deployment/clickstream-producer --timeout=3m
	$(QUICKSTART) wait streamconsumer/clickstream --for=condition=Ready --timeout=3m
	$(QUICKSTART) get streamconsumers
	@echo "Page views per minute, as the workers log them:"
	@echo "  $(QUICKSTART) logs -f -l app.kubernetes.io/name=streamconsumer-worker --max-log-requests=10"
	@echo "Watch: $(QUICKSTART) get streamconsumers -w    Remove everything: make kind-down"

kind-down: kind-tools  ## delete the kind cluster (the quickstart with it)
	kind delete cluster --name $(KIND_CLUSTER)
