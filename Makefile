# wasmgpu — the two commands are `make demo` and `make test`.
SHELL := /bin/bash
.DEFAULT_GOAL := help

CARGO ?= cargo
WASM_TARGET := wasm32-wasip2
POLICY_DIR := target/$(WASM_TARGET)/policy

.PHONY: help
help: ## List the targets
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-16s %s\n", $$1, $$2}'

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

.PHONY: control-plane kubectl cluster
control-plane: ## Build the local control plane (once; cached outside the clone)
	@$(CONTROL_PLANE_BUILD) >/dev/null

kubectl: control-plane ## Print the path of kubectl, built from the same modules
	@echo $(KUBECTL_BIN)

cluster: control-plane ## Run a local control plane in the foreground (Ctrl-C stops it)
	@$(CONTROL_PLANE_BIN) serve --kubeconfig $(CLUSTER_KUBECONFIG) --hint

