import unittest

from binpack import allocate, describe
from wasmgpu_policy import Cluster, PolicyError, glob_match, parse_config, set_log_sink
from wasmgpu_policy.testing import assigned, decision_of, node, request, snapshot, with_full_nvlink
from wit_world.imports import types as t

EXCLUSIVE, SHARED = t.Sharing.EXCLUSIVE, t.Sharing.SHARED


class Binpack(unittest.TestCase):
    def test_describes_itself(self):
        self.assertEqual(describe().name, "binpack")

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
        n1 = node("n1", 4, 0, 81920)
        n1.gpus[2].nvlink_peers = [3]
        n1.gpus[3].nvlink_peers = [2]
        snap = snapshot(["NVIDIA H100"], [with_full_nvlink(node("n0", 8, 0, 81920)), n1], [
            request("ns/p", 2, EXCLUSIVE, 0, eligible_set=1),
        ])
        snap.eligible_sets.append([1])
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
        ], gangs=[t.Gang(name="ml/job", min_member=3, bound=0, pending=[0, 1, 2])])
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
        snap.pending[2].count = 8
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


if __name__ == "__main__":
    unittest.main()
