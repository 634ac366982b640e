import unittest

from binpack import allocate, describe
from wasmgpu_policy import (
    Cluster,
    PolicyError,
    claims_of,
    describe_request,
    glob_match,
    in_set,
    info,
    label,
    namespace_name,
    nvlink_indices,
    nvlink_peers,
    parse_config,
    pod_of,
    preempt,
    set_log_sink,
    set_members,
    shape_of,
    tenant_of,
)
from wasmgpu_policy.testing import (
    assigned,
    decision_of,
    dra_request,
    gang,
    node,
    node_set,
    request,
    restrict,
    running,
    snapshot,
    with_full_nvlink,
    with_labels,
    with_mig,
    with_nvlink,
)
from wit_world.imports import types as t

EXCLUSIVE, SHARED = t.Sharing.EXCLUSIVE, t.Sharing.SHARED


class Binpack(unittest.TestCase):
    def test_describes_itself(self):
        self.assertEqual(describe().name, "binpack")
        self.assertEqual(describe().label_keys, [])

    def test_packs_onto_the_fullest_node_that_fits(self):
        busy = node("busy", 4, 0, 81920)
        busy.gpus[0].held = True
        busy.gpus[0].allocated_mib = 81920
        snap = snapshot(["NVIDIA H100"], [node("idle", 4, 0, 81920), busy], [
            request("ns/a", 2, EXCLUSIVE, 0),
            request("ns/b", 1, EXCLUSIVE, 0),
            request("ns/c", 2, EXCLUSIVE, 0),
        ])
        got = assigned(allocate(snap))
        self.assertEqual([n for _, n, _ in got], [1, 1, 0])
        self.assertEqual(got[0][2], [1, 2])
        self.assertEqual(got[1][2], [3])

    def test_waits_when_full_and_rejects_what_never_fits(self):
        snap = snapshot(["NVIDIA A100-SXM4-40GB"], [node("a", 2, 0, 40960)], [
            request("ns/first", 2, EXCLUSIVE, 0),
            request("ns/second", 1, EXCLUSIVE, 0),
            request("ns/huge", 4, EXCLUSIVE, 0),
        ])
        d = allocate(snap)
        self.assertIsInstance(decision_of(d, 0), t.Decision_Assign)
        self.assertIsInstance(decision_of(d, 1), t.Decision_Wait)
        self.assertIn("free right now", decision_of(d, 1).value.reason)
        self.assertIsInstance(decision_of(d, 2), t.Decision_Reject)
        self.assertIn("even when idle", decision_of(d, 2).value.reason)

    def test_shared_requests_stack_on_the_fullest_gpu(self):
        snap = snapshot(["NVIDIA L4"], [node("a", 2, 0, 24000)], [
            request(f"ns/s{i}", 1, SHARED, 8000) for i in range(3)
        ])
        got = assigned(allocate(snap))
        self.assertEqual([g for _, _, g in got], [[0], [0], [0]])

    def test_honours_eligible_sets_and_the_nvlink_preference(self):
        n1 = with_nvlink(node("n1", 4, 0, 81920), [(2, 3)])
        snap = snapshot(["NVIDIA H100"], [with_full_nvlink(node("n0", 8, 0, 81920)), n1], [
            request("ns/p", 2, EXCLUSIVE, 0),
        ])
        restrict(snap, 0, [1])
        self.assertEqual(assigned(allocate(snap)), [(0, 1, [2, 3])])
        snap.config = '{"preferNvlink": false}'
        self.assertEqual(assigned(allocate(snap)), [(0, 1, [0, 1])])

    def test_a_bad_config_fails_the_round_and_says_why(self):
        lines = []
        set_log_sink(lines.append)
        snap = snapshot([], [], [])
        snap.config = '{"preferNVLink": false}'
        with self.assertRaises(PolicyError):
            allocate(snap)
        self.assertIn("unknown field `preferNVLink`", lines[0])

    def test_mig_requests_take_free_instances_never_beside_a_held_parent(self):
        n = node("a", 5, 0, 81920)
        n.gpus[4].index = 1
        for i, profile, mem in [(1, 0, 9984), (2, 0, 9984), (3, 1, 40192)]:
            n.gpus[i].index = 0
            n.gpus[i].memory_mib = mem
            n.gpus[i].mig = t.MigInstance(parent=0, profile=profile)
        n.gpus[1].held = True
        snap = snapshot(["NVIDIA H100"], [n], [
            request("ns/m1", 1, EXCLUSIVE, 0, mig_profile="1g.10gb"),
            request("ns/m2", 1, EXCLUSIVE, 0, mig_profile="1g.10gb"),
            request("ns/whole", 1, EXCLUSIVE, 0),
            request("ns/whole2", 1, EXCLUSIVE, 0),
            request("ns/m7", 1, EXCLUSIVE, 0, mig_profile="7g.80gb"),
        ], mig_profiles=["1g.10gb", "3g.40gb"])
        d = allocate(snap)
        self.assertEqual(assigned(d), [(0, 0, [2]), (2, 0, [4])])
        self.assertIn('MIG instance(s) of profile "1g.10gb" free right now', decision_of(d, 1).value.reason)
        self.assertIsInstance(decision_of(d, 3), t.Decision_Wait)
        self.assertIsInstance(decision_of(d, 4), t.Decision_Reject)

    def test_a_gang_short_of_its_minimum_places_none_and_frees_the_room(self):
        snap = snapshot(["NVIDIA H100"], [node("a", 2, 0, 81920)], [
            request("ml/w0", 1, EXCLUSIVE, 0, gang=0, created_ms=1),
            request("ml/w1", 1, EXCLUSIVE, 0, gang=0, created_ms=1),
            request("ml/w2", 1, EXCLUSIVE, 0, gang=0, created_ms=1),
            request("ns/solo", 2, EXCLUSIVE, 0, created_ms=2),
        ])
        gang(snap, "ml/job", 3, [0, 1, 2])
        d = allocate(snap)
        for pod in (0, 1, 2):
            self.assertIn("gang ml/job: 2 of the 3 more members needed fit now", decision_of(d, pod).value.reason)
        self.assertEqual(assigned(d), [(3, 0, [0, 1])])
        # One member already bound: the two that fit complete it; the third waits.
        snap.gangs[0].bound = 1
        again = allocate(snap)
        self.assertEqual(assigned(again), [(0, 0, [0]), (1, 0, [1])])
        self.assertIn("placed without this member", decision_of(again, 2).value.reason)
        # A member that can never fit rejects the whole gang.
        snap.gangs[0].bound = 0
        shape_of(snap.pending[2]).count = 8
        for dec in allocate(snap)[:3]:
            self.assertIsInstance(dec, t.Decision_Reject)
            self.assertIn("can never be placed: member ml/w2", dec.value.reason)
        # ... unless the others reach min_member without it: only it is rejected.
        snap.gangs[0].min_member = 2
        without = allocate(snap)
        self.assertEqual(assigned(without), [(0, 0, [0]), (1, 0, [1])])
        self.assertIsInstance(decision_of(without, 2), t.Decision_Reject)
        self.assertNotIn("gang", decision_of(without, 2).value.reason)

    def test_mig_instances_pack_onto_the_parent_with_the_fewest_free_instances(self):
        n = node("a", 6, 0, 81920)
        for i, parent in [(2, 0), (3, 0), (4, 1), (5, 1)]:
            n.gpus[i].index = parent
            n.gpus[i].memory_mib = 40192
            n.gpus[i].mig = t.MigInstance(parent=parent, profile=0)
        n.gpus[4].held = True
        snap = snapshot(["NVIDIA A100"], [n], [
            request("ns/m", 1, EXCLUSIVE, 0, mig_profile="3g.40gb"),
        ], mig_profiles=["3g.40gb"])
        self.assertEqual(assigned(allocate(snap)), [(0, 0, [5])])

    def test_order_is_priority_then_age_then_name(self):
        snap = snapshot([], [], [
            request("ns/young", 1, EXCLUSIVE, 0, created_ms=5),
            request("ns/urgent", 1, EXCLUSIVE, 0, created_ms=9, priority=10),
            request("ns/old", 1, EXCLUSIVE, 0, created_ms=1),
        ])
        self.assertEqual(Cluster(snap).pending_in_order(), [1, 2, 0])

    def test_globs_and_config_parsing(self):
        self.assertTrue(glob_match("NVIDIA H100*", "NVIDIA H100 80GB HBM3"))
        self.assertTrue(glob_match("*A100*", "NVIDIA A100-SXM4-40GB"))
        self.assertFalse(glob_match("nvidia*", "NVIDIA H100"))
        self.assertTrue(glob_match("a*b*c", "aXXbYYbZZc"))
        self.assertFalse(glob_match("a*b*c", "aXXbYYbZZ"))
        self.assertTrue(glob_match("GPU-?é*", "GPU-xé-ü"))
        self.assertEqual(parse_config("  ", {"preferNvlink": True}), {"preferNvlink": True})
        with self.assertRaisesRegex(PolicyError, "must be a bool"):
            parse_config('{"preferNvlink": 1}', {"preferNvlink": True})


class Contract(unittest.TestCase):
    """What 0.3 changed: DRA requests, publishers, bit sets, tables, running pods."""

    def test_dra_requests_are_placed_by_place_claims_and_gpu_pods_share_nothing_with_them(self):
        snap = snapshot(["NVIDIA H100"], [node("a", 2, 0, 81920)], [
            dra_request("ns/dra", created_ms=0, priority=100),
            request("ns/gpu", 1, EXCLUSIVE, 0, created_ms=1),
        ])
        # Candidate set 0 (the builder's default) does not exist: never.
        d = allocate(snap)
        self.assertEqual(assigned(d), [(1, 0, [0])])
        self.assertIsInstance(decision_of(d, 0), t.Decision_Reject)
        self.assertEqual(decision_of(d, 0).value.reason, 'no eligible node has 1 device(s) for claim ns/dra-gpu '
                         'request "gpu" (0 candidate(s) on eligible nodes), even when idle')
        # With GPU 0 its candidate, the DRA pod (priority 100) takes it first.
        snap.candidate_sets.append([t.GpuRef(node=0, gpu=0)])
        d = allocate(snap)
        self.assertEqual(decision_of(d, 0).value.claims, [t.ClaimChoice(claim=0, request=0, alternative=0, gpus=[0])])
        self.assertEqual(assigned(d), [(0, 0, []), (1, 0, [1])])
        cluster = Cluster(snap)
        self.assertEqual(cluster.pending_in_order(), [1])
        self.assertEqual(cluster.dra_pending(), [0])
        self.assertEqual(cluster.all_pending_in_order(), [0, 1])
        self.assertTrue(cluster.want(0).is_dra())
        self.assertIsNone(shape_of(snap.pending[0]))
        self.assertEqual(len(claims_of(snap.pending[0])), 1)
        self.assertIsNone(claims_of(snap.pending[1]))
        self.assertEqual(describe_request(snap.pending[0]), "1 device(s) for claim ns/dra-gpu")
        self.assertEqual(describe_request(snap.pending[1]), "1 GPU(s)")

    def test_a_dra_member_counts_as_one_that_may_come_later(self):
        snap = snapshot(["NVIDIA H100"], [node("a", 2, 0, 81920)], [
            request("ml/w0", 1, EXCLUSIVE, 0),
            request("ml/w1", 1, EXCLUSIVE, 0),
            request("ml/w2", 9, EXCLUSIVE, 0),
            dra_request("ml/w3"),
        ])
        gang(snap, "ml/job", 3, [0, 1, 2, 3])
        # w2 can never fit; w0, w1 and the DRA member w3 could still make 3,
        # so w0 and w1 wait (two placed are short of three) rather than being rejected.
        d = allocate(snap)
        self.assertEqual(assigned(d), [])
        for pod in (0, 1):
            self.assertIsInstance(decision_of(d, pod), t.Decision_Wait)
            self.assertIn("gang ml/job: 2 of the 3 more members needed fit now", decision_of(d, pod).value.reason)
        self.assertIsInstance(decision_of(d, 2), t.Decision_Reject)
        self.assertNotIn("gang", decision_of(d, 2).value.reason)
        self.assertIsNone(decision_of(d, 3))
        # With one bound, the two complete it.
        snap.gangs[0].bound = 1
        self.assertEqual(assigned(allocate(snap)), [(0, 0, [0]), (1, 0, [1])])
        snap.gangs[0].bound = 0
        # Without the DRA member they could not: all are rejected, and w3 gets no decision.
        snap.gangs[0].min_member = 4
        d = allocate(snap)
        self.assertEqual(sorted(pod_of(x) for x in d), [0, 1, 2])
        for x in d:
            self.assertIsInstance(x, t.Decision_Reject)
            self.assertIn("can never be placed: member ml/w2", x.value.reason)

    def test_gpus_only_a_dra_driver_publishes_are_not_given(self):
        n = node("a", 3, 0, 81920)
        n.gpus[0].published_by = t.Publisher.DRA_DRIVER
        n.gpus[1].published_by = t.Publisher.BOTH
        snap = snapshot(["NVIDIA H100"], [n], [
            request("ns/a", 1, EXCLUSIVE, 0),
            request("ns/b", 1, SHARED, 1000),
            request("ns/c", 1, EXCLUSIVE, 0),
            request("ns/d", 3, EXCLUSIVE, 0),
        ])
        d = allocate(snap)
        self.assertEqual(assigned(d), [(0, 0, [1]), (1, 0, [2])])
        self.assertIsInstance(decision_of(d, 2), t.Decision_Wait)
        # Three GPUs, but two a GPUResource may take: never.
        self.assertIsInstance(decision_of(d, 3), t.Decision_Reject)
        self.assertEqual(Cluster(snap).healthy(0), 2)

    def test_mig_instances_of_a_parent_only_a_dra_driver_publishes_are_not_given(self):
        n = with_mig(node("a", 1, 0, 81920), 0, [(0, 9984)])
        n.gpus[0].published_by = t.Publisher.DRA_DRIVER
        snap = snapshot(["NVIDIA H100"], [n], [
            request("ns/m", 1, EXCLUSIVE, 0, mig_profile="1g.10gb"),
        ], mig_profiles=["1g.10gb"])
        self.assertIsInstance(allocate(snap)[0], t.Decision_Reject)

    def test_an_instance_of_an_unhealthy_gpu_can_never_be_given(self):
        # It takes its parent's health, in the fit checks and in `reject` (as the Rust SDK does).
        n = with_mig(node("a", 1, 0, 81920), 0, [(0, 9984)])
        n.gpus[0].healthy = False
        snap = snapshot(["NVIDIA H100"], [n], [
            request("ns/m", 1, EXCLUSIVE, 0, mig_profile="1g.10gb"),
        ], mig_profiles=["1g.10gb"])
        d = allocate(snap)[0]
        self.assertIsInstance(d, t.Decision_Reject)
        self.assertIn("even when idle", d.value.reason)

    def test_nvlink_bits_name_gpus_by_index_not_position(self):
        # GPU 0 carved into two instances: whole GPUs 1, 2, 3 sit at positions 3, 4, 5.
        n = with_mig(node("a", 4, 0, 81920), 0, [(0, 9984), (0, 9984)])
        self.assertEqual([g.index for g in n.gpus], [0, 0, 0, 1, 2, 3])
        with_nvlink(n, [(3, 5)])  # GPUs of index 1 and 3
        self.assertEqual(nvlink_indices(n.gpus[3].nvlink), [3])
        self.assertEqual(nvlink_peers(n, 3), [5])
        self.assertEqual(nvlink_peers(n, 5), [3])
        self.assertEqual(nvlink_peers(n, 1), [])  # an instance has no links
        n.gpus[0].held = True  # not for whole-GPU requests (its instances are free)
        snap = snapshot(["NVIDIA H100"], [n], [request("ns/p", 2, EXCLUSIVE, 0)], mig_profiles=["1g.10gb"])
        self.assertEqual(assigned(allocate(snap)), [(0, 0, [3, 5])])
        snap.config = '{"preferNvlink": false}'
        self.assertEqual(assigned(allocate(snap)), [(0, 0, [3, 4])])

    def test_eligible_sets_are_bit_sets_over_64_nodes(self):
        nodes = [node(f"n{i}", 1, 0, 81920) for i in range(70)]
        snap = snapshot(["NVIDIA H100"], nodes, [request("ns/p", 1, EXCLUSIVE, 0)])
        self.assertEqual(len(snap.eligible_sets[0]), 2)
        restrict(snap, 0, [66, 3])
        self.assertEqual(set_members(snap.eligible_sets[1]), [3, 66])
        self.assertTrue(in_set(snap.eligible_sets[1], 66))
        self.assertFalse(in_set(snap.eligible_sets[1], 65))
        self.assertFalse(in_set(snap.eligible_sets[1], 4000))
        nodes[3].gpus[0].held = True
        cluster = Cluster(snap)
        want = cluster.want(0)
        self.assertEqual(cluster.eligible(want), [3, 66])
        self.assertTrue(cluster.is_eligible(want, 66))
        self.assertFalse(cluster.is_eligible(want, 0))
        self.assertEqual(assigned(allocate(snap)), [(0, 66, [0])])
        # Members past the last node are dropped.
        snap.eligible_sets[1] = node_set(200, [150])
        self.assertIn("no eligible node", allocate(snap)[0].value.reason)

    def test_lower_priority_pods_are_preempted_unless_the_config_says_no(self):
        snap = snapshot(["NVIDIA H100"], [node("a", 2, 0, 81920)], [
            request("ml/urgent", 1, EXCLUSIVE, 0, priority=1000),
        ])
        running(snap, "batch/p0", 0, 0, [0])
        running(snap, "batch/p1", 0, 0, [1])
        for config in ("", '{"preemption": true}', '{"nvlink": "prefer"}', '{"nvlink": "require"}'):
            snap.config = config
            d = allocate(snap)
            self.assertIsInstance(d[0], t.Decision_Preempt, config)
            # Both are as young and as low: the first by name goes.
            self.assertEqual((d[0].value.assignment.node, d[0].value.assignment.gpus, d[0].value.victims),
                             (0, [0], [0]))
        for config in ('{"preemption": false}', '{"preemption": false, "preferNvlink": true}'):
            snap.config = config
            d = allocate(snap)
            self.assertIsInstance(d[0], t.Decision_Wait, config)
            self.assertEqual(d[0].value.reason, "no eligible node has 1 GPU(s) free right now")
        for bad in ('{"preemption": 1}', '{"preemption": null}', '{"preemption": "yes"}'):
            snap.config = bad
            with self.assertRaisesRegex(PolicyError, "`preemption` must be a bool"):
                allocate(snap)

    def test_the_config_of_the_rust_binpack_is_read(self):
        # The README's binpack config, and every key the Rust binpack knows.
        n1 = with_nvlink(node("n1", 4, 0, 81920), [(2, 3)])
        snap = snapshot(["NVIDIA H100"], [n1], [request("ns/p", 2, EXCLUSIVE, 0)])
        for config, gpus in [
            ('{"nvlink": "prefer"}', [2, 3]),
            ('{"nvlink": "prefer", "preemption": true}', [2, 3]),
            ('{"nvlink": "ignore"}', [0, 1]),
            ('{"nvlink": "require"}', [2, 3]),
            ('{"nvlink": "ignore", "preferNvlink": true}', [0, 1]),  # nvlink wins
            ('{"nvlink": null, "preferNvlink": false}', [0, 1]),
        ]:
            snap.config = config
            self.assertEqual(assigned(allocate(snap)), [(0, 0, gpus)], config)
        snap.config = '{"nvlink": "always"}'
        with self.assertRaisesRegex(PolicyError, '`nvlink` must be one of "prefer", "require", "ignore"'):
            allocate(snap)

    def test_tables_name_namespaces_tenants_and_labels(self):
        snap = snapshot(["NVIDIA H100"], [node("a", 2, 0, 81920), node("b", 2, 0, 81920)], [
            request("team-b/x", 1, EXCLUSIVE, 0),
            request("team-a/y", 1, EXCLUSIVE, 0, tenant=0),
        ], tenants=[t.Tenant(name="research", weight=1, quota=4, limit=None, holding=0, waiting=2)])
        at = running(snap, "team-c/z", 0, 1, [0])
        self.assertEqual(snap.namespaces, ["team-a", "team-b", "team-c"])
        self.assertEqual(namespace_name(snap, snap.pending[0].namespace), "team-b")
        self.assertEqual(namespace_name(snap, snap.running[at].namespace), "team-c")
        self.assertEqual(namespace_name(snap, 9), "")
        self.assertEqual(tenant_of(snap, snap.pending[1].tenant).name, "research")
        self.assertIsNone(tenant_of(snap, snap.pending[0].tenant))
        with_labels(snap, 1, {"topology.kubernetes.io/zone": "z1"})
        self.assertEqual(snap.label_keys, ["topology.kubernetes.io/zone"])
        self.assertEqual([n.labels for n in snap.nodes], [[None], ["z1"]])
        self.assertEqual(label(snap, snap.nodes[1], "topology.kubernetes.io/zone"), "z1")
        self.assertIsNone(label(snap, snap.nodes[0], "topology.kubernetes.io/zone"))
        self.assertIsNone(label(snap, snap.nodes[1], "kubernetes.io/hostname"))
        self.assertEqual(info("zoned", "0.1.0", "d", ["topology.kubernetes.io/zone"]).label_keys,
                         ["topology.kubernetes.io/zone"])

    def test_decision_builders(self):
        d = preempt(3, 1, [0, 2], [5])
        self.assertIsInstance(d, t.Decision_Preempt)
        self.assertEqual(pod_of(d), 3)
        self.assertEqual(d.value.assignment.claims, [])
        self.assertEqual(d.value.victims, [5])
        snap = snapshot(["NVIDIA H100"], [node("a", 1, 0, 81920)], [request("ns/p", 1, EXCLUSIVE, 0)])
        self.assertEqual(allocate(snap)[0].value.claims, [])


if __name__ == "__main__":
    unittest.main()
