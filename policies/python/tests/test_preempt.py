"""Preemption by priority, DRA pods' included, and tenant limits (the Rust
SDK's cluster/preempt.rs and placement.rs, with the same expectations)."""

import unittest

from wasmgpu_policy import EXCLUSIVE, SHARED, Cluster, Fit, Nvlink, namespace_name, place_each, preempt
from wasmgpu_policy.testing import (
    candidate_set,
    claim,
    conflicts,
    decision_of,
    dra_request,
    gang,
    node,
    refresh_tables,
    request,
    running,
    running_on_each_gpu,
    snapshot,
    tenant,
    validate,
    wasmgpu_cli,
    with_mig,
)
from wit_world.imports import types as t

H100 = 0
MODELS = ["NVIDIA H100"]


def full():
    """Node "n": 8 GPUs each held by a pod of priority 100 (started 0-7);
    node "m": 4 GPUs, free. One pending pod of priority 1000 for 4 GPUs."""
    snap = snapshot(MODELS, [node("n", 8, H100, 81920), node("m", 4, H100, 81920)], [
        request("ml/urgent", 4, EXCLUSIVE, 0, priority=1000),
    ])
    running_on_each_gpu(snap, 0, "batch/p", 100)
    return snap


def decide(snap, nvlink=Nvlink.IGNORE):
    cluster = Cluster(snap)
    return cluster.preempt(cluster.want(0), Fit.TIGHTEST, nvlink)


def gang_of(snap, members):
    """Makes running pods `members` gang `batch/g`."""
    g = gang(snap, "batch/g", len(members), [])
    for r in members:
        snap.running[r].gang = g
        snap.gangs[g].running.append(r)


class Preemption(unittest.TestCase):
    def assert_accepted(self, snap, decisions):
        """No conflict, and the host accepts `decisions` on `snap` (when there
        is a `wasmgpu` to ask)."""
        self.assertEqual(conflicts(snap, decisions), [])
        try:
            wasmgpu_cli()
        except FileNotFoundError:
            return
        verdict = validate(snap, decisions)
        self.assertEqual(verdict["refused"], [], verdict["refused"])

    def test_a_gang_goes_whole_and_only_when_cheaper_than_pods_in_none(self):
        # The youngest two are a gang: the four youngest in no gang go.
        snap = full()
        gang_of(snap, [6, 7])
        decision = decide(snap)
        self.assertEqual(decision, preempt(0, 0, [2, 3, 4, 5], [5, 4, 3, 2]))
        self.assert_accepted(snap, [decision])

        # p0-p3 are protected; p4 and p5 are a gang with m0 on node m. On m,
        # evicting m0 makes room, and the gang goes whole: 3 victims, fewer
        # than n's 5 (p7, p6 and the gang).
        snap = full()
        self.assertEqual(running(snap, "batch/m0", 100, 1, [0]), 8)
        for r in snap.running[:4]:
            r.protected_ms = 1
        gang_of(snap, [4, 5, 8])
        decision = decide(snap)
        self.assertEqual(decision, preempt(0, 1, [0, 1, 2, 3], [4, 5, 8]))
        self.assert_accepted(snap, [decision])

        # A gang member that may not go keeps its whole gang: 2 GPUs can be
        # freed on n, none on m.
        snap.running[8].evictable = False
        self.assertIsNone(decide(snap))

    def test_the_fewest_lowest_youngest_pods_go(self):
        snap = full()
        # m has 2 GPUs free and 2 held by priority-10 pods: 2 victims there.
        running(snap, "batch/m0", 10, 1, [0])
        running(snap, "batch/m1", 10, 1, [1])
        decision = decide(snap)
        self.assertEqual(decision, preempt(0, 1, [0, 1, 2, 3], [8, 9]))
        self.assertEqual(conflicts(snap, [decision]), [])
        # Without m's pods (m is free, but `preempt` is asked), n's youngest four go.
        snap = full()
        decision = decide(snap)
        self.assertEqual(decision, preempt(0, 0, [4, 5, 6, 7], [7, 6, 5, 4]))
        # place_each preempts the same way, and binpack with it.
        snap = full()
        running(snap, "batch/m0", 10, 1, [0])
        running(snap, "batch/m1", 10, 1, [1])
        self.assertEqual(place_each(snap, Fit.TIGHTEST), [preempt(0, 1, [0, 1, 2, 3], [8, 9])])

    def test_nobody_is_preempted_for_equal_priority_never_or_protected(self):
        snap = full()
        snap.nodes[1].gpus = snap.nodes[1].gpus[:2]
        snap.pending[0].priority = 100
        self.assertIsNone(decide(snap))
        snap.pending[0].priority = 1000
        snap.pending[0].preemption = t.PreemptionPolicy.NEVER
        self.assertIsNone(decide(snap))
        snap.pending[0].preemption = t.PreemptionPolicy.PREEMPT_LOWER_PRIORITY
        for r in snap.running[:6]:
            r.protected_ms = 1
        self.assertIsNone(decide(snap), "only 2 GPUs could be freed")
        for r in snap.running[:2]:
            r.protected_ms = 0
        decision = decide(snap)
        self.assertEqual(decision, preempt(0, 0, [0, 1, 6, 7], [7, 6, 1, 0]))
        self.assertEqual(conflicts(snap, [decision]), [])

    def test_victims_are_named_once_per_round(self):
        snap = full()
        snap.nodes[1].gpus = snap.nodes[1].gpus[:2]
        snap.pending += [request("ml/urgent-b", 4, EXCLUSIVE, 0, priority=1000),
                         request("ml/urgent-c", 4, EXCLUSIVE, 0, priority=1000)]
        decisions = place_each(snap, Fit.TIGHTEST)
        self.assertEqual(decisions[:2], [preempt(0, 0, [4, 5, 6, 7], [7, 6, 5, 4]),
                                         preempt(1, 0, [0, 1, 2, 3], [3, 2, 1, 0])])
        self.assertEqual(decisions[2], t.Decision_Wait(t.Deferral(2, "no eligible node has 4 GPU(s) free right now")))
        self.assertEqual(conflicts(snap, decisions), [])

    def test_shared_requests_and_gang_members_do_not_preempt(self):
        snap = full()
        snap.nodes[1].gpus = []
        snap.pending = [request("ml/shared", 1, SHARED, 1000, priority=1000),
                        request("ml/member", 1, EXCLUSIVE, 0, priority=1000, gang=0)]
        cluster = Cluster(snap)
        for pod in (0, 1):
            self.assertIsNone(cluster.preempt(cluster.want(pod), Fit.TIGHTEST))
        decisions = place_each(snap, Fit.TIGHTEST)
        self.assertEqual(decision_of(decisions, 0).value.reason,
                         "no eligible node has 1 GPU(s) with 1000 MiB to share free right now")
        self.assertEqual(decision_of(decisions, 1).value.reason, "no eligible node has 1 GPU(s) free right now")

    def test_a_pod_budget_blocking_preemption_is_named(self):
        snap = full()
        snap.nodes[1].gpus = []
        for r in snap.running[:6]:
            r.evictable = False
        decisions = place_each(snap, Fit.TIGHTEST)
        self.assertEqual(decisions, [t.Decision_Wait(t.Deferral(0, (
            "no eligible node has 4 GPU(s) free right now; 6 pod(s) of lower priority it could preempt "
            "are protected by a PodDisruptionBudget now")))])
        cluster = Cluster(snap)
        self.assertEqual(cluster.preemption_blocked(cluster.want(0)),
                         "6 pod(s) of lower priority it could preempt are protected by a PodDisruptionBudget now")
        snap.config = '{"preemption": false}'
        self.assertEqual(place_each(snap, Fit.TIGHTEST)[0].value.reason, "no eligible node has 4 GPU(s) free right now")
        snap.config = ""
        snap.pending[0].preemption = t.PreemptionPolicy.NEVER
        self.assertEqual(place_each(snap, Fit.TIGHTEST)[0].value.reason, "no eligible node has 4 GPU(s) free right now")

    def test_pods_within_their_minimum_runtime_blocking_preemption_are_named(self):
        # As the Rust SDK's test: 6 pods protected for 1 ms, one of them 1500 ms.
        snap = full()
        for r in snap.running[:6]:
            r.protected_ms = 1
        snap.running[0].protected_ms = 1_500
        cluster = Cluster(snap)
        self.assertEqual(cluster.preemption_blocked(cluster.want(0)),
                         "6 pod(s) of lower priority it could preempt are within their minimum runtime "
                         "(the first is past it in 1 s)")
        # Whole seconds, rounded up.
        snap = full()
        snap.running[0].protected_ms = 2_001
        snap.running[1].protected_ms = 4_000
        cluster = Cluster(snap)
        self.assertEqual(cluster.preemption_blocked(cluster.want(0)),
                         "2 pod(s) of lower priority it could preempt are within their minimum runtime "
                         "(the first is past it in 3 s)")
        snap.running[0].protected_ms = 2_000
        self.assertEqual(Cluster(snap).preemption_blocked(Cluster(snap).want(0)),
                         "2 pod(s) of lower priority it could preempt are within their minimum runtime "
                         "(the first is past it in 2 s)")
        # Both: the budget first, then the minimum runtime; a pod a budget
        # protects is counted there only, and pods of equal priority not at all.
        snap = full()
        snap.nodes[1].gpus = []
        for r in snap.running[:3]:
            r.evictable = False
        snap.running[2].protected_ms = 500
        snap.running[3].protected_ms = 61_001
        snap.running[4].protected_ms = 120_000
        snap.running[5].protected_ms = 1
        snap.running[5].priority = 1000
        both = ("3 pod(s) of lower priority it could preempt are protected by a PodDisruptionBudget now; "
                "2 pod(s) of lower priority it could preempt are within their minimum runtime "
                "(the first is past it in 62 s)")
        cluster = Cluster(snap)
        self.assertEqual(cluster.preemption_blocked(cluster.want(0)), both)
        self.assertEqual(place_each(snap, Fit.TIGHTEST),
                         [t.Decision_Wait(t.Deferral(0, f"no eligible node has 4 GPU(s) free right now; {both}"))])
        snap.pending[0].preemption = t.PreemptionPolicy.NEVER
        self.assertIsNone(Cluster(snap).preemption_blocked(Cluster(snap).want(0)))
        # None protected, none young: no reason.
        self.assertIsNone(Cluster(full()).preemption_blocked(Cluster(full()).want(0)))

    def test_preempt_where_takes_another_rule(self):
        # Reclaim: evict the batch namespace whatever its priority.
        snap = full()
        snap.nodes[1].gpus = []
        snap.pending[0].priority = 0
        running(snap, "prod/keep", 0, 0, [0])  # a second pod on GPU 0: not batch
        cluster = Cluster(snap)
        want = cluster.want(0)
        self.assertIsNone(cluster.preempt(want, Fit.TIGHTEST, Nvlink.IGNORE))
        decision = cluster.preempt_where(want, Fit.TIGHTEST, Nvlink.IGNORE,
                                         lambda pod: namespace_name(snap, pod.namespace) == "batch")
        self.assertEqual(decision, preempt(0, 0, [4, 5, 6, 7], [7, 6, 5, 4]))
        # Committed: the GPUs are taken for the rest of the round.
        self.assertEqual([cluster.gpu_now(0, g).held for g in (4, 5, 6, 7)], [True] * 4)
        self.assertEqual(cluster.victim_taken[4:8], [True] * 4)

    def test_mig_and_whole_requests_preempt_through_instances(self):
        # GPU 0 whole and free; GPU 1 carved into two instances (positions 2, 3),
        # held by pods of priority 0 and 5.
        def snap_with(pending):
            n = with_mig(node("m", 2, H100, 81920), 1, [(0, 9856), (0, 9856)])
            snap = snapshot(MODELS, [n], pending, mig_profiles=["1g.10gb"])
            running(snap, "batch/low", 0, 0, [2])
            running(snap, "batch/mid", 5, 0, [3])
            return snap

        snap = snap_with([request("ml/m", 1, EXCLUSIVE, 0, mig_profile="1g.10gb", priority=100)])
        self.assertEqual(place_each(snap, Fit.TIGHTEST), [preempt(0, 0, [2], [0])])
        # A whole request for both GPUs evicts both instance holders (each
        # holds an instance of a GPU it is given).
        snap = snap_with([request("ml/w", 2, EXCLUSIVE, 0, priority=100)])
        self.assertEqual(place_each(snap, Fit.TIGHTEST), [preempt(0, 0, [0, 1], [0, 1])])
        # Priority 3 may evict only the priority-0 pod: not enough for GPU 1.
        snap.pending[0].priority = 3
        self.assertEqual(place_each(snap, Fit.TIGHTEST)[0].value.reason, "no eligible node has 2 GPU(s) free right now")

    def test_require_applies_to_the_gpus_a_preemption_frees(self):
        # Four GPUs linked 0-1 and 2-3, each held; a 2-GPU pod under REQUIRE
        # takes a linked pair: the youngest pods of one pair go.
        n = node("a", 4, H100, 81920)
        for a, b in [(0, 1), (2, 3)]:
            n.gpus[a].nvlink |= 1 << b
            n.gpus[b].nvlink |= 1 << a
        snap = snapshot(MODELS, [n], [request("ml/p", 2, EXCLUSIVE, 0, priority=10)])
        for g, started in enumerate([3, 0, 2, 1]):
            running(snap, f"batch/p{g}", 0, 0, [g], started_ms=started)
        # Youngest first: p0 (3), p2 (2), p3 (1), p1 (0). Under IGNORE two
        # free GPUs suffice; under REQUIRE they must be peers: 2-3.
        snap.config = '{"nvlink": "ignore"}'
        self.assertEqual(place_each(snap, Fit.TIGHTEST), [preempt(0, 0, [0, 2], [0, 2])])
        snap.config = '{"nvlink": "require"}'
        self.assertEqual(place_each(snap, Fit.TIGHTEST), [preempt(0, 0, [2, 3], [2, 3])])

    def test_a_dra_pod_preempts_through_its_claims_and_the_host_accepts_it(self):
        # Node n's 8 GPUs held by priority-100 pods; a priority-1000 pod
        # claims 4 of n's first 6 (its candidates) with a second claim of 1.
        snap = full()
        snap.pending.clear()
        six = candidate_set(snap, [(0, g) for g in range(6)])
        snap.pending.append(dra_request(
            "ml/urgent",
            [claim("ml/urgent-a", [("gpus", 3, six)]), claim("ml/urgent-b", [("gpu", 1, six)])],
            priority=1000,
        ))
        refresh_tables(snap)  # the new pod's namespace
        decision = decide(snap)
        self.assertIsInstance(decision, t.Decision_Preempt, decision)
        # The youngest among the candidates' holders go: p5, p4, p3, p2.
        self.assertEqual(decision.value.victims, [5, 4, 3, 2])
        a = decision.value.assignment
        self.assertEqual((a.pod, a.node, a.gpus), (0, 0, []), "named by the claims")
        self.assertEqual([(c.claim, c.request, c.alternative, c.gpus) for c in a.claims],
                         [(0, 0, 0, [2, 3, 4]), (1, 0, 0, [5])])
        self.assert_accepted(snap, [decision])
        try:
            wasmgpu_cli()
        except FileNotFoundError:
            pass
        else:
            self.assertEqual(len(validate(snap, [decision])["preempting"]), 1)
        # place_each preempts the same way.
        self.assertEqual(place_each(snap, Fit.TIGHTEST), [decision])

        # Never, or nothing lower: no preemption.
        snap.pending[0].preemption = t.PreemptionPolicy.NEVER
        self.assertIsNone(decide(snap))
        snap.pending[0].preemption = t.PreemptionPolicy.PREEMPT_LOWER_PRIORITY
        snap.pending[0].priority = 100
        self.assertIsNone(decide(snap))

    def test_a_dra_pod_that_cannot_preempt_waits_saying_why(self):
        # The pod of full() through a claim of 4 among n's GPUs; n's holders
        # protected by a PodDisruptionBudget.
        snap = full()
        snap.pending.clear()
        eight = candidate_set(snap, [(0, g) for g in range(8)])
        snap.pending.append(dra_request("ml/urgent", [claim("ml/urgent-gpus", [("gpus", 4, eight)])], priority=1000))
        refresh_tables(snap)
        for r in snap.running:
            r.evictable = False
        short = ('no eligible node has 4 device(s) for claim ml/urgent-gpus request "gpus" (8 candidate(s) on eligible '
                 "nodes) free right now; at most 0 free on any eligible node")
        self.assertEqual(place_each(snap, Fit.TIGHTEST), [t.Decision_Wait(t.Deferral(0, (
            f"{short}; 8 pod(s) of lower priority it could preempt are protected by a PodDisruptionBudget now")))])
        # Without preemption, or with its policy Never, the shortfall alone.
        snap.config = '{"preemption": false}'
        self.assertEqual(place_each(snap, Fit.TIGHTEST), [t.Decision_Wait(t.Deferral(0, short))])
        snap.config = ""
        snap.pending[0].preemption = t.PreemptionPolicy.NEVER
        self.assertEqual(place_each(snap, Fit.TIGHTEST), [t.Decision_Wait(t.Deferral(0, short))])
        # Evictable again, without preemption in the config: it waits.
        snap.pending[0].preemption = t.PreemptionPolicy.PREEMPT_LOWER_PRIORITY
        for r in snap.running:
            r.evictable = True
        snap.config = '{"preemption": false}'
        self.assertEqual(place_each(snap, Fit.TIGHTEST), [t.Decision_Wait(t.Deferral(0, short))])
        snap.config = ""
        self.assertEqual(place_each(snap, Fit.TIGHTEST),
                         [t.Decision_Preempt(t.Preemption(
                             assignment=t.Assignment(pod=0, node=0, gpus=[], claims=[
                                 t.ClaimChoice(claim=0, request=0, alternative=0, gpus=[4, 5, 6, 7])]),
                             victims=[7, 6, 5, 4]))])


class Tenants(unittest.TestCase):
    def test_a_pod_whose_tenant_is_at_its_limit_waits_saying_so(self):
        snap = snapshot(MODELS, [node("n", 8, H100, 81920)], [request(f"ml/p{i}", 1, EXCLUSIVE, 0) for i in range(3)])
        tenant(snap, "ml", limit=3, holding=1, waiting=3, members=range(3))
        decisions = place_each(snap, Fit.TIGHTEST)
        self.assertEqual(conflicts(snap, decisions), [])
        self.assertEqual([type(d) for d in decisions], [t.Decision_Assign, t.Decision_Assign, t.Decision_Wait])
        self.assertEqual(decisions[-1].value.reason,
                         "tenant ml holds 3 of its limit 3 GPUs (GPUTenant ml: spec.limit); this pod needs 1 more")
        cluster = Cluster(snap)
        want = cluster.want(0)
        self.assertIsNone(cluster.over_tenant_limit(want))
        cluster.place(0, want, Fit.TIGHTEST)
        self.assertEqual(cluster.tenant_held, [2])
        # No limit, or no tenant: never held back.
        snap.tenants[0].limit = None
        self.assertEqual(len([d for d in place_each(snap, Fit.TIGHTEST) if isinstance(d, t.Decision_Assign)]), 3)
        snap.pending[0].tenant = None
        self.assertIsNone(Cluster(snap).over_tenant_limit(Cluster(snap).want(0)))


if __name__ == "__main__":
    unittest.main()
