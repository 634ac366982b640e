"""DRA placement (`Cluster.place_claims`, `claims_shortfall`,
`claims_unplaced` and `place_each`), each round held to the host's validator
when there is a `wasmgpu` binary: the Rust SDK's cluster/claims/tests.rs,
with the same expectations."""

import copy
import unittest
from unittest import mock

from wasmgpu_policy import (
    EXCLUSIVE, NO_SHAPE, Cluster, Fit, Shortfall, devices_of, place_each, reason,
)
from wasmgpu_policy.testing import (
    candidate_set, claim, conflicts, decision_for, dra_request, gang, large, node, refresh_tables, request, restrict,
    snapshot, validate, wasmgpu_cli, with_mig,
)
from wasmgpu_policy import claims as claims_module
from wit_world.imports import types as t

H100, A100 = 0, 1
MODELS = ["NVIDIA H100", "NVIDIA A100"]


def have_validator() -> bool:
    try:
        wasmgpu_cli()
    except FileNotFoundError:
        return False
    return True


HAVE_VALIDATOR = have_validator()


def all_gpus(snap, nodes):
    """Every GPU of `nodes` (`(node, count)`: positions `0..count` each) as
    one candidate set."""
    return candidate_set(snap, [(n, g) for n, count in nodes for g in range(count)])


def one_claim(pod, requests):
    return dra_request(pod, [claim(pod, requests)])


def h100(name, gpus):
    return node(name, gpus, H100, 81920)


def hold(gpu, held=True):
    """Marks `gpu` held exclusively (all its memory allocated, as the host
    sends it), or free."""
    gpu.held = held
    gpu.allocated_mib = gpu.memory_mib if held else 0


def claims_of_pod(snap, pod):
    return snap.pending[pod].ask.value


def constraint(requests, distinct, values):
    """A constraint over `requests` with `values[g]` for GPU `g` of node 0."""
    return t.Constraint(
        requests=list(requests),
        distinct=distinct,
        attribute="resource.kubernetes.io/pcieRoot",
        values=[t.AttributeValue(device=t.GpuRef(node=0, gpu=g), value=v) for g, v in enumerate(values)
                if v is not None],
    )


def constrained(distinct, values, counts):
    """One node of `len(values)` GPUs, every one a candidate of both requests
    of claim `ml/c` (`counts` devices), bound by `constraint`."""
    gpus = len(values)
    snap = snapshot(MODELS, [h100("a", gpus)], [])
    set_ = all_gpus(snap, [(0, gpus)])
    c = claim("ml/c", [("a", counts[0], set_), ("b", counts[1], set_)])
    c.constraints.append(constraint([], distinct, values))
    snap.pending.append(dra_request("ml/p", [c]))
    return snap


# Rounds whose one DRA pod the search places in exactly `steps` steps (its
# budget is 4096 per claim and node): (alternatives of request "a" that fail
# in 3 steps each, put first; a's count, from all 16 GPUs; b's count, from
# b's candidates; each GPU's value of a distinctAttribute binding both).
BUDGET_ROUNDS = {
    4096: (605, 4, 3, [3, 7, 8, 9, 14], [10, 9, 2, 1, 7, 4, 2, 1, 8, 10, 0, 9, 6, 7, 10, 9]),
    4097: (1347, 7, 1, [0, 2, 4, 8, 12, 14], [0, 3, 1, 7, 9, 10, 7, 4, 0, 5, 4, 2, 10, 9, 3, 8]),
}


def budget_round(steps):
    """The round of `BUDGET_ROUNDS[steps]`: one node of 16 GPUs, pod `ml/p`."""
    waste, a, b, b_gpus, values = BUDGET_ROUNDS[steps]
    snap = snapshot(MODELS, [h100("wide", 16)], [])
    every = all_gpus(snap, [(0, 16)])
    c = claim("ml/c", [("a", a, every), ("b", b, candidate_set(snap, [(0, g) for g in b_gpus]))])
    c.constraints.append(constraint([], True, values))
    # Two GPUs of one value: a distinct pick of both fails after 2 devices tried.
    first = {}
    pair = next((first[v], g) for g, v in enumerate(values) if first.setdefault(v, g) != g)
    same = candidate_set(snap, [(0, g) for g in pair])
    for _ in range(waste):
        c.requests[0].alternatives.insert(0, t.Alternative(subrequest="waste", count=2, candidates=same))
    snap.pending.append(dra_request("ml/p", [c]))
    refresh_tables(snap)
    return snap


class Claims(unittest.TestCase):
    def decide(self, snap, fit, check=True):
        """Decides the round with `place_each` and holds it to the host's
        rules (`check`: the host would send the snapshot)."""
        refresh_tables(snap)  # the namespaces of the pods added since it was built
        decisions = place_each(snap, fit)
        self.assertEqual(conflicts(snap, decisions), [])
        if check and HAVE_VALIDATOR:
            verdict = validate(snap, decisions)
            self.assertEqual(verdict["refused"], [], verdict["refused"])
        self.assertEqual(len(decisions), len(snap.pending), decisions)
        return decisions

    def choices(self, decision):
        """`(node, choices)` of an assignment."""
        self.assertIsInstance(decision, t.Decision_Assign, decision)
        self.assertEqual(decision.value.gpus, [], "a DRA assignment names no GPUs")
        return decision.value.node, decision.value.claims

    def reason(self, decision):
        self.assertIsInstance(decision, (t.Decision_Wait, t.Decision_Reject), decision)
        return decision.value.reason

    def test_two_of_eight_candidates_go_to_one_node_the_fullest_for_binpack(self):
        busy = h100("busy", 8)
        for g in busy.gpus[:4]:
            hold(g)
        snap = snapshot(MODELS, [h100("idle", 8), busy], [])
        set_ = all_gpus(snap, [(0, 8), (1, 8)])
        snap.pending.append(one_claim("ml/train", [("gpus", 2, set_)]))
        packed = self.decide(snap, Fit.TIGHTEST)
        node_, chosen = self.choices(packed[0])
        self.assertEqual(node_, 1, "binpack fills the fuller node")
        self.assertEqual(len(chosen), 1)
        self.assertEqual((chosen[0].claim, chosen[0].request, chosen[0].alternative), (0, 0, 0))
        self.assertEqual(chosen[0].gpus, [4, 5], "the first free candidates")
        spread = self.decide(snap, Fit.LOOSEST)
        node_, chosen = self.choices(spread[0])
        self.assertEqual((node_, chosen[0].gpus), (0, [0, 1]))

    def test_dra_pods_of_one_round_never_share_a_device(self):
        snap = snapshot(MODELS, [h100("a", 4)], [])
        set_ = all_gpus(snap, [(0, 4)])
        for pod in ["ml/p0", "ml/p1", "ml/p2"]:
            snap.pending.append(one_claim(pod, [("gpus", 2, set_)]))
        decisions = self.decide(snap, Fit.TIGHTEST)
        self.assertEqual(self.choices(decisions[0])[1][0].gpus, [0, 1])
        self.assertEqual(self.choices(decisions[1])[1][0].gpus, [2, 3])
        self.assertEqual(
            self.reason(decisions[2]),
            'no eligible node has 2 device(s) for claim ml/p2 request "gpus" (4 candidate(s) on eligible nodes) '
            "free right now; at most 0 free on any eligible node",
        )
        self.assertIsInstance(decisions[2], t.Decision_Wait)

    def test_first_available_takes_the_first_alternative_that_can_be_satisfied(self):
        n = h100("a", 4)
        hold(n.gpus[0])
        hold(n.gpus[1])
        snap = snapshot(MODELS, [n], [])
        first = candidate_set(snap, [(0, 0), (0, 1)])
        second = candidate_set(snap, [(0, 2), (0, 3)])
        wants = claim("ml/c", [("gpu", 1, first)])
        wants.requests[0].alternatives.append(t.Alternative(subrequest="fallback", count=2, candidates=second))
        wants.requests[0].alternatives[0].subrequest = "preferred"
        snap.pending.append(dra_request("ml/p", [wants]))
        decisions = self.decide(snap, Fit.TIGHTEST)
        chosen = self.choices(decisions[0])[1]
        self.assertEqual((chosen[0].alternative, chosen[0].gpus), (1, [2, 3]))
        # With its candidates free, the first alternative wins.
        idle = copy.deepcopy(snap)
        hold(idle.nodes[0].gpus[0], False)
        decisions = self.decide(idle, Fit.TIGHTEST)
        chosen = self.choices(decisions[0])[1]
        self.assertEqual((chosen[0].alternative, chosen[0].gpus), (0, [0]))

    def test_match_attribute_tries_each_value_where_taking_the_first_devices_would_break_it(self):
        # Values 0,1,1,2,1: the first three devices (0, 1, 1) break the match;
        # value 0 has one device, value 1 has three.
        snap = constrained(False, [0, 1, 1, 2, 1], (2, 1))
        decisions = self.decide(snap, Fit.TIGHTEST)
        chosen = self.choices(decisions[0])[1]
        self.assertEqual(chosen[0].gpus, [1, 2])
        self.assertEqual(chosen[1].gpus, [4])
        # Bound by position, across the two requests only.
        snap = copy.deepcopy(snap)
        claims_of_pod(snap, 0)[0].constraints[0].requests = [0, 1]
        self.assertEqual(self.choices(self.decide(snap, Fit.TIGHTEST)[0])[1][1].gpus, [4])
        # Values 0,0,1,1: no value has three devices, ever.
        never = constrained(False, [0, 0, 1, 1], (2, 1))
        decisions = self.decide(never, Fit.TIGHTEST)
        self.assertIsInstance(decisions[0], t.Decision_Reject)
        self.assertEqual(
            self.reason(decisions[0]),
            "no eligible node has 3 device(s) for claim ml/c within the claims' constraints, even when idle",
        )

    def test_distinct_attribute_takes_devices_of_values_not_yet_used(self):
        # GPU 0 has no value: it cannot be chosen for a bound request.
        snap = constrained(True, [None, 0, 0, 1, 2], (2, 1))
        decisions = self.decide(snap, Fit.TIGHTEST)
        chosen = self.choices(decisions[0])[1]
        self.assertEqual(chosen[0].gpus, [1, 3])
        self.assertEqual(chosen[1].gpus, [4])
        # Two values among four devices: three distinct ones never fit.
        never = constrained(True, [0, 0, 1, 1], (2, 1))
        self.assertIsInstance(self.decide(never, Fit.TIGHTEST)[0], t.Decision_Reject)

    def test_a_request_asking_more_than_its_candidates_is_rejected_and_one_whose_candidates_are_held_waits(self):
        snap = snapshot(MODELS, [h100("a", 4)], [])
        two = candidate_set(snap, [(0, 0), (0, 1)])
        snap.pending.append(one_claim("ml/train", [("gpus", 3, two)]))
        decisions = self.decide(snap, Fit.TIGHTEST)
        self.assertIsInstance(decisions[0], t.Decision_Reject)
        self.assertEqual(
            self.reason(decisions[0]),
            'no eligible node has 3 device(s) for claim ml/train request "gpus" (2 candidate(s) on eligible nodes), '
            "even when idle",
        )
        # An empty candidate set can never be served either.
        empty = copy.deepcopy(snap)
        empty.candidate_sets[0].clear()
        self.assertIsInstance(self.decide(empty, Fit.TIGHTEST)[0], t.Decision_Reject)
        # Its two candidates held: it waits.
        held = copy.deepcopy(snap)
        claims_of_pod(held, 0)[0].requests[0].alternatives[0].count = 2
        hold(held.nodes[0].gpus[1])
        held.pending[0].preemption = t.PreemptionPolicy.NEVER
        decisions = self.decide(held, Fit.TIGHTEST)
        self.assertIsInstance(decisions[0], t.Decision_Wait)
        self.assertEqual(
            self.reason(decisions[0]),
            'no eligible node has 2 device(s) for claim ml/train request "gpus" (2 candidate(s) on eligible nodes) '
            "free right now; at most 1 free on any eligible node",
        )
        cluster = Cluster(held)
        want = cluster.want(0)
        self.assertFalse(cluster.claims_shortfall(want).permanent)
        self.assertFalse(cluster.shortfall(want).permanent, "shortfall delegates")

    def test_a_pod_whose_claims_are_allocated_goes_to_its_eligible_node_without_devices(self):
        snap = snapshot(MODELS, [h100("a", 2), h100("b", 2)], [])
        snap.pending.append(dra_request("ml/ready", []))
        restrict(snap, 0, [1])
        decisions = self.decide(snap, Fit.TIGHTEST)
        node_, chosen = self.choices(decisions[0])
        self.assertEqual(node_, 1)
        self.assertEqual(chosen, [])
        if HAVE_VALIDATOR:
            self.assertEqual(len(validate(snap, decisions)["accepted"]), 1)
        # No eligible node at all.
        restrict(snap, 0, [])
        decisions = self.decide(snap, Fit.TIGHTEST)
        self.assertIsInstance(decisions[0], t.Decision_Reject)
        self.assertEqual(self.reason(decisions[0]), reason.no_eligible_node())

    def test_dra_and_gpuresource_pods_of_one_round_share_no_gpu_in_priority_order(self):
        snap = snapshot(MODELS, [h100("a", 4)], [
            request("ml/old", 2, EXCLUSIVE, 0),
            request("ml/late", 1, EXCLUSIVE, 0),
        ])
        set_ = all_gpus(snap, [(0, 4)])
        dra = one_claim("ml/dra", [("gpus", 3, set_)])
        dra.priority = 10
        snap.pending.append(dra)
        snap.pending[1].created_ms = 5
        decisions = self.decide(snap, Fit.TIGHTEST)
        # The DRA pod goes first (priority), then the older GPU pod waits.
        self.assertEqual(decisions[0].value.pod, 2)
        self.assertEqual(self.choices(decisions[0])[1][0].gpus, [0, 1, 2])
        self.assertIsInstance(decision_for(snap, decisions, "ml/old"), t.Decision_Wait)
        late = decision_for(snap, decisions, "ml/late")
        self.assertIsInstance(late, t.Decision_Assign)
        self.assertEqual(late.value.gpus, [3])

    def test_mig_instances_exclude_their_parent_within_a_pod_and_across_the_round(self):
        # Positions: 0 = GPU 0, 1 and 2 its instances, 3 = GPU 1.
        n = with_mig(node("a", 2, A100, 81920), 0, [(0, 9856), (0, 9856)])
        snap = snapshot(MODELS, [n], [request("ml/whole", 2, EXCLUSIVE, 0)], mig_profiles=["1g.10gb"])
        mig = candidate_set(snap, [(0, 1), (0, 2)])
        dra = one_claim("ml/mig", [("slice", 1, mig)])
        dra.priority = 1
        snap.pending.append(dra)
        decisions = self.decide(snap, Fit.TIGHTEST)
        self.assertEqual(self.choices(decisions[0])[1][0].gpus, [1])
        self.assertIsInstance(decisions[1], t.Decision_Wait, f"GPU 0 has an instance held now: {decisions}")
        # A whole GPU and its instance never go to one pod.
        snap = snapshot(MODELS, [copy.deepcopy(snap.nodes[0])], [], mig_profiles=["1g.10gb"])
        both = candidate_set(snap, [(0, 0), (0, 1)])
        snap.pending.append(one_claim("ml/both", [("gpus", 2, both)]))
        decisions = self.decide(snap, Fit.TIGHTEST)
        self.assertEqual(self.reason(decisions[0]),
                         "no eligible node has 2 device(s) for claim ml/both, even when idle")

    def test_devices_only_a_dra_driver_publishes_go_to_dra_pods_only(self):
        n = h100("a", 2)
        for g in n.gpus:
            g.published_by = t.Publisher.DRA_DRIVER
        snap = snapshot(MODELS, [n], [request("ml/gpu", 1, EXCLUSIVE, 0)])
        set_ = all_gpus(snap, [(0, 2)])
        snap.pending.append(one_claim("ml/dra", [("gpus", 2, set_)]))
        decisions = self.decide(snap, Fit.TIGHTEST)
        self.assertIsInstance(decision_for(snap, decisions, "ml/gpu"), t.Decision_Reject)
        self.assertEqual(self.choices(decision_for(snap, decisions, "ml/dra"))[1][0].gpus, [0, 1])

    def test_the_tenant_limit_counts_dra_devices(self):
        snap = snapshot(MODELS, [h100("a", 8)], [])
        set_ = all_gpus(snap, [(0, 8)])
        snap.pending.append(one_claim("ml/p0", [("gpus", 2, set_)]))
        snap.pending.append(one_claim("ml/p1", [("gpus", 1, set_), ("more", 1, set_)]))
        snap.pending.append(request("ml/p2", 1, EXCLUSIVE, 0))
        for i, r in enumerate(snap.pending):
            r.created_ms = i
            r.tenant = 0
        snap.tenants = [t.Tenant(name="ml", weight=1, quota=0, limit=4, holding=1, waiting=5)]
        decisions = self.decide(snap, Fit.TIGHTEST)
        self.assertIsInstance(decisions[0], t.Decision_Assign)
        self.assertEqual(
            self.reason(decisions[1]),
            "tenant ml holds 3 of its limit 4 GPUs (GPUTenant ml: spec.limit); this pod needs 2 more",
        )
        self.assertIsInstance(decisions[2], t.Decision_Assign, "1 held + 2 + 1 = 4")
        # place_claims checks what it picks too: a later alternative of 4.
        snap = copy.deepcopy(snap)
        del snap.pending[1:]
        hold(snap.nodes[0].gpus[0])
        zero = candidate_set(snap, [(0, 0)])
        alternatives = claims_of_pod(snap, 0)[0].requests[0].alternatives
        alternatives[0] = t.Alternative(subrequest="one", count=1, candidates=zero)
        alternatives.append(t.Alternative(subrequest="four", count=4, candidates=set_))
        cluster = Cluster(snap)
        want = cluster.want(0)
        self.assertIsNone(cluster.over_tenant_limit(want), "1 held + 1 asked")
        self.assertIsNone(cluster.place_claims(want, Fit.TIGHTEST), "4 would pass it")

    def test_claims_of_one_pod_take_distinct_devices_and_commit_together(self):
        snap = snapshot(MODELS, [h100("a", 4), h100("b", 4)], [])
        set_ = all_gpus(snap, [(0, 4), (1, 4)])
        claims = [
            claim("ml/x", [("gpus", 2, set_)]),
            claim("ml/y", [("gpus", 1, set_), ("spare", 1, set_)]),
        ]
        snap.pending.append(dra_request("ml/p", claims))
        snap.pending.append(one_claim("ml/q", [("gpus", 1, set_)]))
        snap.pending[1].created_ms = 1
        decisions = self.decide(snap, Fit.TIGHTEST)
        node_, chosen = self.choices(decisions[0])
        self.assertEqual(node_, 0)
        self.assertEqual([(c.claim, c.request, c.gpus) for c in chosen], [(0, 0, [0, 1]), (1, 0, [2]), (1, 1, [3])])
        # The node is full: the next pod goes to the other one.
        self.assertEqual(self.choices(decisions[1]), (1, [t.ClaimChoice(claim=0, request=0, alternative=0, gpus=[0])]))
        cluster = Cluster(snap)
        want = cluster.want(0)
        self.assertEqual(
            (want.devices(), reason.asked(want.request)),
            (4, "2 device(s) for claim ml/x, 2 device(s) for claim ml/y"),
        )

    def test_gang_members_asking_through_claims_are_left_to_their_gang(self):
        snap = snapshot(MODELS, [h100("a", 4)], [request("ml/g0", 1, EXCLUSIVE, 0)])
        set_ = all_gpus(snap, [(0, 4)])
        snap.pending.append(one_claim("ml/g1", [("gpus", 1, set_)]))
        gang(snap, "ml/gang", 1, [0, 1])
        decisions = place_each(snap, Fit.TIGHTEST)
        if HAVE_VALIDATOR:
            self.assertEqual(validate(snap, decisions)["refused"], [])
        self.assertEqual(len(decisions), 1, decisions)
        self.assertEqual(decisions[0].value.pod, 0)

    def test_the_search_gives_up_after_4096_steps_per_claim_and_node(self):
        d = self.decide(budget_round(4096), Fit.TIGHTEST)[0]
        self.assertEqual([(c.alternative, c.gpus) for c in self.choices(d)[1]], [(605, [1, 2, 4, 5]), (0, [3, 8, 9])])
        d = self.decide(budget_round(4097), Fit.TIGHTEST)[0]
        self.assertEqual(self.reason(d), "no eligible node has 3 device(s) for claim ml/c within the claims' "
                                         "constraints, even when idle")
        with mock.patch.object(claims_module, "SEARCH_STEPS", 4097):
            d = self.decide(budget_round(4097), Fit.TIGHTEST)[0]
        self.assertEqual([(c.alternative, c.gpus) for c in self.choices(d)[1]],
                         [(1347, [0, 1, 2, 3, 4, 7, 9]), (0, [12])])

    def test_positions_out_of_range_are_skipped(self):
        snap = snapshot(MODELS, [h100("a", 2)], [])
        set_ = candidate_set(snap, [(0, 1), (0, 7), (5, 0)])
        snap.pending.append(one_claim("ml/p", [("gpus", 1, set_), ("no", 1, 99)]))
        # The host sends no such positions: its validator refuses the snapshot.
        decisions = self.decide(snap, Fit.TIGHTEST, check=False)
        self.assertIsInstance(decisions[0], t.Decision_Reject, decisions)
        snap.pending[0] = one_claim("ml/p", [("gpus", 1, set_)])
        self.assertEqual(self.choices(self.decide(snap, Fit.TIGHTEST, check=False)[0])[1][0].gpus, [1])

    def test_a_large_mixed_round_is_accepted_whole(self):
        """A large round of GPUResource pods with DRA pods of every kind among
        them: one decision each, and the host accepts all of them."""
        snap = large(60, 200)
        every = [(n, g) for n in range(len(snap.nodes)) for g in range(8)]
        set_ = candidate_set(snap, every)
        half = candidate_set(snap, [(n, g) for n, g in every if n % 2 == 0])
        # A value per device: its half of the node's GPUs.
        values = [t.AttributeValue(device=t.GpuRef(node=n, gpu=g), value=g // 4) for n, g in every]
        for i in range(120):
            c = claim(f"ml/c{i}", [("a", 1 + i % 4, half if i % 3 == 0 else set_), ("b", i % 2, set_)])
            if i % 5 == 0:
                c.requests[0].alternatives.insert(0, t.Alternative(subrequest="big", count=8, candidates=set_))
            if i % 4 == 1:
                c.constraints.append(
                    t.Constraint(requests=[], distinct=i % 8 == 1, attribute="numa", values=list(values)))
            r = dra_request(f"ml/dra{i}", [c])
            r.priority = i % 3
            r.created_ms = i
            snap.pending.append(r)
        for fit in (Fit.TIGHTEST, Fit.LOOSEST):
            decisions = self.decide(snap, fit)
            placed = [d for d in decisions if isinstance(d, t.Decision_Assign)]
            dra_placed = sum(1 for d in placed if snap.pending[d.value.pod].pod.startswith("ml/dra"))
            self.assertGreater(dra_placed, 20, f"{dra_placed} DRA pods placed")
            self.assertGreater(len(placed), dra_placed)
            if HAVE_VALIDATOR:
                verdict = validate(snap, decisions)
                accepted = [p for p in verdict["accepted"] if p["pod"].startswith("ml/dra")]
                self.assertEqual(len(accepted), dra_placed)
                self.assertGreater(len(verdict["accepted"]), dra_placed)


class Remembered(unittest.TestCase):
    """What the SDK remembers between pods (searches per claim structure and
    node, nodes that look alike, the nodes that fit) decides what searching
    every node for every pod decides."""

    def test_remembered_searches_decide_as_fresh_ones(self):
        from test_against_rust import make_dra, ours  # generated rounds with DRA pods of every kind

        solve_on = claims_module.solve_on
        fitting = claims_module.fitting

        def fresh_solution(cluster, key, node, claims, usable):
            return solve_on(cluster, node, claims, usable)

        def fresh_fitting(cluster, key, want, claims):
            cluster._dra_index.clear()
            cluster._dra_memo.clear()
            return fitting(cluster, key, want, claims)

        for seed in range(40):
            snap = make_dra(70000 + seed)
            for fit in (Fit.TIGHTEST, Fit.LOOSEST):
                remembered = ours(snap, place_each(snap, fit))
                with mock.patch.object(claims_module, "_solution", fresh_solution), \
                        mock.patch.object(claims_module, "fitting", fresh_fitting):
                    fresh = ours(snap, place_each(snap, fit))
                self.assertEqual(remembered, fresh, f"seed {70000 + seed}, {fit}")


class Api(unittest.TestCase):
    """The Python names of the Rust SDK's DRA API."""

    def test_all_pending_in_order_merges_both_kinds(self):
        snap = snapshot(MODELS, [h100("a", 2)], [
            request("ml/b", 1, EXCLUSIVE, 0, created_ms=3),
            dra_request("ml/d", priority=5),
            request("ml/a", 1, EXCLUSIVE, 0, created_ms=3),
            dra_request("ml/c", created_ms=1),
        ])
        cluster = Cluster(snap)
        self.assertEqual(cluster.all_pending_in_order(), [1, 3, 2, 0])
        self.assertEqual(cluster.pending_in_order(), [2, 0])
        self.assertEqual(cluster.dra_pending(), [1, 3])

    def test_want_devices_and_claims(self):
        set_ = 0
        dra = dra_request("ml/train", [claim("ml/train", [("gpus", 2, set_), ("nic", 1, 1)])])
        gpu = request("ns/p", 2, EXCLUSIVE, 0)
        self.assertEqual((devices_of(gpu), devices_of(dra)), (2, 3))
        snap = snapshot(MODELS, [h100("a", 2)], [gpu, dra, dra_request("ml/none", [])])
        cluster = Cluster(snap)
        g, d, none = (cluster.want(i) for i in range(3))
        self.assertFalse(g.is_dra())
        self.assertIsNone(g.claims())
        self.assertEqual(g.devices(), 2)
        self.assertTrue(d.is_dra())
        self.assertEqual([c.name for c in d.claims()], ["ml/train"])
        self.assertEqual(d.devices(), 3)
        self.assertIs(d.shape, NO_SHAPE)
        self.assertEqual(d.describe(), "3 device(s) for claim ml/train")
        self.assertEqual(none.claims(), [])
        self.assertEqual(none.describe(), "no devices: its claims are allocated already")
        # The GPU fit helpers place no DRA request; it does not preempt.
        self.assertFalse(cluster.fits(0, d))
        self.assertIsNone(cluster.place_claims(g, Fit.TIGHTEST), "a GPUResource request")
        self.assertIsNone(cluster.preempt(d, Fit.TIGHTEST))
        # shortfall and unplaced hand a DRA want to claims_shortfall and claims_unplaced.
        self.assertEqual(cluster.shortfall(d), cluster.claims_shortfall(d))
        self.assertEqual(cluster.claims_shortfall(g), cluster.shortfall(g))
        self.assertEqual(cluster.unplaced(d).value.reason, cluster.claims_unplaced(d).value.reason)
        self.assertEqual(
            cluster.claims_shortfall(d),
            Shortfall(Shortfall.NEVER,
                      '2 device(s) for claim ml/train request "gpus" (0 candidate(s) on eligible nodes)'))

    def test_reason_wordings(self):
        self.assertEqual(reason.claim_request("ml/train", "gpus", 3, 2),
                         '3 device(s) for claim ml/train request "gpus" (2 candidate(s) on eligible nodes)')
        self.assertEqual(reason.claim_request("ml/t", 'a"b', 1, 0),
                         '1 device(s) for claim ml/t request "a\\"b" (0 candidate(s) on eligible nodes)')
        self.assertEqual(reason.claims_together("3 device(s) for claim ml/c", True),
                         "3 device(s) for claim ml/c within the claims' constraints")
        self.assertEqual(reason.claims_together("3 device(s) for claim ml/c", False), "3 device(s) for claim ml/c")
        self.assertEqual(reason.claims_most_free(1), "at most 1 free on any eligible node")


if __name__ == "__main__":
    unittest.main()
