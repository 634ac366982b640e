"""Snapshot builders for unit tests of policies (run natively)."""

from typing import List

from wit_world.imports import types as t


def gpu(uuid: str, index: int, model: int, memory_mib: int) -> t.Gpu:
    """A healthy, free whole GPU of model table index `model`."""
    return t.Gpu(
        uuid=uuid,
        index=index,
        model=model,
        memory_mib=memory_mib,
        allocated_mib=0,
        held=False,
        shared_owners=0,
        numa_node=None,
        nvlink_peers=[],
        healthy=True,
        mig=None,
    )


def node(name: str, count: int, model: int, memory_mib: int) -> t.Node:
    """`count` identical whole GPUs, UUIDs `GPU-{name}-{i}`."""
    return t.Node(name=name, labels=[], gpus=[gpu(f"GPU-{name}-{i}", i, model, memory_mib) for i in range(count)])


def with_full_nvlink(n: t.Node) -> t.Node:
    """Links every pair of GPUs on the node with NVLink."""
    for i, g in enumerate(n.gpus):
        g.nvlink_peers = [j for j in range(len(n.gpus)) if j != i]
    return n


def request(pod: str, count: int, sharing: t.Sharing, memory_mib: int, **extra) -> t.Request:
    """A request eligible on every node (set 0 of `snapshot`)."""
    namespace = pod.split("/")[0]
    fields = dict(
        pod=pod,
        namespace=namespace,
        resource=f"{namespace}/gpus",
        count=count,
        model=None,
        mig_profile=None,
        memory_mib=memory_mib,
        sharing=sharing,
        priority=0,
        created_ms=0,
        eligible_set=0,
        gang=None,
    )
    fields.update(extra)
    return t.Request(**fields)


def snapshot(models: List[str], nodes: List[t.Node], pending: List[t.Request], **extra) -> t.Snapshot:
    """A snapshot whose eligible set 0 is every node."""
    fields = dict(
        round=1,
        models=models,
        mig_profiles=[],
        nodes=nodes,
        pending=pending,
        eligible_sets=[list(range(len(nodes)))],
        gangs=[],
        usage=[],
        config="",
    )
    fields.update(extra)
    return t.Snapshot(**fields)


def assigned(decisions: List[t.Decision]):
    """Assignments as (pod, node, gpus) in decision order."""
    return [(d.value.pod, d.value.node, list(d.value.gpus)) for d in decisions if isinstance(d, t.Decision_Assign)]


def decision_of(decisions: List[t.Decision], pod: int) -> t.Decision:
    return next(d for d in decisions if d.value.pod == pod)
