# wasmgpu — the two commands are `make demo` and `make test`.
SHELL := /bin/bash
.DEFAULT_GOAL := help

CARGO ?= cargo
WASM_TARGET := wasm32-wasip2
POLICY_DIR := target/$(WASM_TARGET)/policy

.PHONY: help
help: ## List the targets
	@grep -hE '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-16s %s\n", $$1, $$2}'

# --- policies and the wasmgpu binary --------------------------------------
# Policies are built for wasm32-wasip2 with the size-optimised `policy` profile.
POLICIES := wasmgpu-binpack wasmgpu-spread wasmgpu-fairshare wasmgpu-hostile-policy
TARGET_DIR := $(or $(CARGO_TARGET_DIR),$(CURDIR)/target)
export WASMGPU_POLICY_DIR := $(TARGET_DIR)/$(WASM_TARGET)/policy
WASMGPU := $(TARGET_DIR)/release/wasmgpu
DEMO_SNAPSHOT := policies/snapshots/demo.json
BENCH_SNAPSHOT := $(TARGET_DIR)/snapshots/large-1000x8-1000.json

.PHONY: toolchain policies policies-all policies-js policies-python policies-go test-sdks deploy-policies build demo demo-offline test lint bench bench-snapshot bench-e2e bench-e2e-dra
toolchain: ## Install the Rust pieces the build needs (wasm32-wasip2 target, rustfmt, clippy)
	@rustup target list --installed | grep -qx $(WASM_TARGET) || rustup target add $(WASM_TARGET)
	@rustup component list --installed | grep -q '^rustfmt' || rustup component add rustfmt
	@rustup component list --installed | grep -q '^clippy' || rustup component add clippy

policies: toolchain ## Build the shipped policies (and the test-only hostile one) as Wasm components
	@echo "==> building policies for $(WASM_TARGET)"
	@$(CARGO) build --quiet --target $(WASM_TARGET) --profile policy $(addprefix -p ,$(POLICIES))
	@ls -l $(WASMGPU_POLICY_DIR)/*.wasm | awk '{printf "    %-60s %7d bytes\n", $$NF, $$5}'

# The SDKs for other languages (policies/js, policies/python, policies/go)
# build binpack ports into the same directory (binpack_js.wasm,
# binpack_py.wasm, binpack_go.wasm). Their
# toolchains and outputs are cached outside the clone, keyed by content, so a
# rebuild with nothing changed is a copy.
policies-all: policies policies-js policies-python policies-go ## Build every policy: Rust, and the JavaScript, Python and Go SDKs' binpack
	@ls -l $(WASMGPU_POLICY_DIR)/binpack_*.wasm | awk '{printf "    %-60s %7d bytes\n", $$NF, $$5}'

policies-js: ## Build the JavaScript binpack component (componentize-js; see policies/js/README.md)
	@policies/js/build.sh >/dev/null

policies-python: ## Build the Python binpack component (componentize-py; see policies/python/README.md)
	@policies/python/build.sh >/dev/null

policies-go: ## Build the Go binpack component (stock Go, wasip1 + adapter; see policies/go/README.md)
	@policies/go/build.sh >/dev/null

# Their `validate` runs the host's own validator: `wasmgpu policy validate`.
test-sdks: build ## Unit tests of the JavaScript, Python and Go SDKs, run natively
	@echo "==> JavaScript SDK (node --test)"
	@cd policies/js && WASMGPU=$(WASMGPU) node --test --test-reporter=dot test/*.test.js
	@echo "==> Python SDK (unittest)"
	@WASMGPU=$(WASMGPU) policies/python/build.sh --test
	@echo "==> Go SDK (go test)"
	@WASMGPU=$(WASMGPU) policies/go/build.sh --test

deploy-policies: policies ## Refresh the shipped policy components in deploy/policies (ConfigMaps)
	@cp $(WASMGPU_POLICY_DIR)/wasmgpu_binpack.wasm deploy/policies/binpack.wasm
	@cp $(WASMGPU_POLICY_DIR)/wasmgpu_spread.wasm deploy/policies/spread.wasm
	@cp $(WASMGPU_POLICY_DIR)/wasmgpu_fairshare.wasm deploy/policies/fairshare.wasm
	@cp deploy/policies/*.wasm deploy/policies/fairshare.config.json deploy/helm/wasmgpu/charts/policies/
	@sha256sum deploy/policies/*.wasm | sed 's/^/    /'

build: toolchain ## Build the wasmgpu binary (release)
	@echo "==> building wasmgpu"
	@$(CARGO) build --quiet --release -p wasmgpu

demo: toolchain control-plane ## The whole product on the local control plane: agents, controller, policies as ConfigMaps, a live swap
	@echo "==> building wasmgpu and the policies (output only on warnings or errors)"
	@$(MAKE) --no-print-directory -s policies build >/dev/null
	@WASMGPU=$(WASMGPU) CONTROL_PLANE=$(CONTROL_PLANE_BIN) KUBECTL=$(KUBECTL_BIN) POLICY_DIR=$(WASMGPU_POLICY_DIR) tests/demo/run.sh

demo-offline: policies build ## Run binpack and spread on the demo snapshot and compare their placements (no cluster)
	@echo "==> checking the shipped policies"
	@$(WASMGPU) policy check $(WASMGPU_POLICY_DIR)/wasmgpu_binpack.wasm
	@echo
	@$(WASMGPU) policy check $(WASMGPU_POLICY_DIR)/wasmgpu_spread.wasm
	@echo
	@echo "==> one round of binpack on $(DEMO_SNAPSHOT), with the host's verdict on each decision"
	@$(WASMGPU) policy run $(WASMGPU_POLICY_DIR)/wasmgpu_binpack.wasm --snapshot $(DEMO_SNAPSHOT)
	@echo
	@echo "==> binpack and spread side by side"
	@$(WASMGPU) policy compare $(WASMGPU_POLICY_DIR)/wasmgpu_binpack.wasm $(WASMGPU_POLICY_DIR)/wasmgpu_spread.wasm --snapshot $(DEMO_SNAPSHOT)

test: policies-all test-sdks control-plane kube-scheduler registry helm promtool chromium ## Run every test (unit, Wasm engine, real control plane, registry, Helm chart, SDKs)
	@echo "==> tests/bench/figures.py (how make bench writes docs/BENCHMARKS.md)"
	@python3 tests/bench/figures.py --self-test
	@echo "==> cargo test (release)"
	@$(CARGO) test --release --workspace

lint: toolchain ## rustfmt and clippy, warnings as errors
	@$(CARGO) fmt --all -- --check
	@$(CARGO) clippy --release --workspace --all-targets -- -D warnings

bench-snapshot: build
	@mkdir -p $(dir $(BENCH_SNAPSHOT))
	@test -f $(BENCH_SNAPSHOT) || $(WASMGPU) policy generate-snapshot --nodes 1000 --pods 1000 -o $(BENCH_SNAPSHOT)

bench: policies bench-snapshot ## Benchmarks at 1,000 nodes × 8 GPUs and 1,000 pods; writes the figures into docs/BENCHMARKS.md
	@# `cargo test --release --bench` runs the bench binary with the release build
	@# the tests already made, instead of a separate `bench` profile build.
	@# Then every policy component built, and the figures written into
	@# docs/BENCHMARKS.md (between its `make bench` markers).
	@set -o pipefail; $(CARGO) test --quiet --release -p wasmgpu --bench round | tee $(TARGET_DIR)/bench-round.txt
	@python3 tests/bench/figures.py --wasmgpu $(WASMGPU) --policy-dir $(WASMGPU_POLICY_DIR) \
		--snapshot $(BENCH_SNAPSHOT) --doc docs/BENCHMARKS.md --bench-output $(TARGET_DIR)/bench-round.txt

# End to end against kube-scheduler, each on a fresh local API server; not part
# of `make test`. Knobs: BENCH_E2E_SCALES (NODESxPODS, comma-separated),
# BENCH_E2E_REPEAT (runs per scale), BENCH_E2E_SCHEDULERS, BENCH_E2E_WRITE_CONCURRENCY
# (wasmgpu's --write-concurrency; 0 = its default), BENCH_E2E_CREATE_CONCURRENCY,
# BENCH_E2E_CREATE_RATE (pods created per second for both schedulers; 0 = as fast
# as the API server takes them),
# BENCH_E2E_WASMGPU_ARGS (more controller arguments), BENCH_E2E_SCENARIO (gpus:
# nvidia.com/gpu and GPUNodes; dra: ResourceSlices and a ResourceClaim per pod),
# BENCH_E2E_DRA_CLAIMS (name: claims made before the pods; template: from a
# ResourceClaimTemplate).
BENCH_E2E_SCALES ?= 250x1000,1000x5000
BENCH_E2E_REPEAT ?= 1
BENCH_E2E_SCHEDULERS ?= kube-scheduler,wasmgpu
BENCH_E2E_WRITE_CONCURRENCY ?= 0
BENCH_E2E_CREATE_CONCURRENCY ?= 64
BENCH_E2E_CREATE_RATE ?= 0
BENCH_E2E_WASMGPU_ARGS ?=
BENCH_E2E_SCENARIO ?= gpus
BENCH_E2E_DRA_CLAIMS ?= name
bench-e2e: policies build control-plane ## wasmgpu vs kube-scheduler end to end: pods/s, latency to binding, peak RSS (docs/BENCHMARKS.md)
	@bench=$$(tests/bench/build.sh) && uptime && $$bench run --control-plane $(CONTROL_PLANE_BIN) \
		--wasmgpu $(WASMGPU) --policy $(WASMGPU_POLICY_DIR)/wasmgpu_binpack.wasm --crds deploy/crds \
		--work .work/bench-e2e --scales $(BENCH_E2E_SCALES) --repeat $(BENCH_E2E_REPEAT) \
		--schedulers $(BENCH_E2E_SCHEDULERS) --write-concurrency $(BENCH_E2E_WRITE_CONCURRENCY) \
		--create-concurrency $(BENCH_E2E_CREATE_CONCURRENCY) --create-rate $(BENCH_E2E_CREATE_RATE) --wasmgpu-args "$(BENCH_E2E_WASMGPU_ARGS)" \
		--scenario $(BENCH_E2E_SCENARIO) --dra-claims $(BENCH_E2E_DRA_CLAIMS)

# The DRA scenario at its scale: 500 nodes x 8 GPUs as ResourceSlices, 2,000
# pods each asking through a ResourceClaim (the variables above still apply;
# those of the command line win over these).
bench-e2e-dra: BENCH_E2E_SCENARIO = dra
bench-e2e-dra: BENCH_E2E_SCALES = 500x2000
bench-e2e-dra: bench-e2e ## wasmgpu vs kube-scheduler end to end with DRA ResourceClaims, 500 nodes x 2,000 pods (docs/BENCHMARKS.md)

# --- control plane (tests/control-plane) -----------------------------------
# kube-apiserver + embedded etcd (+ kubectl), built from the Kubernetes Go
# modules once into a cache outside the clone, reused while the sources under
# tests/control-plane do not change. See docs/CONTROL-PLANE.md.
CONTROL_PLANE_BUILD := tests/control-plane/build.sh
# Where the binary is, or will be once built, for these sources (no build here).
CONTROL_PLANE_BIN := $(shell $(CONTROL_PLANE_BUILD) --path)
KUBECTL_BIN := $(dir $(CONTROL_PLANE_BIN))kubectl
CLUSTER_KUBECONFIG := $(CURDIR)/.work/kubeconfig
# The test harness (tests/harness) finds the binaries through these.
export WASMGPU_CONTROL_PLANE := $(CONTROL_PLANE_BIN)
export WASMGPU_KUBECTL := $(KUBECTL_BIN)

# kube-scheduler v1.37, for the DRA test that runs it beside the controller
# (host/tests/controller/dra_churn.rs): the end-to-end benchmark's binary
# (tests/bench, the same Kubernetes modules), built once into a cache outside
# the clone by the hash of tests/bench; its `kube-scheduler` command runs it.
BENCH_BUILD := tests/bench/build.sh
export WASMGPU_BENCH_E2E := $(shell $(BENCH_BUILD) --path)

.PHONY: kube-scheduler
kube-scheduler: ## Build kube-scheduler (inside the end-to-end benchmark's binary; once, cached outside the clone) and print its path
	@$(BENCH_BUILD) >/dev/null
	@echo $(WASMGPU_BENCH_E2E)

# The OCI registry the policy-component tests push to and pull from: the CNCF
# distribution registry, built from its Go module like the control plane,
# cached outside the clone by the hash of tests/registry; the ORAS CLI (a tool
# of that module) is built next to it.
REGISTRY_BUILD := tests/registry/build.sh
export WASMGPU_REGISTRY := $(shell $(REGISTRY_BUILD) --path)
export WASMGPU_ORAS := $(shell $(REGISTRY_BUILD) --oras-path)

.PHONY: registry
registry: ## Build the test OCI registry and the ORAS CLI (once; cached outside the clone)
	@$(REGISTRY_BUILD) >/dev/null

# Helm, for the chart in deploy/helm/wasmgpu (host/tests/helm.rs, docs/HELM.md):
# built from its Go module (tests/helm/go.mod) once into a cache outside the clone.
HELM_BUILD := tests/helm/build.sh
export WASMGPU_HELM := $(shell $(HELM_BUILD) --path)

.PHONY: helm
helm: ## Build Helm for the chart's tests (once; cached outside the clone) and print its path
	@$(HELM_BUILD) >/dev/null
	@echo $(WASMGPU_HELM)

# promtool's `check rules` (Prometheus's own rule parser and PromQL parser),
# for deploy/monitoring/rules.yaml (host/tests/controller/monitoring.rs,
# docs/MONITORING.md): built from its Go module (tests/promtool) once into a
# cache outside the clone.
PROMTOOL_BUILD := tests/promtool/build.sh
export WASMGPU_PROMTOOL := $(shell $(PROMTOOL_BUILD) --path)

.PHONY: promtool
promtool: ## Build promtool's rule checker for the alert rules (once; cached outside the clone) and print its path
	@$(PROMTOOL_BUILD) >/dev/null
	@echo $(WASMGPU_PROMTOOL)

# Debian's Chromium, for the picture tests (host/tests/render.rs renders
# `policy run --render`'s SVG headless to a PNG): installed with apt-get when absent.
CHROMIUM_INSTALL := tests/chromium/install.sh
export WASMGPU_CHROMIUM := $(shell $(CHROMIUM_INSTALL) --path)

.PHONY: chromium
chromium: ## Install Debian's Chromium for the picture tests (when absent) and print its path
	@$(CHROMIUM_INSTALL)

.PHONY: control-plane kubectl cluster
control-plane: ## Build the local control plane (once; cached outside the clone)
	@$(CONTROL_PLANE_BUILD) >/dev/null

kubectl: control-plane ## Print the path of kubectl, built from the same modules
	@echo $(KUBECTL_BIN)

cluster: control-plane ## Run a local control plane in the foreground (Ctrl-C stops it)
	@$(CONTROL_PLANE_BIN) serve --kubeconfig $(CLUSTER_KUBECONFIG) --hint

