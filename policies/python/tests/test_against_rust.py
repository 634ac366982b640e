"""The SDK's place_each against the Rust SDK's, through the real engine: the
Rust binpack (Fit.TIGHTEST) and spread (Fit.LOOSEST) components decide on
generated rounds (NVLink rings and cliques, every NVLink mode, preemption,
PodDisruptionBudgets, tenant limits, MIG, gangs, shares, eligible sets, and
DRA pods: several claims, requests and firstAvailable alternatives,
matchAttribute / distinctAttribute constraints, MIG instances and devices
only a DRA driver publishes among the candidates) exactly what `place_each`
decides natively (for a DRA assignment: the node and the devices of every
choice, in order).

It needs the `wasmgpu` CLI and the Rust components, which this directory does
not build: `cargo build --release -p wasmgpu` and `make policies` (or set
WASMGPU_BIN and WASMGPU_POLICY_DIR). Without them it is skipped. Rounds per
policy: WASMGPU_PY_COMPARE (default 20; seeds from WASMGPU_PY_COMPARE_SEED)."""

import copy
import json
import os
import pathlib
import random
import subprocess
import tempfile
import unittest

from wasmgpu_policy import Fit, place_each
from wasmgpu_policy.testing import (
    candidate_set, claim, dra_request, gang, gpu_uuid, node, refresh_tables, request, restrict, running, snapshot,
    snapshot_file, tenant, with_full_nvlink, with_mig, with_nvlink,
)
from wit_world.imports import types as t

ROOT = pathlib.Path(__file__).resolve().parents[3]
WASMGPU = pathlib.Path(os.environ.get("WASMGPU_BIN", ROOT / "target/release/wasmgpu"))
POLICY_DIR = pathlib.Path(os.environ.get("WASMGPU_POLICY_DIR", ROOT / "target/wasm32-wasip2/policy"))
ROUNDS = int(os.environ.get("WASMGPU_PY_COMPARE", "20"))
FIRST_SEED = int(os.environ.get("WASMGPU_PY_COMPARE_SEED", "0"))
MODELS = ["NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB", "NVIDIA L4"]
PROFILES = ["1g.10gb", "3g.40gb"]


def make(seed):
    rnd = random.Random(seed)
    nodes = []
    for n in range(rnd.randint(3, 24)):
        kind = rnd.choice(["hgx", "pairs", "ring4", "ring8", "chord", "mixed", "l4", "mig", "sparse"])
        name = f"n{n}-{kind}"
        if kind == "hgx":
            nd = with_full_nvlink(node(name, 8, 0, 81559))
        elif kind == "pairs":
            nd = with_nvlink(node(name, 8, 1, 40960), [(0, 1), (2, 3), (4, 5), (6, 7)])
        elif kind == "ring4":
            nd = with_nvlink(node(name, 4, 1, 40960), [(0, 1), (1, 2), (2, 3), (3, 0)])
        elif kind == "ring8":
            nd = with_nvlink(node(name, 8, 0, 81559), [(i, (i + 1) % 8) for i in range(8)])
        elif kind == "chord":
            nd = with_nvlink(node(name, 6, 0, 81559), [(0, 1), (1, 2), (0, 2), (2, 3), (3, 4), (4, 5), (3, 5), (1, 4)])
        elif kind == "mixed":
            nd = with_nvlink(node(name, 4, 0, 81559), [(0, 1), (1, 2), (2, 3)])
            nd.gpus[3].memory_mib = 40960
            nd.gpus[2].model = 1
        elif kind == "l4":
            nd = node(name, rnd.randint(1, 4), 2, 23034)
        elif kind == "sparse":
            nd = with_nvlink(node(name, 8, 0, 81559), [(0, 5), (5, 6), (6, 0), (1, 2), (3, 7)])
        else:
            nd = with_nvlink(node(name, 4, 1, 81920), [(0, 1), (2, 3)])
            with_mig(nd, 3, [(0, 9856), (0, 9856), (1, 40192)])
            with_mig(nd, 1, [(1, 40192), (1, 40192)])
        for g in nd.gpus:
            r = rnd.random()
            if g.mig is None and r < 0.04:
                g.healthy = False
            elif g.mig is None and r < 0.06:
                g.published_by = rnd.choice([t.Publisher.DRA_DRIVER, t.Publisher.BOTH])
        for g in nd.gpus:
            if g.mig is not None and not nd.gpus[g.mig.parent].healthy:
                g.healthy = False
        nodes.append(nd)
    pending = []
    for p in range(rnd.randint(5, 60)):
        shared = rnd.random() < 0.2
        extra = {}
        if not shared and rnd.random() < 0.12:
            extra["mig_profile"] = rnd.choice(PROFILES + ["7g.80gb"])
        count = 1 if shared and rnd.random() < 0.7 else rnd.choice([1, 1, 2, 2, 3, 4, 4, 8])
        if "mig_profile" in extra:
            count = rnd.choice([1, 1, 2])
        memory = rnd.choice([4096, 8192, 16384]) if shared else rnd.choice([0, 0, 40960, 65536])
        m = rnd.random()
        if m < 0.15: extra["model"] = "NVIDIA H100*"
        elif m < 0.25: extra["model"] = "*A100*"
        elif m < 0.27: extra["model"] = "AMD*"
        r = request(f"team-{p % 5}/job-{p:03}", count, t.Sharing.SHARED if shared else t.Sharing.EXCLUSIVE,
                    memory, priority=rnd.choice([0, 0, 1, 2, 5, 10, 100]), created_ms=rnd.randint(0, 50), **extra)
        if rnd.random() < 0.1:
            r.preemption = t.PreemptionPolicy.NEVER
        pending.append(r)
    snap = snapshot(MODELS, nodes, pending, mig_profiles=list(PROFILES))
    # Running pods: exclusive on free whole GPUs, instances, shares.
    for k in range(rnd.randint(0, 40)):
        ni = rnd.randrange(len(nodes))
        nd = nodes[ni]
        if not nd.gpus:
            continue
        gi = rnd.randrange(len(nd.gpus))
        g = nd.gpus[gi]
        prio = rnd.choice([0, 0, 1, 2, 3, 5, 50])
        fields = dict(evictable=rnd.random() > 0.1, protected_ms=rnd.choice([0] * 9 + [1000]))
        started = rnd.randint(0, 20)
        if g.held:
            continue
        if g.mig is not None:
            parent = nd.gpus[g.mig.parent]
            if parent.held or parent.shared_owners:
                continue
            running(snap, f"run-{k % 4}/r{k}", prio, ni, [gi], started_ms=started, **fields)
        elif rnd.random() < 0.3 and g.allocated_mib + 8192 <= g.memory_mib and not any(
                x.mig is not None and x.mig.parent == gi for x in nd.gpus):
            running(snap, f"run-{k % 4}/r{k}", prio, ni, [gi], started_ms=started, shared_mib=8192, **fields)
        elif g.shared_owners == 0 and g.allocated_mib == 0 and not any(
                x.mig is not None and x.mig.parent == gi and x.held for x in nd.gpus):
            gpus = [gi]
            if rnd.random() < 0.3:
                for gj, h in enumerate(nd.gpus):
                    if gj != gi and h.mig is None and not h.held and h.shared_owners == 0 and h.allocated_mib == 0 \
                            and not any(x.mig is not None and x.mig.parent == gj and x.held for x in nd.gpus) and len(gpus) < 3:
                        gpus.append(gj)
            running(snap, f"run-{k % 4}/r{k}", prio, ni, sorted(gpus), started_ms=started, **fields)
    # Held GPUs without a known pod (not preemptible).
    for nd in nodes:
        for g in nd.gpus:
            if g.mig is None and not g.held and g.shared_owners == 0 and rnd.random() < 0.05:
                g.held = True
                g.allocated_mib = g.memory_mib
    # Gangs.
    for gk in range(rnd.randint(0, 2)):
        free = [i for i in range(len(snap.pending)) if i % 5 == gk]
        rnd.shuffle(free)
        size = rnd.randint(2, 4)
        members = sorted(free[:size])
        if len(members) < 2:
            break
        gang(snap, f"team-{gk}/gang{gk}", rnd.randint(1, size + 1), members, bound=rnd.choice([0, 0, 1]))
    # A running gang member (never a victim).
    if snap.running and rnd.random() < 0.5:
        snap.gangs.append(t.Gang(name=snap.running[0].pod.split("/")[0] + "/rg", min_member=1, bound=1, pending=[], running=[0]))
        snap.running[0].gang = len(snap.gangs) - 1
    # Eligible sets.
    for p in range(len(snap.pending)):
        if rnd.random() < 0.2:
            restrict(snap, p, sorted(rnd.sample(range(len(nodes)), rnd.randint(0, len(nodes)))))
    # Tenants.
    for tk in range(rnd.randint(0, 3)):
        members = [p for p in range(len(snap.pending)) if rnd.random() < 0.3 and snap.pending[p].tenant is None]
        tenant(snap, f"tenant{tk}", limit=rnd.choice([None, 2, 4, 8, 16]), holding=rnd.randint(0, 4),
               waiting=len(members), members=members)
    for r in snap.running:
        if snap.tenants and rnd.random() < 0.3:
            r.tenant = rnd.randrange(len(snap.tenants))
    refresh_tables(snap)
    snap.config = rnd.choice(["", '{"nvlink": "require"}', '{"nvlink": "require"}', '{"nvlink": "ignore"}',
                              '{"preferNvlink": false}', '{"preemption": false}',
                              '{"nvlink": "require", "preemption": false}', '{"nvlink": "prefer", "preemption": true}'])
    return snap


def make_dra(seed):
    """`make(seed)`, with a wide node (16 GPUs, for deep searches) and DRA
    pods of every kind among the GPUResource ones."""
    snap = make(seed)
    rnd = random.Random(seed * 7919 + 17)
    wide = node(f"n{len(snap.nodes)}-wide", 16, 0, 81559)
    for g in wide.gpus:
        if rnd.random() < 0.1:
            g.held = True
            g.allocated_mib = g.memory_mib
    snap.nodes.append(wide)
    n = len(snap.nodes) - 1
    words = snap.eligible_sets[0]
    while len(words) <= n >> 6:
        words.append(0)
    words[n >> 6] |= 1 << (n & 63)
    every = [(ni, gi) for ni, nd in enumerate(snap.nodes) for gi in range(len(nd.gpus))]
    whole = [(ni, gi) for ni, gi in every if snap.nodes[ni].gpus[gi].mig is None]
    mig = [(ni, gi) for ni, gi in every if snap.nodes[ni].gpus[gi].mig is not None]
    sets = [
        candidate_set(snap, every),
        candidate_set(snap, whole),
        candidate_set(snap, mig),
        candidate_set(snap, [x for x in every if rnd.random() < 0.3]),
        candidate_set(snap, [x for x in whole if rnd.random() < 0.6]),
        candidate_set(snap, [(n, g) for g in range(16)]),
        candidate_set(snap, []),
    ]
    values = []
    for spread in (2, 3, 5, 8):
        values.append([t.AttributeValue(device=t.GpuRef(node=ni, gpu=gi), value=rnd.randrange(spread))
                       for ni, gi in every if rnd.random() < 0.9])
    made = []
    for k in range(rnd.randint(4, 24)):
        # Now and then the claims of an earlier pod again (pods of one
        # template: the searches they share).
        again = rnd.choice(made) if made and rnd.random() < 0.35 else None
        claims = [] if again is None else again
        for c in range(rnd.choice([0, 1, 1, 1, 1, 2, 2, 3]) if again is None else 0):
            requests = []
            for r in range(rnd.choice([1, 1, 2, 2, 3])):
                alternatives = [
                    t.Alternative(subrequest=f"s{a}" if rnd.random() < 0.5 else None,
                                  count=rnd.choice([0, 1, 1, 1, 2, 2, 3, 4, 6, 8]), candidates=rnd.choice(sets))
                    for a in range(rnd.choice([1, 1, 1, 2, 3]))
                ]
                requests.append(t.ClaimRequest(name=f"r{r}", alternatives=alternatives))
            constraints = []
            for _ in range(rnd.choice([0, 0, 1, 1, 2])):
                bound = rnd.choice([[], [], [0], [1], [0, 1], [1, 2], [5]])
                constraints.append(t.Constraint(requests=bound, distinct=rnd.random() < 0.4, attribute="a",
                                                values=list(rnd.choice(values))))
            claims.append(t.Claim(name=f"dra-{k % 3}/c{k}-{c}", requests=requests, constraints=constraints))
        made.append(claims)
        # A gang member (of the gang's namespace), now and then.
        g = rnd.randrange(len(snap.gangs)) if snap.gangs and rnd.random() < 0.1 else None
        if g is not None and not snap.gangs[g].pending:
            g = None
        namespace = snap.gangs[g].name.split("/")[0] if g is not None else f"dra-{k % 3}"
        claims = copy.deepcopy(claims)
        for c, x in enumerate(claims):
            x.name = f"{namespace}/c{k}-{c}"
        r = dra_request(f"{namespace}/d{k}", claims, priority=rnd.choice([0, 0, 1, 2, 5, 10, 100]),
                        created_ms=rnd.randint(0, 50))
        if rnd.random() < 0.15:
            r.preemption = t.PreemptionPolicy.NEVER
        if snap.tenants and rnd.random() < 0.3:
            r.tenant = rnd.randrange(len(snap.tenants))
        snap.pending.append(r)
        p = len(snap.pending) - 1
        if rnd.random() < 0.15:
            restrict(snap, p, sorted(rnd.sample(range(len(snap.nodes)), rnd.randint(0, len(snap.nodes)))))
        if g is not None:
            snap.gangs[g].pending.append(p)
            r.gang = g
    refresh_tables(snap)
    return snap


def ours(snap, decisions):
    out = []
    for d in decisions:
        if isinstance(d, (t.Decision_Wait, t.Decision_Reject)):
            kind = "wait" if isinstance(d, t.Decision_Wait) else "reject"
            out.append({"kind": kind, "pod": snap.pending[d.value.pod].pod, "reason": d.value.reason})
            continue
        a = d.value if isinstance(d, t.Decision_Assign) else d.value.assignment
        n = snap.nodes[a.node]
        gpus = list(a.gpus) + [g for c in a.claims for g in c.gpus]  # as the CLI lists a DRA assignment's
        x = {"kind": "assign" if isinstance(d, t.Decision_Assign) else "preempt", "pod": snap.pending[a.pod].pod,
             "node": n.name, "gpus": [gpu_uuid(n, g) for g in gpus]}
        if isinstance(d, t.Decision_Preempt):
            x["victims"] = [snap.running[v].pod for v in d.value.victims]
        out.append(x)
    return out


def theirs(doc):
    keep = ("kind", "pod", "node", "gpus", "victims", "reason")
    return [{k: x[k] for k in keep if k in x} for x in doc["decisions"]]


class AgainstRust(unittest.TestCase):
    def compare(self, component, fit, seeds, make=make):
        path = POLICY_DIR / component
        if not WASMGPU.is_file() or not path.is_file():
            self.skipTest(f"needs {WASMGPU} and {path} (cargo build --release -p wasmgpu; make policies)")
        with tempfile.TemporaryDirectory() as tmp:
            for seed in seeds:
                snap = make(seed)
                file = pathlib.Path(tmp) / f"round-{seed}.json"
                file.write_text(json.dumps(snapshot_file(snap)))
                run = subprocess.run([str(WASMGPU), "policy", "run", "--output", "json", "--snapshot", str(file),
                                      str(path)], capture_output=True, text=True, check=False)
                self.assertEqual(run.returncode, 0, f"seed {seed}: {run.stderr[-500:]}")
                want = theirs(json.loads(run.stdout))
                got = ours(snap, place_each(snap, fit))
                self.assertEqual(len(got), len(want), f"seed {seed}")
                for k, (g, w) in enumerate(zip(got, want)):
                    self.assertEqual(g, w, f"seed {seed} ({snap.config or 'no config'}), decision {k}")

    def test_binpack_decides_as_the_rust_binpack(self):
        self.compare("wasmgpu_binpack.wasm", Fit.TIGHTEST, range(FIRST_SEED, FIRST_SEED + ROUNDS))

    def test_loosest_decides_as_the_rust_spread(self):
        self.compare("wasmgpu_spread.wasm", Fit.LOOSEST, range(FIRST_SEED + 10000, FIRST_SEED + 10000 + ROUNDS))

    def test_the_dra_search_budget_is_the_rust_one(self):
        from test_claims import budget_round  # placed in exactly 4096 steps, and in 4097

        self.compare("wasmgpu_binpack.wasm", Fit.TIGHTEST, [4096, 4097], budget_round)

    def test_binpack_places_dra_pods_as_the_rust_binpack(self):
        self.compare("wasmgpu_binpack.wasm", Fit.TIGHTEST, range(FIRST_SEED + 20000, FIRST_SEED + 20000 + ROUNDS),
                     make_dra)

    def test_loosest_places_dra_pods_as_the_rust_spread(self):
        self.compare("wasmgpu_spread.wasm", Fit.LOOSEST, range(FIRST_SEED + 30000, FIRST_SEED + 30000 + ROUNDS),
                     make_dra)


if __name__ == "__main__":
    unittest.main()
