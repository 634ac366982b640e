// The query API of `Cluster`: answers for the round's state after its commits
// (the Rust SDK's cluster/query.rs tests, ported).
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { Cluster, Fit, Nvlink } from '../sdk/index.js';
import { gpu, node, request, restrict, snapshot, withLabels, withMig, withNvlink } from '../sdk/testing.js';

const ZONE = 'topology.kubernetes.io/zone';

function zonedRound() {
  return snapshot(
    [
      withLabels(node('a', 4, 'NVIDIA H100', 81920), [[ZONE, 'z1']]),
      withLabels(node('b', 4, 'NVIDIA A100', 40960), [[ZONE, 'z2']]),
      node('c', 4, 'NVIDIA H100', 81920),
    ],
    [
      request('ns/x', 3, 'exclusive', 0),
      request('ns/s', 1, 'shared', 10000),
      request('ns/h', 1, 'exclusive', 0, { model: 'NVIDIA H100*' }),
    ],
  );
}

test('queries follow the commits of the round', () => {
  const snap = zonedRound();
  const cluster = new Cluster(snap);
  const [x, s, h] = [0, 1, 2].map((i) => cluster.want(i));
  assert.deepEqual([...cluster.freeByLabel(ZONE, h)], [['z1', 4], ['z2', 0]]);
  assert.deepEqual([...cluster.freeByLabel(ZONE, x)], [['z1', 4], ['z2', 4]]);

  assert.ok(cluster.place(0, x, Fit.Tightest, true));
  assert.deepEqual(cluster.freeGpus(0), [3]);
  assert.deepEqual(cluster.freeGpus(0, '*A100*'), []);
  assert.deepEqual(cluster.freeGpus(1, '*A100*'), [0, 1, 2, 3]);
  assert.ok(cluster.gpuNow(0, 0).held && !cluster.gpuNow(0, 0).wholeFree);
  // freeByLabel after a commit: z1 has one H100 left.
  assert.deepEqual([...cluster.freeByLabel(ZONE, h)], [['z1', 1], ['z2', 0]]);

  assert.ok(cluster.place(0, s, Fit.Tightest, true));
  const shared = cluster.gpuNow(0, 3);
  assert.deepEqual(shared, {
    healthy: true,
    held: false,
    shares: 1,
    freeMib: 81920 - 10000,
    memoryMib: 81920,
    wholeFree: false,
    migParent: undefined,
  });
  assert.deepEqual(cluster.fittingGpus(0, s), [3], 'room to share left');
  assert.deepEqual(cluster.fittingGpus(0, h), []);
  assert.deepEqual([...cluster.freeByLabel(ZONE, h)], [['z1', 0], ['z2', 0]]);
  assert.equal(cluster.label(2, ZONE), undefined);
  assert.equal(cluster.label(1, ZONE), 'z2');
  assert.equal(cluster.label(1, 'not-asked-for'), undefined);

  // Only eligible nodes count.
  const again = zonedRound();
  restrict(again, 2, [1, 2]);
  const restricted = new Cluster(again);
  assert.deepEqual([...restricted.freeByLabel(ZONE, restricted.want(2))], [['z2', 0]]);
});

test('gpuNow after a shared placement, and on an untouched GPU', () => {
  const snap = snapshot([node('a', 2, 'NVIDIA L4', 23034)], [request('ns/s', 1, 'shared', 8000)]);
  const cluster = new Cluster(snap);
  const want = cluster.want(0);
  assert.deepEqual(cluster.place(0, want, Fit.Tightest, true).val.gpus, Uint32Array.of(0));
  const g = cluster.gpuNow(0, 0);
  assert.deepEqual([g.shares, g.freeMib, g.wholeFree, g.held], [1, 23034 - 8000, false, false]);
  assert.ok(cluster.gpuNow(0, 1).wholeFree);
  assert.equal(cluster.gpuNow(0, 1).freeMib, 23034);
  // The snapshot's own state counts too: a GPU held, one shared, one unhealthy.
  const n = node('b', 3, 'NVIDIA L4', 23034);
  Object.assign(n.gpus[0], { held: true, allocatedMib: 23034n });
  Object.assign(n.gpus[1], { sharedOwners: 2, allocatedMib: 4000n });
  n.gpus[2].healthy = false;
  const c = new Cluster(snapshot([n], []));
  assert.deepEqual(
    [0, 1, 2].map((i) => c.gpuNow(0, i)).map((q) => [q.healthy, q.held, q.shares, q.freeMib, q.wholeFree]),
    [
      [true, true, 0, 0, false],
      [true, false, 2, 19034, false],
      [false, false, 0, 23034, false],
    ],
  );
  assert.throws(() => c.gpuNow(0, 3), RangeError);
});

test('freeGpus filters by model glob; gpuCount counts MIG instances', () => {
  const n = node('a', 3, 'NVIDIA H100 80GB HBM3', 81559);
  n.gpus[0].held = true;
  n.gpus.push(gpu(3, 'NVIDIA L4', 23034));
  const cluster = new Cluster(snapshot([n], []));
  assert.deepEqual(cluster.freeGpus(0), [1, 2, 3]);
  assert.deepEqual(cluster.freeGpus(0, 'NVIDIA H100*'), [1, 2]);
  assert.equal(cluster.gpuCount(0), 4);
  assert.equal(cluster.freeWhole(0), 3);
});

test('freeByLabel sums per value in byte order, skipping unlabelled nodes', () => {
  const snap = snapshot(
    [
      withLabels(node('a', 4, 'NVIDIA L4', 23034), [[ZONE, 'z1']]),
      withLabels(node('b', 2, 'NVIDIA L4', 23034), { [ZONE]: 'z1' }),
      withLabels(node('c', 8, 'NVIDIA L4', 23034), [[ZONE, 'z2']]),
      withLabels(node('d', 1, 'NVIDIA L4', 23034), [[ZONE, 'Z0']]),
      node('e', 8, 'NVIDIA L4', 23034),
    ],
    [request('ns/p', 2, 'exclusive', 0)],
  );
  const cluster = new Cluster(snap);
  const perZone = cluster.freeByLabel(ZONE, cluster.want(0));
  assert.ok(perZone instanceof Map);
  assert.deepEqual([...perZone], [['Z0', 1], ['z1', 6], ['z2', 8]]);
});

test('NVLink groups, peers, cliques and MIG instances', () => {
  const n = withMig(withNvlink(node('a', 4, 'NVIDIA A100', 81920), [[0, 1], [1, 2], [0, 2]]), 3, [['1g.10gb', 9856]]);
  const cluster = new Cluster(snapshot([n], []));
  assert.equal(cluster.gpuCount(0), 5);
  assert.deepEqual(cluster.nvlinkGroups(0), [[0, 1, 2], [3]]);
  assert.ok(cluster.isNvlinkClique(0, [0, 1, 2]));
  assert.ok(!cluster.isNvlinkClique(0, [0, 1, 3]));
  assert.ok(cluster.isNvlinkClique(0, [3]) && cluster.isNvlinkClique(0, []));
  assert.deepEqual(cluster.nvlinkClique(0, [3, 2, 1, 0], 3), [2, 1, 0]);
  assert.equal(cluster.gpuNow(0, 4).migParent, 3);
  assert.equal(cluster.gpuNow(0, 0).migParent, undefined);
  assert.deepEqual(cluster.freeGpus(0), [0, 1, 2, 3]);
  assert.ok(cluster.nvlinkPeers(0, 0, 1) && !cluster.nvlinkPeers(0, 0, 3) && !cluster.nvlinkPeers(0, 0, 0));
  assert.deepEqual(cluster.gpuNames(0, [0, 4]), ['a/gpu0', 'a/gpu3/mig0']);

  // A chain: one group, but 0 and 2 are not peers.
  const chain = withNvlink(node('b', 5, 'NVIDIA A100', 40960), [[0, 1], [1, 2], [3, 4]]);
  const c = new Cluster(snapshot([chain], []));
  assert.deepEqual(c.nvlinkGroups(0), [[0, 1, 2], [3, 4]]);
  assert.ok(!c.nvlinkPeers(0, 0, 2));
  assert.equal(c.nvlinkClique(0, [0, 1, 2], 3), null);
  assert.deepEqual(c.nvlinkClique(0, [0, 1, 2], 2), [0, 1]);
});

test('a link listed on one end only joins both', () => {
  const n = node('o', 2, 'NVIDIA A100', 40960);
  n.gpus[1].nvlink |= 1n;
  const c = new Cluster(snapshot([n], []));
  assert.ok(c.nvlinkPeers(0, 0, 1) && c.nvlinkPeers(0, 1, 0));
  assert.deepEqual(c.nvlinkGroups(0), [[0, 1]]);
});

test('the query API reads the trial inside a gang, and commits move freeByLabel', () => {
  const snap = snapshot(
    [withLabels(node('a', 2, 'NVIDIA L4', 23034), [[ZONE, 'z1']]), withLabels(node('b', 2, 'NVIDIA L4', 23034), [[ZONE, 'z2']])],
    [request('ns/p', 1, 'exclusive', 0), request('ns/q', 2, 'exclusive', 0)],
  );
  const cluster = new Cluster(snap);
  const p = cluster.want(0);
  cluster.commit(1, [0], p);
  assert.deepEqual([...cluster.freeByLabel(ZONE, p)], [['z1', 2], ['z2', 1]]);
  const trial = cluster.clone();
  trial.commit(0, [0, 1], cluster.want(1));
  assert.deepEqual([...trial.freeByLabel(ZONE, p)], [['z1', 0], ['z2', 1]]);
  assert.deepEqual([...cluster.freeByLabel(ZONE, p)], [['z1', 2], ['z2', 1]], 'the trial is a copy');
  assert.equal(Nvlink.Require, 'require');
});
