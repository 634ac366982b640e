// NVLink modes: prefer (groups, fall back), require (cliques or nothing),
// ignore; as the Rust SDK's cluster.rs and nvlink.rs tests.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { allocate } from '../binpack/binpack.js';
import { Cluster, Fit, Nvlink, nvlinkMode, placeEach, reason } from '../sdk/index.js';
import { clique, linkMatrix } from '../sdk/nvlink.js';
import { decisionFor, large, node, nvlinkOf, request, restrict, snapshot, withFullNvlink, withNvlink } from '../sdk/testing.js';

const RING = [[0, 1], [1, 2], [2, 3], [3, 0]];

/** Node "ring": 0-1-2-3-0; node "pairs": 0-1 and 2-3; node "hgx": 8 GPUs all linked. */
function nvlinkNodes() {
  return [
    withNvlink(node('ring', 4, 'NVIDIA A100', 40960), RING),
    withNvlink(node('pairs', 4, 'NVIDIA A100', 40960), [[0, 1], [2, 3]]),
    withFullNvlink(node('hgx', 8, 'NVIDIA A100', 40960)),
  ];
}

test('the modes: constants, booleans and names', () => {
  assert.ok(Object.isFrozen(Nvlink));
  assert.deepEqual([Nvlink.Prefer, Nvlink.Require, Nvlink.Ignore], ['prefer', 'require', 'ignore']);
  assert.deepEqual([Nvlink.PREFER, Nvlink.REQUIRE, Nvlink.IGNORE], ['prefer', 'require', 'ignore']);
  assert.equal(nvlinkMode(true), 'prefer');
  assert.equal(nvlinkMode(false), 'ignore');
  assert.equal(nvlinkMode(undefined), 'prefer');
  assert.equal(nvlinkMode('require'), 'require');
  assert.throws(() => nvlinkMode('Required'), /unknown NVLink mode "Required"/);
});

test('a ring 0-1-2-3: prefer takes {0, 1, 2}, require refuses it', () => {
  const snap = snapshot([withNvlink(node('a', 4, 'NVIDIA A100', 40960), RING)], [request('ns/p', 3, 'exclusive', 0)]);
  const cluster = new Cluster(snap);
  const want = cluster.want(0);
  assert.deepEqual(cluster.pickGpus(0, want, Fit.Tightest, Nvlink.Prefer), [0, 1, 2]);
  assert.deepEqual(cluster.pickGpus(0, want, Fit.Tightest, true), [0, 1, 2]);
  assert.equal(cluster.pickGpus(0, want, Fit.Tightest, Nvlink.Require), null);
  assert.ok(!cluster.isNvlinkClique(0, [0, 1, 2]));
  assert.equal(cluster.place(0, want, Fit.Tightest, Nvlink.Require), null);
  assert.equal(cluster.freeWhole(0), 4, 'nothing committed');
  assert.equal(cluster.chooseNodeWith(want, Fit.Tightest, Nvlink.Require), -1);
  // Two of the ring are peers: require takes the first pair.
  const two = new Cluster(snapshot([withNvlink(node('a', 4, 'NVIDIA A100', 40960), RING)], [request('ns/q', 2, 'exclusive', 0)]));
  assert.deepEqual(two.pickGpus(0, two.want(0), Fit.Tightest, Nvlink.Require), [0, 1]);
});

test('require takes mutual peers or nothing; prefer and ignore leave the node choice alone', () => {
  const snap = snapshot(nvlinkNodes(), [request('ns/p', 3, 'exclusive', 0)]);
  const cluster = new Cluster(snap);
  const want = cluster.want(0);
  assert.equal(cluster.chooseNode(want, Fit.Tightest), 0);
  assert.deepEqual(cluster.pickGpus(0, want, Fit.Tightest, Nvlink.Prefer), [0, 1, 2]);
  assert.equal(cluster.pickGpus(0, want, Fit.Tightest, Nvlink.Require), null);
  assert.equal(cluster.pickGpus(1, want, Fit.Tightest, Nvlink.Require), null);
  assert.equal(cluster.chooseNodeWith(want, Fit.Tightest, Nvlink.Require), 2);
  assert.equal(cluster.chooseNode(want, Fit.Tightest, Nvlink.Require), 2, 'chooseNode takes the mode too');
  const picked = cluster.pickGpus(2, want, Fit.Tightest, Nvlink.Require);
  assert.ok(cluster.isNvlinkClique(2, picked), String(picked));
  for (const mode of [Nvlink.Prefer, Nvlink.Ignore, true, false]) {
    assert.equal(cluster.chooseNodeWith(want, Fit.Tightest, mode), 0);
  }
});

test('require waits or rejects saying NVLink is required (the Rust reasons, byte for byte)', () => {
  const nodes = nvlinkNodes();
  for (const g of nodes[2].gpus.slice(0, 6)) g.held = true;
  const snap = snapshot(nodes, [
    request('ns/three', 3, 'exclusive', 0),
    request('ns/two', 2, 'exclusive', 0),
    request('ns/nine', 9, 'exclusive', 0),
    request('ns/ring', 3, 'exclusive', 0),
  ]);
  restrict(snap, 3, [0, 1]);
  snap.config = '{"nvlink": "require"}';
  const decisions = placeEach(snap, Fit.Tightest);
  const of = (pod) => decisionFor(snap, decisions, pod);
  assert.deepEqual(of('ns/three'), {
    tag: 'wait',
    val: { pod: 0, reason: 'no eligible node has 3 GPU(s) that are all NVLink peers of one another free right now' },
  });
  assert.equal(of('ns/two').tag, 'assign');
  assert.equal(decisions.filter((d) => d.tag === 'assign').length, 1);
  assert.equal(of('ns/nine').tag, 'reject');
  assert.equal(of('ns/nine').val.reason, 'no eligible node has 9 GPU(s), even when idle');
  assert.deepEqual(of('ns/ring'), {
    tag: 'reject',
    val: { pod: 3, reason: 'no eligible node has 3 GPU(s) that are all NVLink peers of one another, even when idle' },
  });
  assert.equal(
    reason.never(reason.askedNvlink(snap.pending[3])),
    'no eligible node has 3 GPU(s) that are all NVLink peers of one another, even when idle',
  );
  // The Cluster methods say the same.
  const cluster = new Cluster(snap);
  const ring = cluster.want(3);
  assert.equal(cluster.shortfallWith(ring, Nvlink.Require).kind, 'never');
  assert.equal(cluster.shortfall(ring).kind, 'not-now', 'without require it could wait');
  assert.equal(cluster.unplacedWith(ring, Nvlink.Require).tag, 'reject');
  assert.equal(cluster.unplaced(ring, Nvlink.Require).tag, 'reject');
  assert.equal(cluster.unplaced(ring).tag, 'wait');
  // With prefer, `ring` takes three GPUs of the ring (one group).
  snap.config = '{"preferNvlink": true}';
  const preferred = placeEach(snap, Fit.Tightest);
  assert.deepEqual(decisionFor(snap, preferred, 'ns/ring').val.gpus, Uint32Array.of(0, 1, 2));
  assert.equal(decisionFor(snap, preferred, 'ns/ring').val.node, 0);
});

test('prefer takes the tightest group (largest for loosest) and falls back; ignore takes the first GPUs', () => {
  // Pairs 0-1 and 2-3, a triangle 4-5-6, GPU 7 alone; GPU 0 held.
  const n = withNvlink(node('a', 8, 'NVIDIA H100', 81920), [[0, 1], [2, 3], [4, 5], [5, 6], [4, 6]]);
  n.gpus[0].held = true;
  const snap = snapshot([n], [request('ns/p', 2, 'exclusive', 0), request('ns/q', 4, 'exclusive', 0)]);
  const cluster = new Cluster(snap);
  const [p, q] = [cluster.want(0), cluster.want(1)];
  assert.deepEqual(cluster.pickGpus(0, p, Fit.Tightest, Nvlink.Prefer), [2, 3]);
  assert.deepEqual(cluster.pickGpus(0, p, Fit.Loosest, Nvlink.Prefer), [4, 5]);
  assert.deepEqual(cluster.pickGpus(0, p, Fit.Tightest, Nvlink.Ignore), [1, 2]);
  assert.deepEqual(cluster.pickGpus(0, p, Fit.Tightest, false), [1, 2]);
  // No group holds four: prefer falls back to the first free GPUs; require finds no clique.
  assert.deepEqual(cluster.pickGpus(0, q, Fit.Tightest, Nvlink.Prefer), [1, 2, 3, 4]);
  assert.equal(cluster.pickGpus(0, q, Fit.Tightest, Nvlink.Require), null);
  // Require picks inside the tightest group that has a clique.
  const three = new Cluster(snapshot([n], [request('ns/r', 3, 'exclusive', 0)]));
  assert.deepEqual(three.pickGpus(0, three.want(0), Fit.Tightest, Nvlink.Require), [4, 5, 6]);
  // Shared and single-GPU requests are not affected.
  const one = new Cluster(snapshot([n], [request('ns/o', 1, 'exclusive', 0), request('ns/s', 2, 'shared', 1000)]));
  for (const mode of [Nvlink.Prefer, Nvlink.Require, Nvlink.Ignore]) {
    assert.deepEqual(one.pickGpus(0, one.want(0), Fit.Tightest, mode), [1]);
    assert.deepEqual(one.pickGpus(0, one.want(1), Fit.Tightest, mode), [1, 2]);
    assert.ok(!one.want(0).usesNvlink(mode) && !one.want(1).usesNvlink(mode));
  }
  assert.ok(p.usesNvlink(Nvlink.Require) && p.usesNvlink(true) && !p.usesNvlink(false));
});

test('cliques need every pair linked (ring with a chord)', () => {
  const ring = withNvlink(node('r', 4, 'NVIDIA A100', 40960), [[0, 1], [1, 2], [2, 3], [3, 0], [0, 2]]);
  const rows = linkMatrix(ring.gpus);
  const all = [0, 1, 2, 3];
  assert.deepEqual(clique(rows, all, 2), [0, 1]);
  assert.deepEqual(clique(rows, all, 3), [0, 1, 2]);
  assert.equal(clique(rows, [1, 2, 3], 3), null, '1 and 3 are not linked');
  assert.deepEqual(clique(rows, [3, 2, 0], 3), [3, 2, 0]);
  assert.equal(clique(rows, all, 4), null);
  assert.deepEqual(clique(rows, all, 1), [0]);
  assert.deepEqual(clique(rows, all, 0), []);
  assert.equal(clique(rows, [], 1), null);
  // Links name GPU indices: an index past 63 links nothing.
  const far = node('f', 2, 'NVIDIA A100', 40960);
  far.gpus[1].index = 70;
  far.gpus[0].nvlink = nvlinkOf([70]);
  assert.equal(linkMatrix(far.gpus)[0][1], 0);
});

test('require holds for every multi-GPU assignment of a large round, gangs included', () => {
  for (const fit of [Fit.Tightest, Fit.Loosest]) {
    const snap = large(60, 200);
    // Break the full NVLink of some H100 nodes into rings.
    snap.nodes.forEach((n, i) => {
      if (i % 4 === 0) n.gpus.forEach((g, j) => (g.nvlink = nvlinkOf([(j + 7) % 8, (j + 1) % 8])));
    });
    snap.config = '{"nvlink": "require"}';
    const decisions = placeEach(snap, fit);
    const cluster = new Cluster(snap);
    let multi = 0;
    for (const d of decisions) {
      const r = snap.pending[d.tag === 'assign' ? d.val.pod : -1];
      if (d.tag === 'assign' && d.val.gpus.length > 1 && r.ask.val.sharing === 'exclusive') {
        assert.ok(cluster.isNvlinkClique(d.val.node, [...d.val.gpus]), `${fit} ${JSON.stringify([...d.val.gpus])}`);
        multi++;
      }
    }
    assert.ok(multi > 10, `${multi} multi-GPU assignments`);
    assert.equal(new Set(decisions.map((d) => d.val.pod ?? d.val.assignment.pod)).size, decisions.length);
  }
});

test('binpack reads the README config {"nvlink": "prefer"} and the other modes', () => {
  const snap = snapshot(nvlinkNodes(), [request('ns/p', 3, 'exclusive', 0)]);
  const nodeOf = (config) => {
    snap.config = config;
    const d = allocate(snap)[0];
    return d.tag === 'assign' ? [d.val.node, [...d.val.gpus]] : d.tag;
  };
  assert.deepEqual(nodeOf('{"nvlink": "prefer"}'), [0, [0, 1, 2]]);
  assert.deepEqual(nodeOf('{"nvlink": "require"}'), [2, [0, 1, 2]]);
  assert.deepEqual(nodeOf('{"nvlink": "ignore"}'), [0, [0, 1, 2]]);
  assert.deepEqual(nodeOf('{"nvlink": "require", "preferNvlink": false}'), [2, [0, 1, 2]], 'nvlink wins');
  assert.deepEqual(nodeOf('{"preferNvlink": false}'), [0, [0, 1, 2]]);
});
