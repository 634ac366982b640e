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
# (targets: control-plane, cluster)

