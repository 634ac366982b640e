// The snapshot builders of sdk/testing.js (on par with the Rust builders).
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { allocate } from '../binpack/binpack.js';
import { Cluster, Fit, placeEach, setMembers } from '../sdk/index.js';
import {
  assigned,
  decisionFor,
  decisionOf,
  gang,
  gpu,
  gpuName,
  large,
  node,
  podOf,
  refreshTables,
  request,
  restrict,
  running,
  runningOnEachGpu,
  shape,
  snapshot,
  tenant,
  withLabels,
  withMig,
  withNvlink,
} from '../sdk/testing.js';

test('models, MIG profiles and label keys by name become table indices', () => {
  const a = withLabels(node('a', 2, 'NVIDIA L4', 23034), [['topology.kubernetes.io/zone', 'z1']]);
  const b = withMig(node('b', 2, 'NVIDIA A100', 81920), 1, [['1g.10gb', 9856], ['3g.40gb', 40192]]);
  withLabels(b, { 'example.com/rack': 'r7', 'topology.kubernetes.io/zone': 'z2' });
  const snap = snapshot([a, b], [request('ns/p', 1, 'exclusive', 0)]);
  assert.deepEqual(snap.models, ['NVIDIA L4', 'NVIDIA A100']);
  assert.deepEqual(snap.migProfiles, ['1g.10gb', '3g.40gb']);
  assert.deepEqual(snap.labelKeys, ['topology.kubernetes.io/zone', 'example.com/rack']);
  assert.deepEqual(a.labels, ['z1', undefined]);
  assert.deepEqual(b.labels, ['z2', 'r7']);
  assert.deepEqual(b.gpus.map((g) => [g.index, g.model, g.mig && g.mig.parent, g.mig && g.mig.profile]), [
    [0, 1, undefined, undefined],
    [1, 1, undefined, undefined],
    [1, 1, 1, 0],
    [1, 1, 1, 1],
  ]);
  assert.equal(b.gpus[3].memoryMib, 40192n);
  // A node reused in another snapshot gets that snapshot's indices.
  const again = snapshot([node('c', 1, 'NVIDIA H100', 81920), b], []);
  assert.deepEqual(again.models, ['NVIDIA H100', 'NVIDIA A100']);
  assert.equal(b.gpus[0].model, 1);
  assert.equal(b.gpus[2].model, 1);
  // The older form: a model table and indices.
  const legacy = snapshot(['X', 'Y'], [node('d', 1, 1, 100)], []);
  assert.deepEqual([legacy.models, legacy.nodes[0].gpus[0].model], [['X', 'Y'], 1]);
  // Later edits: refreshTables adds the new names.
  legacy.nodes[0].gpus.push(gpu(1, 'Z', 100));
  withLabels(legacy.nodes[0], [['k', 'v']]);
  refreshTables(legacy);
  assert.deepEqual([legacy.models, legacy.nodes[0].gpus[1].model, legacy.labelKeys, legacy.nodes[0].labels], [
    ['X', 'Y', 'Z'],
    2,
    ['k'],
    ['v'],
  ]);
});

test('namespaces come from pod names; running and gang have the Rust forms too', () => {
  const snap = snapshot([node('a', 4, 'NVIDIA H100', 81920)], [
    request('team-b/p', 1, 'exclusive', 0),
    request('team-a/q', 1, 'exclusive', 0),
    request('team-a/r', 1, 'exclusive', 0),
  ]);
  assert.deepEqual(snap.namespaces, ['team-a', 'team-b']);
  assert.deepEqual(snap.pending.map((r) => r.namespace), [1, 0, 0]);
  // running(snap, pod, priority, node, gpus, startedMs): marks the GPUs held.
  assert.equal(running(snap, 'batch/x', 5, 0, [0, 1], 7), 0);
  assert.deepEqual([snap.nodes[0].gpus[0].held, snap.nodes[0].gpus[1].allocatedMib], [true, 81920n]);
  assert.deepEqual(snap.namespaces, ['team-a', 'team-b', 'batch']);
  const r = snap.running[0];
  assert.deepEqual([r.pod, r.namespace, r.priority, r.node, [...r.gpus], r.startedMs, r.evictable, r.protectedMs], [
    'batch/x', 2, 5, 0, [0, 1], 7n, true, 0n,
  ]);
  // The record form leaves GPUs alone.
  const record = running('ns/y', 0, [3], { sharedMib: 10n });
  assert.equal(record.sharedMib, 10n);
  assert.equal(snap.nodes[0].gpus[3].held, false);
  // gang(snap, name, minMember, members) sets the members' gang.
  assert.equal(gang(snap, 'team-a/job', 2, [1, 2]), 0);
  assert.deepEqual([snap.pending[1].gang, snap.pending[2].gang, snap.pending[0].gang], [0, 0, undefined]);
  assert.deepEqual([...snap.gangs[0].pending], [1, 2]);
  assert.equal(gang('g', 1, [0]).minMember, 1);
  // runningOnEachGpu fills a node.
  const fullSnap = snapshot([node('n', 3, 'NVIDIA H100', 81920)], []);
  runningOnEachGpu(fullSnap, 0, 'batch/p', 100);
  assert.deepEqual(fullSnap.running.map((p) => [p.pod, p.priority, [...p.gpus], p.startedMs]), [
    ['batch/p0', 100, [0], 0n],
    ['batch/p1', 100, [1], 1n],
    ['batch/p2', 100, [2], 2n],
  ]);
  assert.equal(new Cluster(fullSnap).freeWhole(0), 0);
  assert.deepEqual(tenant('t', { limit: 2 }), { name: 't', weight: 1, quota: 0, limit: 2, holding: 0, waiting: 0 });
});

test('restrict, shape, assigned by name, decisionFor', () => {
  const n = withMig(node('a', 2, 'NVIDIA A100', 81920), 1, [['1g.10gb', 9856], ['1g.10gb', 9856]]);
  const snap = snapshot([node('b', 1, 'NVIDIA A100', 81920), n], [
    request('ns/whole', 1, 'exclusive', 0),
    request('ns/mig', 1, 'exclusive', 0),
  ]);
  shape(snap.pending[1]).migProfile = '1g.10gb';
  restrict(snap, 0, [1]);
  assert.deepEqual(setMembers(snap.eligibleSets[snap.pending[0].eligibleSet]), [1]);
  const d = allocate(snap);
  // In name order: ns/mig takes the first instance, ns/whole GPU 0 of node a.
  assert.deepEqual(assigned(d), [
    [1, 1, [2]],
    [0, 1, [0]],
  ]);
  assert.deepEqual(assigned(snap, d), [
    ['ns/mig', 'a', ['MIG-GPU-a-1-0']],
    ['ns/whole', 'a', ['GPU-a-0']],
  ]);
  assert.equal(gpuName(n, 3), 'MIG-GPU-a-1-1');
  assert.equal(decisionFor(snap, d, 'ns/mig'), decisionOf(d, 1));
  assert.equal(decisionFor(snap, d, 'ns/none'), undefined);
  assert.equal(podOf(d[0]), 1);
  assert.throws(() => shape({ pod: 'ns/d', ask: { tag: 'claims', val: [] } }), /DRA claims/);
  assert.throws(() => withNvlink(node('c', 2, 'X', 1), [[0, 2]]), RangeError);
});

test('large builds the Rust benchmark shape, deterministically', () => {
  const snap = large(30, 100);
  assert.equal(snap.nodes.length, 30);
  assert.equal(snap.pending.length, 100);
  assert.deepEqual(snap.models, ['NVIDIA H100 80GB HBM3', 'NVIDIA A100-SXM4-40GB']);
  assert.deepEqual(snap.labelKeys, ['kubernetes.io/hostname', 'topology.kubernetes.io/zone']);
  assert.deepEqual(snap.nodes[4].labels, ['gpu-node-0004', 'zone-1']);
  assert.equal(snap.eligibleSets.length, 4);
  assert.deepEqual(setMembers(snap.eligibleSets[2]), [1, 4, 7, 10, 13, 16, 19, 22, 25, 28]);
  assert.equal(snap.pending[10].eligibleSet, 2);
  assert.equal(snap.pending[3].pod, 'team-3/job-00003');
  assert.equal(snap.pending[3].createdMs, 1700000000030n);
  // H100 nodes fully linked, A100 nodes in pairs.
  assert.equal(snap.nodes[0].gpus[0].nvlink, 0xfen);
  assert.equal(snap.nodes[1].gpus[2].nvlink, 0x8n);
  // The same every time, and about a quarter of the GPUs in use.
  assert.deepEqual(JSON.stringify(large(30, 100), (k, v) => (typeof v === 'bigint' ? `${v}` : v)), JSON.stringify(snap, (k, v) => (typeof v === 'bigint' ? `${v}` : v)));
  const used = snap.nodes.flatMap((n) => n.gpus).filter((g) => g.held || g.sharedOwners > 0).length;
  assert.ok(used > 30 && used < 100, `${used} of 240 in use`);
  const decisions = placeEach(snap, Fit.Tightest);
  assert.equal(decisions.length, 100);
  assert.ok(decisions.filter((x) => x.tag === 'assign').length > 30);
});
