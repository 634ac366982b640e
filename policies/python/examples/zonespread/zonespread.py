"""zonespread: each pod goes to the zone (node label) with the most GPUs free
for it, and in the zone to the node with the most; multi-GPU pods get GPUs
that are all NVLink peers of one another (config "nvlink", default
"require"); a shared pod leaves at least "minFreeMiB" free on each GPU it
shares. Nodes without the zone label are not used."""

from wasmgpu_policy import (
    EXCLUSIVE, SHARED, Cluster, Field, Fit, Nvlink, PolicyError,
    assign, export_policy, fail, info, parse_config, reason, wait,
)

ZONE = "topology.kubernetes.io/zone"

CONFIG = {
    "nvlink": Field("require", choices=("prefer", "require", "ignore")),
    "minFreeMiB": Field(0, type=int, min=0),
}


def describe():
    # The label keys a policy reads are named here: nodes carry only those.
    return info("zone-spread", "0.1.0", "Spread pods across zones; NVLink cliques", [ZONE])


def allocate(snapshot):
    try:
        config = parse_config(snapshot.config, CONFIG)
    except PolicyError as e:
        fail(str(e))  # the round fails, naming the field and the fix
    nvlink, min_free = Nvlink(config["nvlink"]), config["minFreeMiB"]
    cluster = Cluster(snapshot)
    decisions = []
    for pod in cluster.pending_in_order():
        want = cluster.want(pod)
        decision = place(cluster, want, nvlink, min_free)
        if decision is None and want.kind == SHARED and min_free and not cluster.shortfall(want).permanent:
            decision = wait(pod, f"no eligible node has {reason.asked(want.request)}, leaving "
                                 f"{min_free} MiB free on each, right now (minFreeMiB)")
        decisions.append(decision or cluster.unplaced(want, nvlink))
    return decisions


def place(cluster, want, nvlink, min_free):
    free = cluster.free_by_label(ZONE, want)  # {zone: GPUs free for this pod}, by name
    for zone in sorted(free, key=lambda z: -free[z]):  # most free first; ties by name
        nodes = [n for n in cluster.eligible(want) if cluster.label(n, ZONE) == zone]
        for node in sorted(nodes, key=lambda n: -len(cluster.fitting_gpus(n, want))):
            gpus = choose(cluster, node, want, nvlink, min_free)
            if gpus is not None:
                cluster.commit(node, gpus, want)  # later queries see them taken
                return assign(want.pod, node, gpus)
    return None


def choose(cluster, node, want, nvlink, min_free):
    fitting = cluster.fitting_gpus(node, want)
    if want.kind == SHARED:
        # GPUs that keep min_free MiB free after this pod, the emptiest first.
        room = [g for g in fitting if cluster.gpu_now(node, g).free_mib - want.memory >= min_free]
        room.sort(key=lambda g: -cluster.gpu_now(node, g).free_mib)
        return sorted(room[:want.count]) if len(room) >= want.count else None
    if want.kind == EXCLUSIVE and want.count > 1 and nvlink is Nvlink.REQUIRE:
        clique = cluster.nvlink_clique(node, fitting, want.count)  # all pairs linked, or None
        return sorted(clique) if clique is not None else None
    return cluster.pick_gpus(node, want, Fit.LOOSEST, nvlink)


WitWorld = export_policy(describe, allocate)
