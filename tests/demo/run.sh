#!/usr/bin/env bash
# `make demo`: wasmgpu end to end on the local control plane.
#
# Starts kube-apiserver + etcd, installs the CRDs, namespace and RBAC from
# deploy/, publishes the shipped policies as ConfigMaps, starts two node
# agents on simulated inventories (8x H100 with NVLink, 4x A100) and the
# controller as local processes under the deployed ServiceAccounts, applies
# the samples, shows where each pod landed; swaps the default policy
# (binpack -> spread) by updating its ConfigMap, publishes fairshare as its
# shadow, applies more pods, shows their placements and what the shadow
# would have done; plays the kubelet for one node to show what each
# container receives from the device plugin; then stops everything.
#
# Needs: WASMGPU (the binary), CONTROL_PLANE, KUBECTL, POLICY_DIR (set by make).
set -euo pipefail

: "${WASMGPU:?set by make demo}" "${CONTROL_PLANE:?}" "${KUBECTL:?}" "${POLICY_DIR:?}"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
WORK=$ROOT/.work/demo
NS=wasmgpu-system
SAMPLES=wasmgpu-samples
TIMEOUT=${DEMO_TIMEOUT:-120}

step() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }
note() { printf '    %s\n' "$*"; }

rm -rf "$WORK"
mkdir -p "$WORK"
export KUBECONFIG=$WORK/admin.kubeconfig
pids=()
cleanup() {
    local code=$?
    if ((${#pids[@]})); then
        step "stopping the controller, the agents and the control plane"
        # Newest first: the control plane goes last.
        for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
            kill -TERM "${pids[i]}" 2>/dev/null || true
            wait "${pids[i]}" 2>/dev/null || true
        done
    fi
    if ((code != 0)); then
        echo "demo failed (exit $code); logs are in $WORK" >&2
    fi
    exit "$code"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

kubectl() { "$KUBECTL" "$@"; }

# Runs "$@" until it succeeds, for at most TIMEOUT seconds. The condition is
# a command (often a function below), run afresh on every try: never pass
# "$(...)" here, it would be expanded once, before the first try.
until_ok() {
    local what=$1 deadline=$((SECONDS + TIMEOUT))
    shift
    until "$@" >/dev/null 2>&1; do
        if ((SECONDS > deadline)); then
            echo "timed out after ${TIMEOUT}s waiting for: $what" >&2
            return 1
        fi
        sleep 0.2
    done
}

# A kubeconfig for ServiceAccount $1 in $NS, through a token from the API.
identity() {
    local account=$1 file=$WORK/$1.kubeconfig server ca token
    server=$(kubectl config view --raw -o jsonpath='{.clusters[0].cluster.server}')
    ca=$(kubectl config view --raw -o jsonpath='{.clusters[0].cluster.certificate-authority-data}')
    token=$(kubectl create token "$account" -n "$NS" --duration=2h)
    cat >"$file" <<EOF
apiVersion: v1
kind: Config
clusters: [{name: demo, cluster: {server: "$server", certificate-authority-data: "$ca"}}]
users: [{name: $account, user: {token: "$token"}}]
contexts: [{name: $account, context: {cluster: demo, user: $account}}]
current-context: $account
EOF
    echo "$file"
}

# A Node as a kubelet would register it: Ready, GPU label, no not-ready taint.
node() {
    local name=$1
    kubectl apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Node
metadata:
  name: $name
  labels: {kubernetes.io/hostname: $name, nvidia.com/gpu.present: "true"}
EOF
    kubectl patch node "$name" --subresource=status --type=merge -p \
        '{"status":{"conditions":[{"type":"Ready","status":"True","reason":"KubeletReady","message":"demo node"}]}}' >/dev/null
    kubectl patch node "$name" --type=merge -p '{"spec":{"taints":null}}' >/dev/null
}

# How many sample pods are bound (have spec.nodeName).
bound_count() {
    kubectl get pods -n "$SAMPLES" -o jsonpath='{range .items[*]}{.spec.nodeName}{"\n"}{end}' | grep -c . || true
}

# The conditions the demo waits for, each evaluated anew on every try.
at_least_bound() { (($(bound_count) >= $1)); }
gpunodes_published() {
    [[ "$(kubectl get gpunodes -o jsonpath='{.items[*].status.gpusTotal}')" == "4 8" ]]
}
shadow_compared() { # a round compared since the shadow loaded
    kubectl get configmap fairshare -n "$NS" -o jsonpath='{.metadata.annotations.wasmgpu\.io/shadow-status}' \
        | grep -q '"roundsCompared":[1-9]'
}
policy_loaded() { # NAME [DIGEST-PREFIX]
    "$WASMGPU" policy list --namespace "$NS" | grep "^$1 " | grep -q "sha256:${2:-}"
}

dra_bound() {
    [[ "$(kubectl get pod dra-trainer -n "$SAMPLES" -o jsonpath='{.spec.nodeName}')" == gpu-dra ]]
}

wait_bound() {
    local want=$1
    until_ok "$want pods bound" at_least_bound "$want"
}

step "starting the local control plane (kube-apiserver + etcd)"
"$CONTROL_PLANE" serve --kubeconfig "$KUBECONFIG" >"$WORK/control-plane.log" 2>&1 &
pids+=($!)
until_ok "the API server to be ready" kubectl get --raw /readyz
note "ready; KUBECONFIG=$KUBECONFIG"

step "installing wasmgpu from deploy/: CRDs, namespace, least-privilege RBAC"
{
    kubectl apply --server-side -k "$ROOT/deploy/crds"
    kubectl apply --server-side -f "$ROOT/deploy/namespace.yaml"
    kubectl apply --server-side -k "$ROOT/deploy/rbac"
} >"$WORK/install.log" 2>&1
note "$(grep -c " serverside-applied" "$WORK/install.log") objects applied (list: $WORK/install.log)"
kubectl wait --for=condition=Established --timeout=60s crd/gpuresources.wasmgpu.io crd/gpunodes.wasmgpu.io >/dev/null
note "(the controller Deployment and agent DaemonSet need real nodes: here they run as local processes, as the same ServiceAccounts)"
CONTROLLER_KUBECONFIG=$(identity wasmgpu-controller)
AGENT_KUBECONFIG=$(identity wasmgpu-agent)

step "publishing the policies as ConfigMaps in $NS (default = binpack, spread)"
"$WASMGPU" policy publish "$POLICY_DIR/wasmgpu_binpack.wasm" --name default --namespace "$NS" | sed 's/^/    /'
"$WASMGPU" policy publish "$POLICY_DIR/wasmgpu_spread.wasm" --name spread --namespace "$NS" | sed 's/^/    /'

step "registering two GPU nodes and starting their agents on simulated inventories"
node gpu-h100
node gpu-a100
# Each agent serves the kubelet device plugin in its own directory; the
# demo plays the kubelet for gpu-h100 at the end (there is no kubelet here).
mkdir -p "$WORK/kubelet-gpu-h100" "$WORK/kubelet-gpu-a100"
KUBECONFIG=$AGENT_KUBECONFIG "$WASMGPU" agent --node-name gpu-h100 \
    --inventory "$ROOT/deploy/inventory/h100-nvlink-8.yaml" \
    --device-plugin-dir "$WORK/kubelet-gpu-h100" >"$WORK/agent-h100.log" 2>&1 &
pids+=($!)
KUBECONFIG=$AGENT_KUBECONFIG "$WASMGPU" agent --node-name gpu-a100 \
    --inventory "$ROOT/deploy/inventory/a100-4.yaml" \
    --device-plugin-dir "$WORK/kubelet-gpu-a100" >"$WORK/agent-a100.log" 2>&1 &
pids+=($!)
until_ok "both GPUNodes published" gpunodes_published
kubectl get gpunodes | sed 's/^/    /'

step "starting the controller (default policy: the ConfigMap 'default')"
CONTROLLER_PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
KUBECONFIG=$CONTROLLER_KUBECONFIG "$WASMGPU" controller \
    --policy-namespace "$NS" --default-policy default \
    --http-address "127.0.0.1:$CONTROLLER_PORT" >"$WORK/controller.log" 2>&1 &
pids+=($!)
until_ok "the controller to be ready" curl -sf "http://127.0.0.1:$CONTROLLER_PORT/readyz"
until_ok "policy spread to be loaded" policy_loaded spread
until_ok "policy default to be loaded" policy_loaded default
"$WASMGPU" policy list --namespace "$NS" | sed 's/^/    /'

step "applying the samples (deploy/samples) and a second notebook: a 2x H100 trainer, two shared notebooks, one GPU placed by spread"
kubectl apply -k "$ROOT/deploy/samples" | sed 's/^/    /'
kubectl apply -n "$SAMPLES" -f "$ROOT/tests/demo/first-pods.yaml" | sed 's/^/    /'
wait_bound 4
kubectl get gpur -n "$SAMPLES" | sed 's/^/    /'
echo
"$WASMGPU" allocations --namespace "$SAMPLES" | sed 's/^/    /'

step "swapping the default policy: binpack -> spread, by updating its ConfigMap"
"$WASMGPU" policy publish "$POLICY_DIR/wasmgpu_spread.wasm" --name default --namespace "$NS" | sed 's/^/    /'
SPREAD_DIGEST=$(sha256sum "$POLICY_DIR/wasmgpu_spread.wasm" | cut -c1-12)
BINPACK_DIGEST=$(sha256sum "$POLICY_DIR/wasmgpu_binpack.wasm" | cut -c1-12)
until_ok "the controller to load the new version" policy_loaded default "$SPREAD_DIGEST"
"$WASMGPU" policy list --namespace "$NS" | sed 's/^/    /'

step "publishing fairshare as a shadow of default: called beside it every round, compared, never applied"
"$WASMGPU" policy publish "$POLICY_DIR/wasmgpu_fairshare.wasm" --name fairshare --namespace "$NS" \
    --shadow-of default | sed 's/^/    /'
until_ok "policy fairshare to be loaded" policy_loaded fairshare

step "applying more pods: two more notebooks and a trainer, now placed by spread"
kubectl apply -n "$SAMPLES" -f "$ROOT/tests/demo/more-pods.yaml" | sed 's/^/    /'
wait_bound 7
"$WASMGPU" allocations --namespace "$SAMPLES" | sed 's/^/    /'
echo
note "Before the swap, binpack (default, sha256:${BINPACK_DIGEST}) stacked both shared notebooks"
note "on one GPU; after it, spread (default, sha256:${SPREAD_DIGEST}) gave each new notebook"
note "the emptiest GPU. Every row names the policy version that decided it."
note "Waiting pods would show why in NOTE."
echo
note "the controller's metrics (non-zero):"
curl -s "http://127.0.0.1:$CONTROLLER_PORT/metrics" \
    | grep -E '^wasmgpu_(pods_bound_total|decisions_total|gpus|policy_loads_total)' | grep -v ' 0$' | sed 's/^/    /'

step "a pod that asks through DRA: a ResourceClaim for two H100s on devices NVIDIA's driver publishes"
node gpu-dra
kubectl apply -n "$SAMPLES" -f "$ROOT/tests/demo/dra.yaml" | sed 's/^/    /'
until_ok "the DRA pod to be bound on gpu-dra" dra_bound
note "claim two-h100 allocated, as kube-scheduler writes it: devices" \
    "$(kubectl get resourceclaim two-h100 -n "$SAMPLES" -o jsonpath='{.status.allocation.devices.results[*].device}')," \
    "reserved for $(kubectl get resourceclaim two-h100 -n "$SAMPLES" -o jsonpath='{.status.reservedFor[*].name}')"
"$WASMGPU" allocations --namespace "$SAMPLES" | grep -E 'NAMESPACE|dra-trainer' | sed 's/^/    /'

step "what the shadow would have done: fairshare beside spread on the same rounds"
until_ok "a round compared by the shadow" shadow_compared
"$WASMGPU" policy shadow fairshare --namespace "$NS" | sed 's/^/    /'

step "a picture of the cluster now: a snapshot of it, one round of spread, drawn (--render)"
"$WASMGPU" policy snapshot --policy default --namespace "$NS" --default-policy default \
    -o "$WORK/cluster-snapshot.json" 2>&1 | sed 's/^/    /'
"$WASMGPU" policy run "$POLICY_DIR/wasmgpu_spread.wasm" --snapshot "$WORK/cluster-snapshot.json" \
    --render "$WORK/cluster.svg" 2>&1 >/dev/null | sed "s/^/    /"
test -s "$WORK/cluster.svg"
note "Every GPU of both nodes, coloured by the namespace holding it; the shared notebooks'"
note "GPUs filled as far as their memory is promised; NVLink groups as bars. Open it in a browser:"
note "$WORK/cluster.svg"

step "the hand-off on gpu-h100: playing its kubelet against the agent's device plugin"
"$WASMGPU" play-kubelet --node gpu-h100 --device-plugin-dir "$WORK/kubelet-gpu-h100" | sed 's/^/    /'
echo
note "The kubelet asked the plugin which devices to give (GetPreferredAllocation: the"
note "policy's GPUs, from the pod's wasmgpu.io/allocation), then Allocate: each container"
note "gets exactly those GPUs as CDI devices (nvidia.com/gpu=<uuid>), never"
note "NVIDIA_VISIBLE_DEVICES=all. Shared pods get a replica <uuid>::<k> of their one GPU."
