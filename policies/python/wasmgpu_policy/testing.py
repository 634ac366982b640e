"""Snapshot builders for unit tests of policies (run natively).

`snapshot(...)` fills in the round's tables the way the host does: the
namespaces of the pending and running pods (sorted, each once; requests and
running pods name them by index) and one label value (or None) per entry of
`label_keys` on every node. After adding pods or label keys by hand, call
`refresh_tables` again; `request`, `running` and `with_labels` keep the names
they need so that it can.
"""

from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from wit_world.imports import types as t

from . import pod_of

__all__ = [
    "assigned",
    "decision_of",
    "dra_request",
    "gang",
    "gpu",
    "node",
    "node_set",
    "refresh_tables",
    "request",
    "restrict",
    "running",
    "snapshot",
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


def with_labels(snap: t.Snapshot, node_position: int, labels: Dict[str, str]) -> t.Snapshot:
    """Sets labels `{key: value}` on the node at `node_position`; each key
    joins `snap.label_keys` (as if the policy had asked for it) and every
    node gets a value (or None) per key."""
    for key in labels:
        if key not in snap.label_keys:
            snap.label_keys.append(key)
    _pad_labels(snap)
    n = snap.nodes[node_position]
    for key, value in labels.items():
        n.labels[snap.label_keys.index(key)] = value
    return snap


def _pad_labels(snap: t.Snapshot) -> None:
    for n in snap.nodes:
        del n.labels[len(snap.label_keys):]
        n.labels.extend([None] * (len(snap.label_keys) - len(n.labels)))


def refresh_tables(snap: t.Snapshot) -> t.Snapshot:
    """Rebuilds `snap.namespaces` from the pending and running pods the
    builders made (sorted, each once) and points their `namespace` at it;
    gives every node one label value (or None) per label key."""
    pods = list(snap.pending) + list(snap.running)
    names = [_namespace(p) for p in pods]
    known = set(snap.namespaces) | {n for n in names if n is not None}
    snap.namespaces = sorted(known, key=lambda n: n.encode())
    for p, name in zip(pods, names):
        if name is not None:
            p.namespace = snap.namespaces.index(name)
    _pad_labels(snap)
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
