"""Snapshot builders for unit tests of policies (run natively).

`snapshot(...)` fills in the round's tables the way the host does: the
namespaces of the pending and running pods (sorted, each once; requests and
running pods name them by index) and one label value (or None) per entry of
`label_keys` on every node. After adding pods or label keys by hand, call
`refresh_tables` again; `request`, `running` and `with_labels` keep the names
they need so that it can.

Unlike the Rust builders (crates/contract/src/testing.rs), which intern
names in process-wide tables, these take table indices where the contract
has them (a GPU's `model`, a MIG instance's `profile`) and names elsewhere;
`large` builds the same snapshot as the Rust `large`, for benchmarks and
comparisons.

`validate(snap, decisions)` holds a round's decisions to the host's own
rules, the controller's validator, through `wasmgpu policy validate`;
`conflicts` is a cheap local check of the simplest of them.
"""

import json
import os
import pathlib
import shutil
import subprocess
import tempfile
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from wit_world.imports import types as t

from . import pod_of

__all__ = [
    "assigned",
    "candidate_set",
    "claim",
    "conflicts",
    "decision_for",
    "decision_of",
    "decisions_file",
    "dra_request",
    "gang",
    "gpu",
    "gpu_uuid",
    "large",
    "namespace_of",
    "node",
    "node_set",
    "refresh_tables",
    "request",
    "restrict",
    "running",
    "running_on_each_gpu",
    "shape",
    "snapshot",
    "snapshot_file",
    "tenant",
    "validate",
    "wasmgpu_cli",
    "with_full_nvlink",
    "with_labels",
    "with_mig",
    "with_nvlink",
]

# The fields of `request(**extra)` that belong to the request's GPU shape.
_SHAPE_FIELDS = ("count", "model", "mig_profile", "memory_mib", "sharing")

# The builders keep the namespace name of the requests and running pods they
# make on the object (not a contract field: the contract carries an index,
# which `refresh_tables` sets).
_NAMESPACE = "_testing_namespace"


def _remember_namespace(obj, pod: str) -> None:
    setattr(obj, _NAMESPACE, pod.split("/")[0] if "/" in pod else "default")


def _namespace(obj) -> Optional[str]:
    return getattr(obj, _NAMESPACE, None)


def gpu(index: int, model: int, memory_mib: int, **extra) -> t.Gpu:
    """A healthy, free whole GPU of model table index `model`, published by
    the wasmgpu agent, without NVLink; `extra` overrides any field."""
    fields = dict(
        index=index,
        model=model,
        memory_mib=memory_mib,
        allocated_mib=0,
        held=False,
        shared_owners=0,
        numa_node=None,
        nvlink=0,
        healthy=True,
        mig=None,
        published_by=t.Publisher.AGENT,
    )
    fields.update(extra)
    return t.Gpu(**fields)


def node(name: str, count: int, model: int, memory_mib: int) -> t.Node:
    """`count` identical whole GPUs (indices 0…), no labels."""
    return t.Node(name=name, labels=[], gpus=[gpu(i, model, memory_mib) for i in range(count)])


def with_full_nvlink(n: t.Node) -> t.Node:
    """Links every pair of whole GPUs on the node with NVLink (as on an HGX board)."""
    indices = [g.index for g in n.gpus if g.mig is None]
    for g in n.gpus:
        if g.mig is None:
            g.nvlink = _bits(i for i in indices if i != g.index)
    return n


def with_nvlink(n: t.Node, pairs: Iterable[Tuple[int, int]]) -> t.Node:
    """Links the GPUs of each pair `(a, b)` (positions) with NVLink, on both
    ends: `with_nvlink(n, [(0, 1), (2, 3)])` makes two bridged pairs. The bits
    name the peer's `index`, as the contract does."""
    for a, b in pairs:
        if a == b or not (0 <= a < len(n.gpus) and 0 <= b < len(n.gpus)):
            raise ValueError(f"with_nvlink: ({a}, {b}) is not a pair of distinct GPUs of node {n.name}")
        for x, y in ((a, b), (b, a)):
            n.gpus[x].nvlink |= _bits([n.gpus[y].index])
    return n


def _bits(indices: Iterable[int]) -> int:
    out = 0
    for i in indices:
        if 0 <= i < 64:
            out |= 1 << i
    return out


def with_mig(n: t.Node, parent: int, instances: Sequence[Tuple[int, int]]) -> t.Node:
    """Adds MIG instances `(profile, memory_mib)` (profile: an index into
    `snapshot.mig_profiles`) of the GPU at position `parent`, right after the
    parent's other instances, with its index, model and publisher. Positions
    of later GPUs shift (and MIG parents past it are moved along); build MIG
    instances last-first or re-read positions."""
    base = n.gpus[parent]
    at = parent + 1
    while at < len(n.gpus) and n.gpus[at].mig is not None:
        at += 1
    for g in n.gpus[at:]:
        if g.mig is not None and g.mig.parent >= at:
            g.mig = t.MigInstance(parent=g.mig.parent + len(instances), profile=g.mig.profile)
    for k, (profile, memory_mib) in enumerate(instances):
        instance = gpu(
            base.index,
            base.model,
            memory_mib,
            healthy=base.healthy,
            numa_node=base.numa_node,
            published_by=base.published_by,
            mig=t.MigInstance(parent=parent, profile=profile),
        )
        n.gpus.insert(at + k, instance)
    return n


def node_set(length: int, members: Iterable[int]) -> List[int]:
    """A node bit set as the contract carries it (bit i of word i/64 is node
    i), with words enough for `length` nodes."""
    words = [0] * ((length + 63) // 64)
    for m in members:
        while m // 64 >= len(words):
            words.append(0)
        words[m // 64] |= 1 << (m % 64)
    return words


def request(pod: str, count: int, sharing: t.Sharing, memory_mib: int, **extra) -> t.Request:
    """A GPUResource request eligible on every node (set 0 of `snapshot`), of
    the namespace in `pod` (`namespace/name`), priority 0, created at 0.
    `extra` sets any field of the request or of its shape (`model`,
    `mig_profile`, …)."""
    shape = dict(count=count, model=None, mig_profile=None, memory_mib=memory_mib, sharing=sharing)
    fields = dict(
        pod=pod,
        namespace=0,
        tenant=None,
        priority=0,
        preemption=t.PreemptionPolicy.PREEMPT_LOWER_PRIORITY,
        created_ms=0,
        eligible_set=0,
        gang=None,
    )
    for key, value in extra.items():
        (shape if key in _SHAPE_FIELDS else fields)[key] = value
    fields.setdefault("ask", t.Ask_Gpus(t.GpuShape(**shape)))
    r = t.Request(**fields)
    _remember_namespace(r, pod)
    return r


def dra_request(pod: str, claims: Optional[List[t.Claim]] = None, **extra) -> t.Request:
    """A DRA request (ask `claims`): by default one claim `namespace/pod-gpu`
    asking for one device among candidate set 0."""
    if claims is None:
        claims = [
            t.Claim(
                name=f"{pod}-gpu",
                requests=[
                    t.ClaimRequest(
                        name="gpu",
                        alternatives=[t.Alternative(subrequest=None, count=1, candidates=0)],
                    )
                ],
                constraints=[],
            )
        ]
    return request(pod, 0, t.Sharing.EXCLUSIVE, 0, ask=t.Ask_Claims(list(claims)), **extra)


def claim(name: str, requests: Sequence[Tuple[str, int, int]]) -> t.Claim:
    """A claim `name` without constraints, with one request per `(name,
    count, candidate set)`, each with one alternative (`exactly`), as the
    Rust builder."""
    return t.Claim(
        name=name,
        requests=[
            t.ClaimRequest(name=r, alternatives=[t.Alternative(subrequest=None, count=count, candidates=candidates)])
            for r, count, candidates in requests
        ],
        constraints=[],
    )


def candidate_set(snap: t.Snapshot, gpus: Iterable[Tuple[int, int]]) -> int:
    """Adds a candidate set of the GPUs `(node, gpu)` (positions) to the
    snapshot, sorted and each once as the host sends them; its index, for
    `Alternative.candidates`."""
    refs = sorted(set((int(n), int(g)) for n, g in gpus))
    snap.candidate_sets.append([t.GpuRef(node=n, gpu=g) for n, g in refs])
    return len(snap.candidate_sets) - 1


def with_labels(target, *args):
    """Sets node labels, in either of two forms:

    * `with_labels(node, {key: value})` (or a list of `(key, value)` pairs),
      as the Rust builder: returns the node; `snapshot` (or
      `refresh_tables`) adds each key to `snap.label_keys` and gives every
      node a value (or None) per key.
    * `with_labels(snap, node_position, {key: value})`: sets the labels on the
      node at `node_position` of a snapshot already built; returns `snap`.

    Each key joins `snap.label_keys` (as if the policy had asked for it)."""
    if isinstance(target, t.Snapshot):
        snap, node_position, labels = target, args[0], dict(args[1])
        n = snap.nodes[node_position]
        _labels_of(n).update(labels)
        _apply_labels(snap)
        return snap
    (labels,) = args
    _labels_of(target).update(dict(labels))
    return target


_LABELS = "_testing_labels"


def _labels_of(n: t.Node) -> Dict[str, str]:
    """The labels the builders set on node `n` (by key)."""
    labels = getattr(n, _LABELS, None)
    if labels is None:
        labels = {}
        setattr(n, _LABELS, labels)
    return labels


def _pad_labels(snap: t.Snapshot) -> None:
    for n in snap.nodes:
        del n.labels[len(snap.label_keys):]
        n.labels.extend([None] * (len(snap.label_keys) - len(n.labels)))


def _apply_labels(snap: t.Snapshot) -> None:
    for n in snap.nodes:
        for key in getattr(n, _LABELS, {}):
            if key not in snap.label_keys:
                snap.label_keys.append(key)
    _pad_labels(snap)
    for n in snap.nodes:
        for key, value in getattr(n, _LABELS, {}).items():
            n.labels[snap.label_keys.index(key)] = value


def refresh_tables(snap: t.Snapshot) -> t.Snapshot:
    """Rebuilds `snap.namespaces` from the pending and running pods the
    builders made (sorted, each once) and points their `namespace` at it;
    adds the label keys `with_labels` set to `snap.label_keys` and gives
    every node one label value (or None) per label key."""
    pods = list(snap.pending) + list(snap.running)
    names = [_namespace(p) for p in pods]
    known = set(snap.namespaces) | {n for n in names if n is not None}
    snap.namespaces = sorted(known, key=lambda n: n.encode())
    for p, name in zip(pods, names):
        if name is not None:
            p.namespace = snap.namespaces.index(name)
    _apply_labels(snap)
    return snap


def snapshot(models: List[str], nodes: List[t.Node], pending: List[t.Request], **extra) -> t.Snapshot:
    """A snapshot whose eligible set 0 is every node; `extra` sets any field.
    Its tables are filled in (`refresh_tables`)."""
    fields = dict(
        round=1,
        models=models,
        mig_profiles=[],
        namespaces=[],
        label_keys=[],
        nodes=nodes,
        pending=pending,
        running=[],
        eligible_sets=[node_set(len(nodes), range(len(nodes)))],
        candidate_sets=[],
        gangs=[],
        tenants=[],
        config="",
    )
    fields.update(extra)
    return refresh_tables(t.Snapshot(**fields))


def gang(snap: t.Snapshot, name: str, min_member: int, members: List[int], bound: int = 0) -> int:
    """Adds gang `name` of the pending requests at positions `members`, which
    must hold GPUs `min_member` at a time, `bound` of them bound already; sets
    the members' `gang`. Returns its index in `snap.gangs`."""
    index = len(snap.gangs)
    snap.gangs.append(t.Gang(name=name, min_member=min_member, bound=bound, pending=list(members), running=[]))
    for m in members:
        snap.pending[m].gang = index
    return index


def restrict(snap: t.Snapshot, pod: int, nodes: Iterable[int]) -> int:
    """Restricts pending request `pod` (a position) to `nodes` (positions),
    through a new eligible set; returns the set's index."""
    snap.eligible_sets.append(node_set(len(snap.nodes), nodes))
    snap.pending[pod].eligible_set = len(snap.eligible_sets) - 1
    return snap.pending[pod].eligible_set


def running(
    snap: t.Snapshot,
    pod: str,
    priority: int,
    node_position: int,
    gpus: List[int],
    started_ms: int = 0,
    shared_mib: int = 0,
    **extra,
) -> int:
    """Adds a running pod `pod` (`namespace/name`) on the node at
    `node_position`, holding the GPUs at positions `gpus`: exclusively (they
    are marked held) or, with `shared_mib`, a share of that much on each.
    Evictable, not protected; `extra` sets any other field. Returns its
    position in `snap.running`."""
    for g in gpus:
        unit = snap.nodes[node_position].gpus[g]
        if shared_mib:
            unit.shared_owners += 1
            unit.allocated_mib = min(unit.memory_mib, unit.allocated_mib + shared_mib)
        else:
            unit.held = True
            unit.allocated_mib = unit.memory_mib
    fields = dict(
        pod=pod,
        namespace=0,
        tenant=None,
        priority=priority,
        node=node_position,
        gpus=list(gpus),
        shared_mib=shared_mib,
        started_ms=started_ms,
        gang=None,
        evictable=True,
        protected_ms=0,
    )
    fields.update(extra)
    r = t.Running(**fields)
    _remember_namespace(r, pod)
    snap.running.append(r)
    refresh_tables(snap)
    return len(snap.running) - 1


def assigned(decisions: List[t.Decision]):
    """Assignments as (pod, node, gpus) in decision order."""
    return [(d.value.pod, d.value.node, list(d.value.gpus)) for d in decisions if isinstance(d, t.Decision_Assign)]


def decision_of(decisions: List[t.Decision], pod: int) -> Optional[t.Decision]:
    """The decision about pending position `pod`; None when there is none."""
    return next((d for d in decisions if pod_of(d) == pod), None)


def running_on_each_gpu(snap: t.Snapshot, node_position: int, prefix: str, priority: int) -> None:
    """Fills node `node_position` with running pods `{prefix}{g}` of
    `priority`, one per GPU `g` (exclusive), each started at `g`
    milliseconds: a full node a preemption may free."""
    for g in range(len(snap.nodes[node_position].gpus)):
        running(snap, f"{prefix}{g}", priority, node_position, [g], started_ms=g)


def tenant(snap: t.Snapshot, name: str, limit: Optional[int] = None, quota: int = 0, weight: int = 1,
           holding: int = 0, waiting: int = 0, members: Iterable[int] = ()) -> int:
    """Adds tenant `name` (a GPUTenant) to `snap.tenants` and makes the
    pending requests at positions `members` its own; returns its index."""
    snap.tenants.append(t.Tenant(name=name, weight=weight, quota=quota, limit=limit, holding=holding, waiting=waiting))
    index = len(snap.tenants) - 1
    for m in members:
        snap.pending[m].tenant = index
    return index


def shape(r: t.Request) -> t.GpuShape:
    """The GPU shape of a GPUResource request (to edit it in place); raises
    ValueError for a DRA request."""
    if not isinstance(r.ask, t.Ask_Gpus):
        raise ValueError(f"{r.pod} asks through DRA claims")
    return r.ask.value


def namespace_of(snap: t.Snapshot, r) -> str:
    """The namespace of a pending request (or running pod), by name; "?" when
    out of range."""
    return snap.namespaces[r.namespace] if 0 <= r.namespace < len(snap.namespaces) else "?"


def decision_for(snap: t.Snapshot, decisions: List[t.Decision], pod: str) -> Optional[t.Decision]:
    """The decision about the pending pod named `pod` (`namespace/name`), if any."""
    position = next((i for i, r in enumerate(snap.pending) if r.pod == pod), None)
    return None if position is None else decision_of(decisions, position)


LARGE_MODELS = ["NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB"]


def large(nodes: int, pods: int) -> t.Snapshot:
    """A large, deterministic snapshot for benchmarks, the one the Rust
    builders' `large(nodes, pods)` makes: `nodes` nodes of 8 GPUs
    (alternating 8×H100 80GB with full NVLink and 8×A100 40GB in NVLink
    pairs), about a quarter of the GPUs already in use, and `pods` pending
    requests of 1, 2, 4 or 8 GPUs, mostly exclusive, a fifth shared, some
    pinned to a model, a tenth restricted to one of three zones (eligible
    sets 1 to 3). Models are `LARGE_MODELS`."""
    mask = (1 << 64) - 1
    state = [0x9E3779B97F4A7C15]

    def rand() -> int:
        # xorshift64*, as the Rust builder.
        x = state[0]
        x ^= x >> 12
        x ^= (x << 25) & mask
        x ^= x >> 27
        state[0] = x
        return (x * 0x2545F4914F6CDD1D) & mask

    built = []
    for n in range(nodes):
        name = f"gpu-node-{n:04}"
        if n % 2 == 0:
            nd = with_full_nvlink(node(name, 8, 0, 81559))
        else:
            nd = node(name, 8, 1, 40960)
            for g in nd.gpus:
                g.nvlink = 1 << (g.index ^ 1)
        with_labels(nd, [("kubernetes.io/hostname", name), ("topology.kubernetes.io/zone", f"zone-{n % 3}")])
        for i, g in enumerate(nd.gpus):
            g.numa_node = i // 4
            roll = rand() % 8
            if roll == 0:
                g.held = True
                g.allocated_mib = g.memory_mib
            elif roll == 1:
                g.shared_owners = 1
                g.allocated_mib = 8192
        built.append(nd)
    pending = []
    for p in range(pods):
        roll = rand()
        shared = roll % 5 == 0
        count = 1 if shared else [1, 1, 2, 4, 8][(roll >> 8) % 5]
        memory = 4096 << ((roll >> 16) % 3) if shared else [0, 40960, 65536][(roll >> 16) % 3]
        model = {0: "NVIDIA H100*", 1: "*A100*"}.get((roll >> 24) % 6)
        pending.append(
            request(
                f"team-{p % 7}/job-{p:05}",
                count,
                t.Sharing.SHARED if shared else t.Sharing.EXCLUSIVE,
                memory,
                model=model,
                priority=(roll >> 32) % 3,
                created_ms=1_700_000_000_000 + p * 10,
            )
        )
    snap = snapshot(list(LARGE_MODELS), built, pending)
    for z in range(3):
        snap.eligible_sets.append(node_set(nodes, [n for n in range(nodes) if n % 3 == z]))
    for p, r in enumerate(snap.pending):
        if p % 10 == 0:
            r.eligible_set = 1 + (p // 10) % 3
    return snap


def conflicts(snap: t.Snapshot, decisions: List[t.Decision]) -> List[str]:
    """What is wrong with `decisions` by the simplest of the controller's
    rules, in words (empty when nothing is): a pod decided twice, a position
    out of range, a node the pod may not use, the wrong number of GPUs, a GPU
    given exclusively twice or shared and given exclusively in one round, a
    victim named twice or out of range. Not the controller's full validator
    (that is `validate`, which runs it), but enough to catch a policy
    handing out a GPU twice, and it needs no `wasmgpu` binary."""
    problems = []
    seen = set()
    exclusive = set()
    shared = set()
    victims = set()
    for d in decisions:
        pod = pod_of(d)
        if pod in seen:
            problems.append(f"pod {pod} is decided twice")
        seen.add(pod)
        if not 0 <= pod < len(snap.pending):
            problems.append(f"pod {pod} is out of range")
            continue
        if isinstance(d, (t.Decision_Wait, t.Decision_Reject)):
            continue
        a = d.value if isinstance(d, t.Decision_Assign) else d.value.assignment
        r = snap.pending[pod]
        if not isinstance(r.ask, t.Ask_Gpus):
            continue
        if not 0 <= a.node < len(snap.nodes):
            problems.append(f"pod {r.pod}: node {a.node} is out of range")
            continue
        sets = snap.eligible_sets
        words = sets[r.eligible_set] if r.eligible_set < len(sets) else []
        if not (a.node >> 6 < len(words) and words[a.node >> 6] >> (a.node & 63) & 1):
            problems.append(f"pod {r.pod}: node {a.node} is not eligible")
        if len(a.gpus) != r.ask.value.count or len(set(a.gpus)) != len(a.gpus):
            problems.append(f"pod {r.pod}: {a.gpus} is not {r.ask.value.count} distinct GPUs")
        for g in a.gpus:
            if not 0 <= g < len(snap.nodes[a.node].gpus):
                problems.append(f"pod {r.pod}: GPU {g} is out of range on node {a.node}")
                continue
            key = (a.node, g)
            if key in exclusive or (r.ask.value.sharing == t.Sharing.EXCLUSIVE and key in shared):
                problems.append(f"pod {r.pod}: GPU {g} of node {a.node} is given twice")
            (exclusive if r.ask.value.sharing == t.Sharing.EXCLUSIVE else shared).add(key)
        if isinstance(d, t.Decision_Preempt):
            for v in d.value.victims:
                if not 0 <= v < len(snap.running) or v in victims:
                    problems.append(f"pod {r.pod}: victim {v} is out of range or named twice")
                victims.add(v)
    return problems


_PUBLISHERS = {t.Publisher.AGENT: "agent", t.Publisher.DRA_DRIVER: "draDriver", t.Publisher.BOTH: "both"}


def gpu_uuid(n: t.Node, position: int) -> str:
    """The UUID the host gives a built GPU (`GPU-{node}-{index}`, and
    `MIG-GPU-{node}-{index}-{k}` for the k-th instance of a GPU), as the
    Rust builders name them; what `wasmgpu policy run --output json` prints."""
    g = n.gpus[position]
    if g.mig is None:
        return f"GPU-{n.name}-{g.index}"
    return f"MIG-GPU-{n.name}-{g.index}-{position - g.mig.parent - 1}"


def _gpu_ref(g: t.GpuRef) -> dict:
    return {"node": g.node, "gpu": g.gpu}


def _claim(c: t.Claim) -> dict:
    """A DRA claim as the Rust serde derives write it (camelCase)."""
    return {
        "name": c.name,
        "requests": [{"name": r.name, "alternatives": [
            {"subrequest": a.subrequest, "count": a.count, "candidates": a.candidates} for a in r.alternatives]}
            for r in c.requests],
        "constraints": [{"requests": list(k.requests), "distinct": k.distinct, "attribute": k.attribute,
                         "values": [{"device": _gpu_ref(v.device), "value": v.value} for v in k.values]}
                        for k in c.constraints],
    }


def snapshot_file(snap: t.Snapshot) -> dict:
    """`snap` as a snapshot file (contract 0.3, the Rust `SnapshotFile`;
    `json.dump` it), for `wasmgpu policy run --snapshot FILE` and `validate`:
    GPU UUIDs as `gpu_uuid` names them, labels by key, eligible sets as node
    positions, DRA claims and candidate sets as the contract has them."""
    nodes = []
    for n in snap.nodes:
        gpus = []
        for p, g in enumerate(n.gpus):
            gpus.append({
                "uuid": gpu_uuid(n, p), "index": g.index, "model": g.model, "memoryMiB": g.memory_mib,
                "allocatedMiB": g.allocated_mib, "held": g.held, "sharedOwners": g.shared_owners,
                "numaNode": g.numa_node, "healthy": g.healthy,
                "mig": None if g.mig is None else {"parent": g.mig.parent, "profile": g.mig.profile},
                "nvlink": [i for i in range(64) if g.nvlink >> i & 1], "publishedBy": _PUBLISHERS[g.published_by],
            })
        labels = {k: v for k, v in zip(snap.label_keys, n.labels) if v is not None}
        nodes.append({"name": n.name, "labels": labels, "gpus": gpus})
    pending = []
    for r in snap.pending:
        if isinstance(r.ask, t.Ask_Gpus):
            sh = r.ask.value
            ask = {"gpus": {"count": sh.count, "model": sh.model, "migProfile": sh.mig_profile,
                            "memoryMiB": sh.memory_mib,
                            "sharing": "shared" if sh.sharing == t.Sharing.SHARED else "exclusive"}}
        else:
            ask = {"claims": [_claim(c) for c in r.ask.value]}
        pending.append({
            "pod": r.pod, "namespace": r.namespace, "tenant": r.tenant,
            "preemption": "Never" if r.preemption == t.PreemptionPolicy.NEVER else "PreemptLowerPriority",
            "priority": r.priority, "createdMs": r.created_ms, "eligibleSet": r.eligible_set, "gang": r.gang,
            "ask": ask,
        })
    count = len(snap.nodes)
    members = [[i for w, word in enumerate(words) for i in range(w * 64, w * 64 + 64) if word >> (i - w * 64) & 1 and i < count]
               for words in snap.eligible_sets]
    return {
        "contract": "wasmgpu:policy@0.3.0",
        "round": snap.round,
        "models": list(snap.models),
        "migProfiles": list(snap.mig_profiles),
        "namespaces": list(snap.namespaces),
        "nodes": nodes,
        "pending": pending,
        "running": [{
            "pod": r.pod, "namespace": r.namespace, "tenant": r.tenant, "priority": r.priority, "node": r.node,
            "gpus": list(r.gpus), "sharedMiB": r.shared_mib, "startedMs": r.started_ms, "gang": r.gang,
            "evictable": r.evictable, "protectedMs": r.protected_ms,
        } for r in snap.running],
        "eligibleSets": members,
        "candidateSets": [[_gpu_ref(g) for g in c] for c in snap.candidate_sets],
        "gangs": [{"name": g.name, "minMember": g.min_member, "bound": g.bound, "pending": list(g.pending),
                   "running": list(g.running)} for g in snap.gangs],
        "tenants": [{"name": x.name, "weight": x.weight, "quota": x.quota, "limit": x.limit, "holding": x.holding,
                     "waiting": x.waiting} for x in snap.tenants],
        "config": snap.config,
    }


def _assignment(a: t.Assignment) -> dict:
    out = {"pod": a.pod, "node": a.node, "gpus": list(a.gpus)}
    if a.claims:  # as serde writes it: left out when empty
        out["claims"] = [{"claim": c.claim, "request": c.request, "alternative": c.alternative, "gpus": list(c.gpus)}
                         for c in a.claims]
    return out


def decisions_file(decisions: List[t.Decision]) -> list:
    """`decisions` as `wasmgpu policy validate --decisions FILE` reads them
    (`json.dump` it): the Rust `Decision` in serde's externally tagged form,
    positions into the snapshot, e.g. `[{"assign": {"pod": 0, "node": 1,
    "gpus": [0, 1]}}, {"wait": {"pod": 1, "reason": "no room"}}, {"preempt":
    {"assignment": {...}, "victims": [3]}}]`."""
    out = []
    for d in decisions:
        if isinstance(d, t.Decision_Assign):
            out.append({"assign": _assignment(d.value)})
        elif isinstance(d, t.Decision_Preempt):
            out.append({"preempt": {"assignment": _assignment(d.value.assignment), "victims": list(d.value.victims)}})
        elif isinstance(d, (t.Decision_Wait, t.Decision_Reject)):
            tag = "wait" if isinstance(d, t.Decision_Wait) else "reject"
            out.append({tag: {"pod": d.value.pod, "reason": d.value.reason}})
        else:
            raise TypeError(f"decisions_file: {d!r} is not a Decision (Decision_Assign, _Wait, _Reject or _Preempt)")
    return out


def wasmgpu_cli() -> str:
    """The `wasmgpu` binary `validate` runs: `$WASMGPU` when set, else
    `wasmgpu` on PATH. Raises FileNotFoundError, naming both and the fix,
    when there is none (tests that need it skip on that)."""
    given = os.environ.get("WASMGPU")
    if given:
        if os.path.isfile(given) and os.access(given, os.X_OK):
            return given
        raise FileNotFoundError(
            f"WASMGPU={given} is not an executable file; build it with `make build` in a wasmgpu checkout, "
            "or set WASMGPU to the binary (e.g. WASMGPU=target/release/wasmgpu)")
    found = shutil.which("wasmgpu")
    if found:
        return found
    raise FileNotFoundError(
        "no wasmgpu binary: $WASMGPU is not set and there is no `wasmgpu` on PATH; build it with `make build` "
        "in a wasmgpu checkout and set WASMGPU=target/release/wasmgpu (or put it on PATH)")


def validate(snap: t.Snapshot, decisions: List[t.Decision]) -> dict:
    """Holds `decisions` to the host's own rules on `snap`: the verdict the
    controller would give them, from `wasmgpu policy validate` (the binary
    `wasmgpu_cli` finds), parsed:

        {"valid": bool,
         "accepted":   [{"pod": "ns/name", "node": "n", "gpus": ["GPU-n-0"]}],
         "preempting": [{"placement": {...as accepted}, "victims": ["ns/name"]}],
         "waiting":    [{"pod": "ns/name", "reason": "...", "gang": ...}],  # gang only when set
         "rejected":   [...as waiting],
         "refused":    [{"index": 0, "pod": "ns/name" or None, "decision": "text",
                         "reason": {"kind": "wrong-count", ...}, "why": "in words"}]}

    Names are the snapshot's (GPUs as `gpu_uuid` names them); `index` is the
    decision's position in `decisions`. A refused decision is not an error:
    `valid` is False and `refused` says why. Raises FileNotFoundError when
    there is no binary, RuntimeError (with its stderr) when it fails. The
    snapshot is written by `snapshot_file` (DRA claims and candidate sets
    included)."""
    cli = wasmgpu_cli()
    with tempfile.TemporaryDirectory(prefix="wasmgpu-validate-") as tmp:
        snapshot_path = pathlib.Path(tmp, "snapshot.json")
        decisions_path = pathlib.Path(tmp, "decisions.json")
        snapshot_path.write_text(json.dumps(snapshot_file(snap)))
        decisions_path.write_text(json.dumps(decisions_file(decisions)))
        command = [cli, "policy", "validate", "--snapshot", str(snapshot_path), "--decisions", str(decisions_path),
                   "--output", "json"]
        done = subprocess.run(command, capture_output=True, text=True)
    # 0: nothing refused; 2: something refused (the verdict is printed either
    # way); 1: an error. A binary without `policy validate` also exits 2 (a
    # usage error), with nothing on stdout: that is an error too.
    if done.returncode in (0, 2):
        try:
            verdict = json.loads(done.stdout)
        except ValueError:
            verdict = None
        if isinstance(verdict, dict) and "valid" in verdict:
            return verdict
    raise RuntimeError(
        f"`{cli} policy validate` failed (exit status {done.returncode}): {done.stderr.strip() or done.stdout.strip()}"
        + ("; a wasmgpu without `policy validate` is too old: rebuild it (`make build`)"
           if "unrecognized subcommand" in done.stderr else ""))
