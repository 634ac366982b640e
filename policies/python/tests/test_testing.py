"""The snapshot builders of `wasmgpu_policy.testing` and the SDK's exports."""

import unittest

import wasmgpu_policy
from wasmgpu_policy import EXCLUSIVE, LOOSEST, MIG, SHARED, TIGHTEST, Cluster, Fit, place_each
from wasmgpu_policy.testing import (
    LARGE_MODELS,
    assigned,
    conflicts,
    decision_for,
    decision_of,
    gang,
    large,
    namespace_of,
    node,
    request,
    running,
    running_on_each_gpu,
    shape,
    snapshot,
    tenant,
    with_labels,
    with_mig,
)
from wit_world.imports import types as t

ZONE = "topology.kubernetes.io/zone"


class Exports(unittest.TestCase):
    def test_kinds_and_fits_are_exported(self):
        self.assertIs(EXCLUSIVE, t.Sharing.EXCLUSIVE)
        self.assertIs(SHARED, t.Sharing.SHARED)
        self.assertEqual((TIGHTEST, LOOSEST), (Fit.TIGHTEST, Fit.LOOSEST))
        snap = snapshot(["NVIDIA A100"], [with_mig(node("a", 1, 0, 81920), 0, [(0, 9856)])], [
            request("ns/x", 1, EXCLUSIVE, 0),
            request("ns/s", 1, SHARED, 100),
            request("ns/m", 1, EXCLUSIVE, 0, mig_profile="1g.10gb"),
        ], mig_profiles=["1g.10gb"])
        cluster = Cluster(snap)
        self.assertEqual([cluster.want(i).kind for i in range(3)], [EXCLUSIVE, SHARED, MIG])
        self.assertEqual([cluster.want(i).is_mig() for i in range(3)], [False, False, True])
        for name in wasmgpu_policy.__all__:
            self.assertTrue(hasattr(wasmgpu_policy, name), name)


class Builders(unittest.TestCase):
    def test_labels_on_a_node_before_the_snapshot_as_in_rust(self):
        snap = snapshot([], [
            with_labels(node("a", 1, 0, 1), {ZONE: "z1"}),
            node("b", 1, 0, 1),
            with_labels(node("c", 1, 0, 1), [("rack", "r1"), (ZONE, "z2")]),
        ], [])
        self.assertEqual(snap.label_keys, [ZONE, "rack"])
        self.assertEqual([n.labels for n in snap.nodes], [["z1", None], [None, None], ["z2", "r1"]])
        with_labels(snap, 1, {ZONE: "z3"})
        self.assertEqual(snap.nodes[1].labels, ["z3", None])
        running(snap, "ns/p", 0, 0, [0])  # refresh_tables keeps them
        self.assertEqual([n.labels[0] for n in snap.nodes], ["z1", "z3", "z2"])

    def test_running_tenants_and_lookups(self):
        snap = snapshot(["NVIDIA H100"], [node("n", 4, 0, 81920)], [
            request("ml/a", 2, EXCLUSIVE, 0),
            request("web/b", 1, SHARED, 4000),
        ])
        running_on_each_gpu(snap, 0, "batch/p", 7)
        self.assertEqual([(r.pod, r.priority, r.gpus, r.started_ms) for r in snap.running],
                         [(f"batch/p{g}", 7, [g], g) for g in range(4)])
        self.assertTrue(all(g.held for g in snap.nodes[0].gpus))
        self.assertEqual(snap.namespaces, ["batch", "ml", "web"])
        self.assertEqual(namespace_of(snap, snap.pending[1]), "web")
        self.assertEqual(namespace_of(snap, snap.running[0]), "batch")
        at = tenant(snap, "ml", limit=8, members=[0])
        self.assertEqual((at, snap.pending[0].tenant, snap.tenants[0].limit), (0, 0, 8))
        shape(snap.pending[0]).count = 3
        self.assertEqual(snap.pending[0].ask.value.count, 3)
        gang(snap, "ml/g", 1, [0])
        decisions = place_each(snap, Fit.TIGHTEST)
        self.assertIs(decision_for(snap, decisions, "web/b"), decision_of(decisions, 1))
        self.assertIsNone(decision_for(snap, decisions, "no/such"))

    def test_conflicts_catch_a_gpu_given_twice(self):
        snap = snapshot(["NVIDIA H100"], [node("n", 2, 0, 81920)], [
            request("ns/a", 1, EXCLUSIVE, 0), request("ns/b", 1, EXCLUSIVE, 0),
        ])
        ok = [t.Decision_Assign(t.Assignment(0, 0, [0], [])), t.Decision_Assign(t.Assignment(1, 0, [1], []))]
        self.assertEqual(conflicts(snap, ok), [])
        twice = [t.Decision_Assign(t.Assignment(0, 0, [0], [])), t.Decision_Assign(t.Assignment(1, 0, [0], []))]
        self.assertEqual(conflicts(snap, twice), ["pod ns/b: GPU 0 of node 0 is given twice"])
        self.assertEqual(conflicts(snap, [t.Decision_Assign(t.Assignment(0, 0, [0, 1], []))]),
                         ["pod ns/a: [0, 1] is not 1 distinct GPUs"])

    def test_large_is_deterministic_and_shaped_as_the_rust_builder(self):
        snap = large(30, 100)
        self.assertEqual(snap.models, LARGE_MODELS)
        self.assertEqual(len(snap.nodes), 30)
        self.assertEqual([len(n.gpus) for n in snap.nodes], [8] * 30)
        self.assertEqual(snap.nodes[0].name, "gpu-node-0000")
        self.assertEqual(snap.label_keys, ["kubernetes.io/hostname", ZONE])
        self.assertEqual(snap.nodes[4].labels, ["gpu-node-0004", "zone-1"])
        self.assertEqual(snap.nodes[0].gpus[3].nvlink, 0xFF & ~(1 << 3))
        self.assertEqual(snap.nodes[1].gpus[3].nvlink, 1 << 2)
        self.assertEqual(len(snap.eligible_sets), 4)
        self.assertEqual(snap.pending[20].eligible_set, 3)
        self.assertEqual(snap.pending[7].pod, "team-0/job-00007")
        self.assertEqual(snap.pending[7].created_ms, 1_700_000_000_070)
        self.assertEqual(repr(large(30, 100)), repr(snap))
        used = sum(g.held or g.shared_owners > 0 for n in snap.nodes for g in n.gpus)
        self.assertTrue(40 < used < 80, used)  # about a quarter of 240

    def test_the_host_would_accept_a_large_round_under_each_nvlink_mode(self):
        # The Rust builders' assert_host_accepts_a_large_round, by `conflicts`.
        snap = large(120, 400)
        gang(snap, "team-1/train", 3, [1, 8, 15])
        for config in ("", '{"nvlink": "require"}', '{"nvlink": "ignore"}'):
            snap.config = config
            decisions = place_each(snap, Fit.TIGHTEST)
            self.assertEqual(conflicts(snap, decisions), [], config)
            self.assertGreater(len(assigned(decisions)), 100, config)
            self.assertEqual(sorted(d.value.pod if not isinstance(d, t.Decision_Preempt) else -1 for d in decisions),
                             list(range(400)))


if __name__ == "__main__":
    unittest.main()
