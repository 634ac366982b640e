"""The query API of `Cluster`: it answers for the round as it stands, after
the commits so far (the Rust SDK's cluster/query.rs, its tests and examples)."""

import unittest

from wasmgpu_policy import EXCLUSIVE, SHARED, Cluster, Fit, GpuNow, usage
from wasmgpu_policy.testing import (
    gpu,
    node,
    request,
    restrict,
    running,
    snapshot,
    with_labels,
    with_mig,
    with_nvlink,
)

ZONE = "topology.kubernetes.io/zone"
H100, A100, L4 = 0, 1, 2
MODELS = ["NVIDIA H100", "NVIDIA A100", "NVIDIA L4"]


class Queries(unittest.TestCase):
    def test_queries_follow_the_commits_of_the_round(self):
        snap = snapshot(MODELS, [
            with_labels(node("a", 4, H100, 81920), {ZONE: "z1"}),
            with_labels(node("b", 4, A100, 40960), {ZONE: "z2"}),
            node("c", 4, H100, 81920),
        ], [
            request("ns/x", 3, EXCLUSIVE, 0),
            request("ns/s", 1, SHARED, 10000),
            request("ns/h", 1, EXCLUSIVE, 0, model="NVIDIA H100*"),
        ])
        cluster = Cluster(snap)
        x, s, h = (cluster.want(i) for i in range(3))
        self.assertEqual(cluster.free_by_label(ZONE, h), {"z1": 4, "z2": 0})
        self.assertEqual(cluster.free_by_label(ZONE, x), {"z1": 4, "z2": 4})

        self.assertIsNotNone(cluster.place(0, x, Fit.TIGHTEST, True))
        self.assertEqual(cluster.free_gpus(0), [3])
        self.assertEqual(cluster.free_gpus(0, "*A100*"), [])
        self.assertEqual(cluster.free_gpus(1, "*A100*"), [0, 1, 2, 3])
        self.assertTrue(cluster.gpu_now(0, 0).held)
        self.assertFalse(cluster.gpu_now(0, 0).whole_free)
        # free_by_label after a commit: three of z1's GPUs are taken.
        self.assertEqual(cluster.free_by_label(ZONE, h), {"z1": 1, "z2": 0})

        self.assertIsNotNone(cluster.place(0, s, Fit.TIGHTEST, True))
        shared = cluster.gpu_now(0, 3)
        self.assertEqual((shared.shares, shared.free_mib), (1, 81920 - 10000))
        self.assertFalse(shared.whole_free or shared.held)
        self.assertEqual(cluster.fitting_gpus(0, s), [3], "room to share left")
        self.assertEqual(cluster.fitting_gpus(0, h), [])
        self.assertEqual(cluster.free_by_label(ZONE, h), {"z1": 0, "z2": 0})
        self.assertIsNone(cluster.label(2, ZONE))
        self.assertEqual(cluster.label(1, ZONE), "z2")
        self.assertIsNone(cluster.label(1, "kubernetes.io/hostname"))

        # Only eligible nodes count.
        restrict(snap, 2, [1, 2])
        cluster = Cluster(snap)
        self.assertEqual(cluster.free_by_label(ZONE, cluster.want(2)), {"z2": 0})
        self.assertEqual(cluster.free_by_label("no/such-key", cluster.want(2)), {})

    def test_gpu_now_after_a_shared_placement(self):
        snap = snapshot(MODELS, [node("a", 2, L4, 23034)], [request("ns/s", 1, SHARED, 8000)])
        cluster = Cluster(snap)
        want = cluster.want(0)
        self.assertEqual(cluster.gpu_now(0, 0), GpuNow(
            healthy=True, held=False, shares=0, free_mib=23034, memory_mib=23034, whole_free=True, mig_parent=None,
        ))
        cluster.place(0, want, Fit.TIGHTEST, True)
        now = cluster.gpu_now(0, 0)
        self.assertEqual((now.shares, now.free_mib, now.whole_free, now.held), (1, 23034 - 8000, False, False))
        self.assertTrue(cluster.gpu_now(0, 1).whole_free)
        self.assertEqual(cluster.free_gpus(0), [1])
        # The snapshot is not changed: a new round state starts from it.
        self.assertTrue(Cluster(snap).gpu_now(0, 0).whole_free)

    def test_free_by_label_sums_per_value_in_key_order(self):
        snap = snapshot(MODELS, [
            with_labels(node("c", 8, L4, 23034), {ZONE: "z2"}),
            with_labels(node("a", 4, L4, 23034), {ZONE: "z1"}),
            with_labels(node("b", 2, L4, 23034), {ZONE: "z1"}),
            with_labels(node("d", 1, L4, 23034), {ZONE: "Z0"}),
        ], [request("ns/p", 2, EXCLUSIVE, 0)])
        cluster = Cluster(snap)
        per_zone = cluster.free_by_label(ZONE, cluster.want(0))
        self.assertEqual(list(per_zone.items()), [("Z0", 1), ("z1", 6), ("z2", 8)])

    def test_free_gpus_by_model_glob(self):
        n = node("a", 3, H100, 81559)
        n.gpus[0].held = True
        n.gpus.append(gpu(3, L4, 23034))
        snap = snapshot(["NVIDIA H100 80GB HBM3", "unused", "NVIDIA L4"], [n], [])
        cluster = Cluster(snap)
        self.assertEqual(cluster.free_gpus(0), [1, 2, 3])
        self.assertEqual(cluster.free_gpus(0, "NVIDIA H100*"), [1, 2])
        self.assertEqual(cluster.gpu_count(0), 4)

    def test_groups_cliques_and_mig_instances(self):
        n = with_mig(with_nvlink(node("a", 4, A100, 81920), [(0, 1), (1, 2), (0, 2)]), 3, [(0, 9856)])
        snap = snapshot(MODELS, [n], [], mig_profiles=["1g.10gb"])
        cluster = Cluster(snap)
        self.assertEqual(cluster.gpu_count(0), 5)
        self.assertEqual(cluster.nvlink_groups(0), [[0, 1, 2], [3]])
        self.assertTrue(cluster.is_nvlink_clique(0, [0, 1, 2]))
        self.assertFalse(cluster.is_nvlink_clique(0, [0, 1, 3]))
        self.assertTrue(cluster.is_nvlink_clique(0, [3]))
        self.assertTrue(cluster.is_nvlink_clique(0, []))
        self.assertEqual(cluster.nvlink_clique(0, [3, 2, 1, 0], 3), [2, 1, 0])
        self.assertEqual(cluster.gpu_now(0, 4).mig_parent, 3)
        self.assertIsNone(cluster.gpu_now(0, 3).mig_parent)
        self.assertEqual(cluster.free_gpus(0), [0, 1, 2, 3])
        self.assertEqual(cluster.gpu_names(0, [0, 4]), ["a/gpu0", "a/gpu3/mig0"])
        self.assertEqual((cluster.node_count(), cluster.node_name(0)), (1, "a"))

    def test_groups_are_connected_components_not_cliques(self):
        n = with_nvlink(node("a", 5, A100, 40960), [(0, 1), (1, 2), (3, 4)])
        cluster = Cluster(snapshot(MODELS, [n], []))
        self.assertEqual(cluster.nvlink_groups(0), [[0, 1, 2], [3, 4]])
        # 0 and 2 share a group but are not peers.
        self.assertFalse(cluster.nvlink_peers(0, 0, 2))
        self.assertTrue(cluster.nvlink_peers(0, 2, 1))
        self.assertFalse(cluster.nvlink_peers(0, 1, 1))
        self.assertFalse(cluster.nvlink_peers(0, 0, 9))
        self.assertIsNone(cluster.nvlink_clique(0, [0, 1, 2], 3))
        self.assertEqual(cluster.nvlink_clique(0, [0, 1, 2], 2), [0, 1])

    def test_a_held_instance_keeps_its_parent_from_being_free(self):
        n = with_mig(node("a", 2, A100, 81920), 1, [(0, 9856), (0, 9856)])
        n.gpus[2].held = True
        snap = snapshot(MODELS, [n], [request("ns/m", 1, EXCLUSIVE, 0, mig_profile="1g.10gb")],
                        mig_profiles=["1g.10gb"])
        cluster = Cluster(snap)
        self.assertEqual(cluster.free_gpus(0), [0])
        self.assertEqual(cluster.fitting_gpus(0, cluster.want(0)), [3])
        self.assertFalse(cluster.gpu_now(0, 1).whole_free)

    def test_usage_counts_what_each_namespace_holds(self):
        n = with_mig(node("a", 4, L4, 23034), 3, [(0, 5000)])
        snap = snapshot(MODELS, [n], [], mig_profiles=["1g.5gb"])
        running(snap, "ml/train", 0, 0, [0, 1])
        running(snap, "web/infer", 0, 0, [2], shared_mib=4000)
        running(snap, "web/small", 0, 0, [4])
        running(snap, "aa/other", 0, 0, [2], shared_mib=1000)
        held = usage(snap)
        self.assertEqual([(u.namespace, u.exclusive_gpus, u.shared_mib, u.mig_instances) for u in held], [
            ("aa", 0, 1000, 0), ("ml", 2, 0, 0), ("web", 0, 4000, 1),
        ])


if __name__ == "__main__":
    unittest.main()
