"""NVLink modes, groups and cliques (the Rust SDK's nvlink.rs and the NVLink
tests of cluster.rs, with the same expectations)."""

import unittest

from wasmgpu_policy import (
    EXCLUSIVE,
    SHARED,
    Cluster,
    Fit,
    Nvlink,
    PlacementParams,
    PolicyError,
    nvlink_clique,
    nvlink_linked,
    place_each,
    reason,
)
from wasmgpu_policy.testing import (
    assigned,
    conflicts,
    decision_for,
    gang,
    large,
    node,
    request,
    restrict,
    snapshot,
    with_full_nvlink,
    with_nvlink,
)
from wit_world.imports import types as t

A100 = 0
MODELS = ["NVIDIA A100"]
RING = [(0, 1), (1, 2), (2, 3), (3, 0)]


def nvlink_nodes():
    """ring: 4 GPUs linked 0-1-2-3-0 (one group, no three mutual peers);
    pairs: 4 GPUs in two NVLink pairs (0-1, 2-3); hgx: 8 GPUs all linked."""
    return [
        with_nvlink(node("ring", 4, A100, 40960), RING),
        with_nvlink(node("pairs", 4, A100, 40960), [(0, 1), (2, 3)]),
        with_full_nvlink(node("hgx", 8, A100, 40960)),
    ]


class Cliques(unittest.TestCase):
    def test_cliques_need_every_pair_linked(self):
        # A ring 0-1-2-3-0 plus the chord 0-2: {0, 1, 2} and {0, 2, 3} are
        # triangles, no four are all peers.
        ring = with_nvlink(node("r", 4, A100, 40960), RING + [(0, 2)])
        every = [0, 1, 2, 3]
        self.assertEqual(nvlink_clique(ring, every, 2), [0, 1])
        self.assertEqual(nvlink_clique(ring, every, 3), [0, 1, 2])
        self.assertIsNone(nvlink_clique(ring, [1, 2, 3], 3), "1 and 3 are not linked")
        self.assertEqual(nvlink_clique(ring, [3, 2, 0], 3), [3, 2, 0])
        self.assertIsNone(nvlink_clique(ring, every, 4))
        self.assertEqual(nvlink_clique(ring, every, 1), [0])
        self.assertEqual(nvlink_clique(ring, every, 0), [])
        self.assertIsNone(nvlink_clique(ring, [], 1))
        # A link listed on one end only still joins both.
        one_sided = node("o", 2, A100, 40960)
        one_sided.gpus[1].nvlink |= 1
        self.assertTrue(nvlink_linked(one_sided, 0, 1) and nvlink_linked(one_sided, 1, 0))
        self.assertFalse(nvlink_linked(one_sided, 0, 0))

    def test_a_bool_is_prefer_or_ignore_and_config_spells_lower_case(self):
        self.assertIs(Nvlink.of(True), Nvlink.PREFER)
        self.assertIs(Nvlink.of(False), Nvlink.IGNORE)
        self.assertIs(Nvlink.of("require"), Nvlink.REQUIRE)
        self.assertIs(Nvlink.of(Nvlink.IGNORE), Nvlink.IGNORE)
        with self.assertRaises(ValueError):
            Nvlink.of("Required")
        with self.assertRaises(TypeError):
            Nvlink.of(1)

    def test_placement_params_read_nvlink_and_the_older_bool(self):
        def read(config):
            return PlacementParams.parse(config).nvlink_mode()

        self.assertIs(read(""), Nvlink.PREFER)
        self.assertIs(read('{"preferNvlink": false}'), Nvlink.IGNORE)
        self.assertIs(read('{"nvlink": "require"}'), Nvlink.REQUIRE)
        self.assertIs(read('{"nvlink": "ignore", "preferNvlink": true}'), Nvlink.IGNORE)
        self.assertEqual(PlacementParams.parse(""), PlacementParams(True, None, True))
        with self.assertRaisesRegex(PolicyError, "require"):
            PlacementParams.parse('{"nvlink": "always"}')
        with self.assertRaisesRegex(PolicyError, "unknown field `nvLink`.*`preferNvlink`, `nvlink`, `preemption`"):
            PlacementParams.parse('{"nvLink": "require"}')


class Modes(unittest.TestCase):
    def test_a_ring_has_one_group_but_require_refuses_three_of_it(self):
        ring = with_nvlink(node("a", 4, A100, 40960), RING)
        snap = snapshot(MODELS, [ring], [request("ns/p", 3, EXCLUSIVE, 0)])
        cluster = Cluster(snap)
        want = cluster.want(0)
        self.assertEqual(cluster.nvlink_groups(0), [[0, 1, 2, 3]])
        self.assertEqual(cluster.pick_gpus(0, want, Fit.TIGHTEST, Nvlink.PREFER), [0, 1, 2])
        self.assertEqual(cluster.pick_gpus(0, want, Fit.TIGHTEST, True), [0, 1, 2])
        self.assertFalse(cluster.is_nvlink_clique(0, [0, 1, 2]))
        self.assertIsNone(cluster.pick_gpus(0, want, Fit.TIGHTEST, Nvlink.REQUIRE))
        self.assertIsNone(cluster.pick_gpus(0, want, Fit.LOOSEST, Nvlink.REQUIRE))
        self.assertEqual(cluster.pick_gpus(0, want, Fit.TIGHTEST, Nvlink.IGNORE), [0, 1, 2])
        self.assertEqual(cluster.choose_node_with(want, Fit.TIGHTEST, Nvlink.REQUIRE), -1)
        self.assertEqual(cluster.choose_node(want, Fit.TIGHTEST, Nvlink.REQUIRE), -1)
        self.assertEqual(cluster.choose_node(want, Fit.TIGHTEST), 0)
        why = "no eligible node has 3 GPU(s) that are all NVLink peers of one another, even when idle"
        self.assertEqual(cluster.shortfall_with(want, Nvlink.REQUIRE).reason(), why)
        self.assertTrue(cluster.shortfall_with(want, Nvlink.REQUIRE).permanent)
        self.assertEqual(cluster.unplaced_with(want, Nvlink.REQUIRE), t.Decision_Reject(t.Deferral(0, why)))
        self.assertEqual(cluster.unplaced(want, Nvlink.REQUIRE).value.reason, why)
        self.assertEqual(why, reason.never(reason.asked_nvlink(snap.pending[0])))
        # Two of the ring are peers: REQUIRE takes them.
        two = snapshot(MODELS, [ring], [request("ns/p", 2, EXCLUSIVE, 0)])
        cluster = Cluster(two)
        self.assertEqual(cluster.pick_gpus(0, cluster.want(0), Fit.TIGHTEST, Nvlink.REQUIRE), [0, 1])

    def test_require_takes_mutual_peers_or_nothing(self):
        snap = snapshot(MODELS, nvlink_nodes(), [request("ns/p", 3, EXCLUSIVE, 0)])
        cluster = Cluster(snap)
        want = cluster.want(0)
        # The ring is the tightest node with 3 free GPUs, and PREFER takes it
        # (one group), though GPUs 0 and 2 are not peers.
        self.assertEqual(cluster.choose_node(want, Fit.TIGHTEST), 0)
        self.assertEqual(cluster.pick_gpus(0, want, Fit.TIGHTEST, Nvlink.PREFER), [0, 1, 2])
        # REQUIRE skips the ring and the pairs: only the HGX node has three mutual peers.
        self.assertIsNone(cluster.pick_gpus(0, want, Fit.TIGHTEST, Nvlink.REQUIRE))
        self.assertIsNone(cluster.pick_gpus(1, want, Fit.TIGHTEST, Nvlink.REQUIRE))
        self.assertEqual(cluster.choose_node_with(want, Fit.TIGHTEST, Nvlink.REQUIRE), 2)
        picked = cluster.pick_gpus(2, want, Fit.TIGHTEST, Nvlink.REQUIRE)
        self.assertEqual(picked, [0, 1, 2])
        self.assertTrue(cluster.is_nvlink_clique(2, picked))
        # PREFER and IGNORE leave the choice of node alone.
        for mode in (Nvlink.PREFER, Nvlink.IGNORE, True, False):
            self.assertEqual(cluster.choose_node_with(want, Fit.TIGHTEST, mode), 0)

    def test_require_waits_or_rejects_saying_nvlink_is_required(self):
        # The HGX node busy: three mutual peers exist only once it is idle.
        nodes = nvlink_nodes()
        for g in nodes[2].gpus[:6]:
            g.held = True
        snap = snapshot(MODELS, nodes, [
            request("ns/three", 3, EXCLUSIVE, 0),
            request("ns/two", 2, EXCLUSIVE, 0),
            request("ns/nine", 9, EXCLUSIVE, 0),
            request("ns/ring", 3, EXCLUSIVE, 0),
        ])
        restrict(snap, 3, [0, 1])  # `ring` may use the ring and the pairs only
        snap.config = '{"nvlink": "require"}'
        decisions = place_each(snap, Fit.TIGHTEST)
        self.assertEqual(decision_for(snap, decisions, "ns/three"), t.Decision_Wait(t.Deferral(0, (
            "no eligible node has 3 GPU(s) that are all NVLink peers of one another free right now"))))
        # `two` takes a pair of peers on the tightest node (the HGX node's last two).
        self.assertEqual(assigned(decisions), [(1, 2, [6, 7])])
        self.assertEqual(decision_for(snap, decisions, "ns/nine"), t.Decision_Reject(t.Deferral(2, (
            "no eligible node has 9 GPU(s), even when idle"))))
        self.assertEqual(decision_for(snap, decisions, "ns/ring"), t.Decision_Reject(t.Deferral(3, (
            "no eligible node has 3 GPU(s) that are all NVLink peers of one another, even when idle"))))
        self.assertEqual(conflicts(snap, decisions), [])
        # With PREFER, `ring` takes three GPUs of the ring (one group).
        snap.config = '{"preferNvlink": true}'
        decisions = place_each(snap, Fit.TIGHTEST)
        self.assertEqual(decision_for(snap, decisions, "ns/ring"), t.Decision_Assign(t.Assignment(3, 0, [0, 1, 2], [])))

    def test_require_orders_groups_as_prefer_does(self):
        # A bridged pair (0-1) and a 4-clique (2-5): the tightest group first,
        # or the largest.
        n = with_nvlink(node("a", 6, A100, 40960), [(0, 1), (2, 3), (2, 4), (2, 5), (3, 4), (3, 5), (4, 5)])
        snap = snapshot(MODELS, [n], [request("ns/p", 2, EXCLUSIVE, 0)])
        cluster = Cluster(snap)
        want = cluster.want(0)
        for mode in (Nvlink.PREFER, Nvlink.REQUIRE):
            self.assertEqual(cluster.pick_gpus(0, want, Fit.TIGHTEST, mode), [0, 1])
            self.assertEqual(cluster.pick_gpus(0, want, Fit.LOOSEST, mode), [2, 3])
        # Shared, MIG and one-GPU requests are not affected.
        snap = snapshot(MODELS, [n], [request("ns/s", 2, SHARED, 1000), request("ns/one", 1, EXCLUSIVE, 0)])
        cluster = Cluster(snap)
        for pod in (0, 1):
            want = cluster.want(pod)
            self.assertFalse(want.uses_nvlink(Nvlink.REQUIRE))
            self.assertEqual(cluster.pick_gpus(0, want, Fit.TIGHTEST, Nvlink.REQUIRE),
                             cluster.pick_gpus(0, want, Fit.TIGHTEST, Nvlink.IGNORE))

    def test_a_gang_under_require_names_the_member_that_needs_peers(self):
        snap = snapshot(MODELS, [with_nvlink(node("ring", 4, A100, 40960), RING)], [
            request("ns/w-0", 1, EXCLUSIVE, 0),
            request("ns/w-1", 3, EXCLUSIVE, 0),
        ])
        gang(snap, "ns/train", 2, [0, 1])
        snap.config = '{"nvlink": "require"}'
        decisions = place_each(snap, Fit.TIGHTEST)
        why = ("gang ns/train can never be placed: member ns/w-1 fits nowhere (no eligible node has 3 GPU(s) "
               "that are all NVLink peers of one another, even when idle)")
        self.assertEqual(decisions, [t.Decision_Reject(t.Deferral(0, why)), t.Decision_Reject(t.Deferral(1, why))])
        snap.config = ""
        self.assertEqual(assigned(place_each(snap, Fit.TIGHTEST)), [(0, 0, [0]), (1, 0, [1, 2, 3])])

    def test_require_holds_for_every_assignment_of_a_large_round(self):
        for fit in (Fit.TIGHTEST, Fit.LOOSEST):
            snap = large(60, 200)
            # Break the full NVLink of some H100 nodes into rings.
            for n, nd in enumerate(snap.nodes):
                if n % 4 == 0:
                    for i, g in enumerate(nd.gpus):
                        g.nvlink = 1 << ((i + 7) % 8) | 1 << ((i + 1) % 8)
            gang_snap = large(60, 200)
            gang_snap.nodes = snap.nodes
            gang(gang_snap, "team-0/gang", 2, [3, 4])
            for s in (snap, gang_snap):
                s.config = '{"nvlink": "require"}'
                decisions = place_each(s, fit)
                cluster = Cluster(s)
                multi = 0
                for d in decisions:
                    if isinstance(d, t.Decision_Assign) and len(d.value.gpus) > 1:
                        if s.pending[d.value.pod].ask.value.sharing == t.Sharing.EXCLUSIVE:
                            self.assertTrue(cluster.is_nvlink_clique(d.value.node, d.value.gpus), (fit, d))
                            multi += 1
                self.assertGreater(multi, 10)
                self.assertEqual(conflicts(s, decisions), [])
                self.assertEqual(len(decisions), len(s.pending))

    def test_choose_node_with_require_agrees_with_a_full_scan(self):
        # The Rust SDK scans every eligible node for REQUIRE; the bucket walk
        # must choose the same node, request after request, as commits change
        # the round.
        for fit in (Fit.TIGHTEST, Fit.LOOSEST):
            snap = large(90, 300)
            for n, nd in enumerate(snap.nodes):
                if n % 4 == 0:
                    for i, g in enumerate(nd.gpus):
                        g.nvlink = 1 << ((i + 7) % 8) | 1 << ((i + 1) % 8)
            snap.nodes[1].gpus[0].memory_mib = 16384  # a node of mixed GPUs: scanned
            cluster = Cluster(snap)
            checked = 0
            for pod in cluster.pending_in_order():
                want = cluster.want(pod)
                expected, best_room = -1, 0
                for n in cluster.eligible(want):
                    if not cluster.fits(n, want) or cluster.pick_gpus(n, want, fit, Nvlink.REQUIRE) is None:
                        continue
                    room = cluster.headroom(n, want)
                    if expected < 0 or (room < best_room if fit == Fit.TIGHTEST else room > best_room):
                        expected, best_room = n, room
                if want.uses_nvlink(Nvlink.REQUIRE):
                    self.assertEqual(cluster.choose_node_with(want, fit, Nvlink.REQUIRE), expected, (fit, pod))
                    checked += 1
                chosen = cluster.choose_node_with(want, fit, Nvlink.REQUIRE)
                if chosen >= 0:
                    self.assertIsNotNone(cluster.place(chosen, want, fit, Nvlink.REQUIRE))
            self.assertGreater(checked, 100)


if __name__ == "__main__":
    unittest.main()
