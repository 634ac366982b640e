import unittest

from wasmgpu_policy import EXCLUSIVE, SHARED, PolicyError
from wasmgpu_policy.testing import (
    assigned, decision_of, node, request, restrict, snapshot, with_full_nvlink, with_labels, with_nvlink,
)
from zonespread import ZONE, allocate, describe

L4, A100 = 0, 1
MODELS = ["NVIDIA L4", "NVIDIA A100"]


def zoned(name, zone, count, model=L4, memory=24000):
    return with_labels(node(name, count, model, memory), {ZONE: zone})


class ZoneSpread(unittest.TestCase):
    def test_asks_for_the_zone_label(self):
        self.assertEqual(describe().label_keys, [ZONE])

    def test_spreads_across_zones_by_free_gpus(self):
        snap = snapshot(MODELS, [zoned("a", "z1", 2), zoned("b", "z1", 2), zoned("c", "z2", 2), node("d", 8, L4, 24000)],
                        [request(f"ns/p{i}", 1, EXCLUSIVE, 0) for i in range(5)])
        # z1 (4 free) first, a then b; then z1 and z2 tie (2 each): z1 by name;
        # then z2. Node d has no zone label: never used.
        got = assigned(allocate(snap))
        self.assertEqual(got, [(0, 0, [0]), (1, 1, [0]), (2, 0, [1]), (3, 2, [0]), (4, 1, [1])])

    def test_multi_gpu_pods_get_nvlink_peers_or_wait(self):
        ring = with_nvlink(node("ring", 4, A100, 40960), [(0, 1), (1, 2), (2, 3), (3, 0)])
        hgx = with_full_nvlink(node("hgx", 4, A100, 40960))
        snap = snapshot(MODELS, [with_labels(ring, {ZONE: "z1"}), with_labels(hgx, {ZONE: "z2"})], [
            request("ns/three", 3, EXCLUSIVE, 0),
            request("ns/ring-only", 3, EXCLUSIVE, 0),
        ])
        restrict(snap, 1, [0])
        d = allocate(snap)
        # ring-only (first by name) can never have three mutual peers; for
        # three, z1 and z2 tie, and z1's ring has none, z2's node has.
        self.assertEqual(decision_of(d, 1).value.reason,
                         "no eligible node has 3 GPU(s) that are all NVLink peers of one another, even when idle")
        self.assertEqual(assigned(d), [(0, 1, [0, 1, 2])])
        # With "prefer", the ring's one NVLink group will do.
        snap.config = '{"nvlink": "prefer"}'
        self.assertEqual(assigned(allocate(snap)), [(1, 0, [0, 1, 2]), (0, 1, [0, 1, 2])])

    def test_shared_pods_leave_the_floor_free(self):
        snap = snapshot(MODELS, [zoned("a", "z1", 1), zoned("b", "z2", 1)],
                        [request(f"ns/s{i}", 1, SHARED, 8000) for i in range(3)])
        snap.config = '{"minFreeMiB": 10000}'
        d = allocate(snap)
        self.assertEqual(assigned(d), [(0, 0, [0]), (1, 1, [0])])
        self.assertEqual(decision_of(d, 2).value.reason, (
            "no eligible node has 1 GPU(s) with 8000 MiB to share, leaving 10000 MiB free on each, right now "
            "(minFreeMiB)"))
        # No floor: a's GPU fits each in turn (zones tie at one GPU each).
        snap.config = ""
        self.assertEqual(assigned(allocate(snap)), [(0, 0, [0]), (1, 0, [0]), (2, 0, [0])])

    def test_a_bad_config_fails_the_round_naming_the_field(self):
        snap = snapshot(MODELS, [], [])
        for config, expected in [
            ('{"minFree": 1}', "unknown field `minFree`, expected one of `nvlink`, `minFreeMiB`"),
            ('{"minFreeMiB": -1}', "`minFreeMiB` must be an integer of at least 0, got -1"),
            ('{"nvlink": "always"}', '`nvlink` must be one of "prefer", "require", "ignore"'),
        ]:
            snap.config = config
            with self.assertRaisesRegex(PolicyError, expected):
                allocate(snap)


if __name__ == "__main__":
    unittest.main()
