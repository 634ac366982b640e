import assert from 'node:assert/strict';
import { test } from 'node:test';

import { allocate, describe } from '../binpack/binpack.js';
import {
  agentPublished,
  assign,
  Cluster,
  describeRequest,
  globMatch,
  inSet,
  labelOf,
  namespaceOf,
  nodeEligible,
  nvlinkPeers,
  parseConfig,
  PolicyError,
  preempt,
  setLogSink,
  setMembers,
  shapeOf,
  tenantOf,
} from '../sdk/index.js';
import {
  assigned,
  decisionOf,
  draRequest,
  gang,
  node,
  nodeSet,
  nvlinkOf,
  request,
  running,
  snapshot,
  withFullNvlink,
  withNvlink,
} from '../sdk/testing.js';

test('describes itself', () => {
  const me = describe();
  assert.equal(me.name, 'binpack');
  assert.deepEqual(me.labelKeys, [], 'binpack reads no node label');
});

test('packs onto the fullest node that fits', () => {
  const busy = node('busy', 4, 0, 81920);
  busy.gpus[0].held = true;
  busy.gpus[0].allocatedMib = 81920n;
  const snap = snapshot(['NVIDIA H100'], [node('idle', 4, 0, 81920), busy], [
    request('ns/a', 2, 'exclusive', 0),
    request('ns/b', 1, 'exclusive', 0),
    request('ns/c', 2, 'exclusive', 0),
  ]);
  const got = assigned(allocate(snap));
  // a → busy (3 free), b → busy (1 free: exact fit), c → idle.
  assert.deepEqual(got.map(([, n]) => n), [1, 1, 0]);
  assert.deepEqual(got[0][2], [1, 2]);
  assert.deepEqual(got[1][2], [3]);
});

test('waits when full and rejects what never fits', () => {
  const snap = snapshot(['NVIDIA A100-SXM4-40GB'], [node('a', 2, 0, 40960)], [
    request('ns/first', 2, 'exclusive', 0),
    request('ns/second', 1, 'exclusive', 0),
    request('ns/huge', 4, 'exclusive', 0),
  ]);
  const decisions = allocate(snap);
  assert.equal(decisionOf(decisions, 0).tag, 'assign');
  assert.equal(decisionOf(decisions, 1).tag, 'wait');
  assert.match(decisionOf(decisions, 1).val.reason, /free right now/);
  assert.equal(decisionOf(decisions, 2).tag, 'reject');
  assert.match(decisionOf(decisions, 2).val.reason, /even when idle/);
});

test('shared requests stack on the fullest GPU', () => {
  const snap = snapshot(['NVIDIA L4'], [node('a', 2, 0, 24000)], [
    request('ns/s1', 1, 'shared', 8000),
    request('ns/s2', 1, 'shared', 8000),
    request('ns/s3', 1, 'shared', 8000),
  ]);
  const got = assigned(allocate(snap));
  assert.equal(got.length, 3);
  assert.ok(got.every(([, , gpus]) => gpus.length === 1 && gpus[0] === 0), JSON.stringify(got));
});

test('honours eligible sets and the NVLink preference', () => {
  const n1 = withNvlink(node('n1', 4, 0, 81920), [[2, 3]]);
  const snap = snapshot(['NVIDIA H100'], [withFullNvlink(node('n0', 8, 0, 81920)), n1], [
    request('ns/p', 2, 'exclusive', 0, { eligibleSet: 1 }),
  ]);
  snap.eligibleSets.push(nodeSet(1));
  assert.deepEqual(assigned(allocate(snap)), [[0, 1, [2, 3]]]);
  snap.config = '{"preferNvlink": false}';
  assert.deepEqual(assigned(allocate(snap)), [[0, 1, [0, 1]]]);
});

test('a bad config fails the round and says why', () => {
  const lines = [];
  setLogSink((line) => lines.push(line));
  const snap = snapshot([], [], []);
  snap.config = '{"preferNVLink": false}';
  assert.throws(() => allocate(snap), PolicyError);
  assert.match(lines[0], /unknown field `preferNVLink`/);
  setLogSink(() => {});
});

test('MIG requests take free instances of their profile, never beside a held parent', () => {
  // GPU 0 with two 1g.10gb instances (1, 2) and one 3g.40gb (3); GPU 4 whole.
  const n = node('a', 5, 0, 81920);
  n.gpus[4].index = 1;
  for (const [i, profile, mem] of [[1, 0, 9984], [2, 0, 9984], [3, 1, 40192]]) {
    Object.assign(n.gpus[i], { index: 0, memoryMib: BigInt(mem), mig: { parent: 0, profile } });
  }
  n.gpus[1].held = true;
  const snap = snapshot(['NVIDIA H100'], [n], [
    request('ns/m1', 1, 'exclusive', 0, { migProfile: '1g.10gb' }),
    request('ns/m2', 1, 'exclusive', 0, { migProfile: '1g.10gb' }),
    request('ns/whole', 1, 'exclusive', 0),
    request('ns/whole2', 1, 'exclusive', 0),
    request('ns/m7', 1, 'exclusive', 0, { migProfile: '7g.80gb' }),
  ], { migProfiles: ['1g.10gb', '3g.40gb'] });
  const d = allocate(snap);
  assert.deepEqual(assigned(d), [[0, 0, [2]], [2, 0, [4]]]);
  assert.equal(decisionOf(d, 1).tag, 'wait');
  assert.match(decisionOf(d, 1).val.reason, /MIG instance\(s\) of profile "1g.10gb" free right now/);
  assert.equal(decisionOf(d, 3).tag, 'wait', 'GPU 0 has held instances: not whole');
  assert.equal(decisionOf(d, 4).tag, 'reject');
});

test('a gang that cannot reach its minimum places none and frees the room', () => {
  const snap = snapshot(['NVIDIA H100'], [node('a', 2, 0, 81920)], [
    request('ml/w0', 1, 'exclusive', 0, { gang: 0, createdMs: 1n }),
    request('ml/w1', 1, 'exclusive', 0, { gang: 0, createdMs: 1n }),
    request('ml/w2', 1, 'exclusive', 0, { gang: 0, createdMs: 1n }),
    request('ns/solo', 2, 'exclusive', 0, { createdMs: 2n }),
  ], { gangs: [gang('ml/job', 3, [0, 1, 2])] });
  const d = allocate(snap);
  for (const pod of [0, 1, 2]) {
    assert.equal(decisionOf(d, pod).tag, 'wait');
    assert.match(decisionOf(d, pod).val.reason, /gang ml\/job: 2 of the 3 more members needed fit now/);
  }
  assert.deepEqual(assigned(d), [[3, 0, [0, 1]]]);
  // One member already bound: the two that fit complete it; the third waits.
  snap.gangs[0].bound = 1;
  const again = allocate(snap);
  assert.deepEqual(assigned(again), [[0, 0, [0]], [1, 0, [1]]]);
  assert.match(decisionOf(again, 2).val.reason, /placed without this member/);
  // A member that can never fit rejects the whole gang.
  snap.gangs[0].bound = 0;
  shapeOf(snap.pending[2]).count = 8;
  for (const dec of allocate(snap).slice(0, 3)) {
    assert.equal(dec.tag, 'reject');
    assert.match(dec.val.reason, /can never be placed: member ml\/w2/);
  }
  // ... unless the others reach minMember without it: only it is rejected.
  snap.gangs[0].minMember = 2;
  const without = allocate(snap);
  assert.deepEqual(assigned(without), [[0, 0, [0]], [1, 0, [1]]]);
  assert.equal(decisionOf(without, 2).tag, 'reject');
  assert.doesNotMatch(decisionOf(without, 2).val.reason, /gang/);
});

test('MIG instances pack onto the parent with the fewest free instances', () => {
  // GPUs 0 and 1 each carved into two instances (2-3 of GPU 0, 4-5 of GPU 1);
  // one instance of GPU 1 is held.
  const n = node('a', 6, 0, 81920);
  for (const [i, parent] of [[2, 0], [3, 0], [4, 1], [5, 1]]) {
    Object.assign(n.gpus[i], { index: parent, memoryMib: 40192n, mig: { parent, profile: 0 } });
  }
  n.gpus[4].held = true;
  const snap = snapshot(['NVIDIA A100'], [n], [
    request('ns/m', 1, 'exclusive', 0, { migProfile: '3g.40gb' }),
  ], { migProfiles: ['3g.40gb'] });
  assert.deepEqual(assigned(allocate(snap)), [[0, 0, [5]]]);
});

test('order is priority, then age, then name', () => {
  const snap = snapshot([], [], [
    request('ns/young', 1, 'exclusive', 0, { createdMs: 5n }),
    request('ns/urgent', 1, 'exclusive', 0, { createdMs: 9n, priority: 10 }),
    request('ns/old', 1, 'exclusive', 0, { createdMs: 1n }),
  ]);
  assert.deepEqual(new Cluster(snap).pendingInOrder(), [1, 2, 0]);
});

test('globs and config parsing', () => {
  assert.ok(globMatch('NVIDIA H100*', 'NVIDIA H100 80GB HBM3'));
  assert.ok(globMatch('*A100*', 'NVIDIA A100-SXM4-40GB'));
  assert.ok(!globMatch('nvidia*', 'NVIDIA H100'));
  assert.ok(globMatch('a*b*c', 'aXXbYYbZZc'));
  assert.ok(!globMatch('a*b*c', 'aXXbYYbZZ'));
  assert.ok(globMatch('GPU-?é*', 'GPU-xé-ü'));
  assert.deepEqual(parseConfig('  ', { preferNvlink: true }), { preferNvlink: true });
  assert.throws(() => parseConfig('{"preferNvlink": 1}', { preferNvlink: true }), /must be a boolean/);
});

test('NVLink peers are GPU indices, not positions', () => {
  // GPU 0 carved into two instances (positions 1, 2): the whole GPU of index
  // 1 sits at position 3, of index 2 at 4, of index 3 at 5. Indices 2 and 3
  // are linked; 1 is alone. An instance of GPU 0 is held: GPU 0 is not whole.
  const n = node('a', 6, 0, 81920);
  for (const [i, index] of [[3, 1], [4, 2], [5, 3]]) n.gpus[i].index = index;
  for (const i of [1, 2]) {
    Object.assign(n.gpus[i], { index: 0, memoryMib: 40192n, mig: { parent: 0, profile: 0 } });
  }
  n.gpus[1].held = true;
  n.gpus[4].nvlink = nvlinkOf([3]);
  n.gpus[5].nvlink = nvlinkOf([2]);
  assert.deepEqual(nvlinkPeers(n, 4), [5]);
  assert.deepEqual(nvlinkPeers(n, 3), []);
  // The linked pair is 4 and 5.
  const snap = snapshot(['NVIDIA H100'], [n], [request('ns/p', 2, 'exclusive', 0)], {
    migProfiles: ['3g.40gb'],
  });
  assert.deepEqual(assigned(allocate(snap)), [[0, 0, [4, 5]]]);
  snap.config = '{"preferNvlink": false}';
  assert.deepEqual(assigned(allocate(snap)), [[0, 0, [3, 4]]]);
});

test('GPUResource requests take only GPUs the agent publishes', () => {
  const n = node('a', 4, 0, 81920);
  n.gpus[0].publishedBy = 'dra-driver';
  n.gpus[1].publishedBy = 'both';
  assert.ok(!agentPublished(n.gpus[0]) && agentPublished(n.gpus[1]) && agentPublished(n.gpus[2]));
  const dra = node('dra', 8, 0, 81920);
  for (const g of dra.gpus) g.publishedBy = 'dra-driver';
  const snap = snapshot(['NVIDIA H100'], [dra, n], [
    request('ns/three', 3, 'exclusive', 0, { createdMs: 1n }),
    request('ns/one', 1, 'exclusive', 0, { createdMs: 2n }),
    request('ns/shared', 1, 'shared', 1000, { createdMs: 3n }),
    request('ns/five', 5, 'exclusive', 0, { createdMs: 4n }),
  ]);
  const d = allocate(snap);
  assert.deepEqual(assigned(d), [[0, 1, [1, 2, 3]]]);
  // Only GPU 0 of node a is left, and a DRA driver publishes it: the next
  // two wait for GPUs of node a to free up; five never fits.
  assert.equal(decisionOf(d, 1).tag, 'wait');
  assert.equal(decisionOf(d, 2).tag, 'wait');
  assert.equal(decisionOf(d, 3).tag, 'reject');
  assert.match(decisionOf(d, 3).val.reason, /5 GPU\(s\), even when idle/);
});

test('DRA pods are served in priority order with the others; in a gang they are left to it', () => {
  const snap = snapshot(['NVIDIA H100'], [node('a', 2, 0, 81920)], [
    draRequest('ns/dra', [{ name: 'ns/claim', requests: [], constraints: [] }], { priority: 100 }),
    request('ns/gpu', 1, 'exclusive', 0),
    request('ml/w0', 1, 'exclusive', 0, { gang: 0 }),
    draRequest('ml/w1', [], { gang: 0 }),
  ], { gangs: [gang('ml/job', 2, [2, 3])] });
  const cluster = new Cluster(snap);
  assert.deepEqual(cluster.pendingInOrder(), [2, 1], 'GPUResource requests only');
  assert.deepEqual(cluster.draPending(), [0, 3]);
  assert.deepEqual(cluster.allPendingInOrder(), [0, 2, 3, 1]);
  assert.ok(cluster.want(0).isDra() && !cluster.want(1).isDra());
  assert.equal(describeRequest(snap.pending[0]), '0 device(s) for claim ns/claim');
  const d = allocate(snap);
  // A claim without requests needs a node, no device.
  assert.deepEqual(decisionOf(d, 0), { tag: 'assign', val: { pod: 0, node: 0, gpus: new Uint32Array(0), claims: [] } });
  assert.equal(decisionOf(d, 3), undefined);
  // The gang's DRA member may come later: its GPUResource member waits.
  assert.equal(decisionOf(d, 2).tag, 'wait');
  assert.match(decisionOf(d, 2).val.reason, /gang ml\/job: 1 of the 2 more members needed fit now/);
  assert.deepEqual(assigned(d), [[0, 0, []], [1, 0, [0]]]);
  assert.equal(d.length, 3);
});

test('decisions are contract-shaped', () => {
  assert.deepEqual(assign(1, 2, [3]), {
    tag: 'assign',
    val: { pod: 1, node: 2, gpus: Uint32Array.of(3), claims: [] },
  });
  const p = preempt(0, 1, [2, 3], [4]);
  assert.equal(p.tag, 'preempt');
  assert.deepEqual(p.val.assignment.claims, []);
  assert.deepEqual(p.val.victims, Uint32Array.of(4));
  assert.equal(decisionOf([p], 0), p);
});

test('the preemption key of config.json is accepted, and must be a boolean', () => {
  const snap = snapshot(['NVIDIA H100'], [node('a', 1, 0, 81920)], [request('ns/a', 1, 'exclusive', 0)]);
  snap.config = '{"preemption": false, "preferNvlink": true}';
  assert.deepEqual(assigned(allocate(snap)), [[0, 0, [0]]]);
  snap.config = '{"preemption": "no"}';
  assert.throws(() => allocate(snap), /`preemption` must be a boolean/);
});

test('tables, labels and bit sets read by name', () => {
  const a = node('a', 1, 0, 81920);
  a.labels = ['us-east-1a', undefined];
  const nodes = [a];
  for (let i = 1; i < 70; i++) nodes.push(node(`n${i}`, 1, 0, 81920));
  const snap = snapshot(['NVIDIA H100'], nodes, [
    request('team-b/p', 1, 'exclusive', 0, { tenant: 0, eligibleSet: 1 }),
    request('team-a/q', 1, 'exclusive', 0),
  ], {
    labelKeys: ['topology.kubernetes.io/zone', 'example.com/rack'],
    running: [running('team-c/r', 0, [0])],
    tenants: [{ name: 'research', weight: 1, quota: 4, limit: undefined, holding: 0, waiting: 1 }],
  });
  snap.eligibleSets.push(nodeSet(3, 64, 69));
  assert.deepEqual(snap.namespaces, ['team-a', 'team-b', 'team-c']);
  assert.equal(namespaceOf(snap, snap.pending[0]), 'team-b');
  assert.equal(namespaceOf(snap, snap.running[0]), 'team-c');
  assert.equal(tenantOf(snap, snap.pending[0]).name, 'research');
  assert.equal(tenantOf(snap, snap.pending[1]), undefined);
  assert.equal(labelOf(snap, 0, 'topology.kubernetes.io/zone'), 'us-east-1a');
  assert.equal(labelOf(snap, a, 'example.com/rack'), undefined);
  assert.equal(labelOf(snap, a, 'not-asked-for'), undefined);
  assert.deepEqual(setMembers(snap.eligibleSets[1]), [3, 64, 69]);
  assert.deepEqual(setMembers(snap.eligibleSets[1], 64), [3]);
  assert.deepEqual(setMembers([0x8000000000000001n]), [0, 63]);
  assert.ok(inSet(snap.eligibleSets[1], 64) && !inSet(snap.eligibleSets[1], 65));
  assert.ok(!inSet(snap.eligibleSets[1], 200));
  assert.ok(nodeEligible(snap, snap.pending[0], 69) && !nodeEligible(snap, snap.pending[0], 0));
  assert.ok(nodeEligible(snap, snap.pending[1], 0));
  const cluster = new Cluster(snap);
  const want = cluster.want(0);
  assert.deepEqual(cluster.eligible(want), [3, 64, 69]);
  assert.ok(cluster.isEligible(want, 64) && !cluster.isEligible(want, 1));
  assert.deepEqual(assigned(allocate(snap)), [[1, 0, [0]], [0, 3, [0]]]);
});
