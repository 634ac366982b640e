import assert from 'node:assert/strict';
import { test } from 'node:test';

import { allocate, describe } from '../binpack/binpack.js';
import { Cluster, globMatch, parseConfig, PolicyError, setLogSink } from '../sdk/index.js';
import { assigned, decisionOf, node, request, snapshot, withFullNvlink } from '../sdk/testing.js';

test('describes itself', () => {
  assert.equal(describe().name, 'binpack');
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
  const n1 = node('n1', 4, 0, 81920);
  n1.gpus[2].nvlinkPeers = Uint32Array.of(3);
  n1.gpus[3].nvlinkPeers = Uint32Array.of(2);
  const snap = snapshot(['NVIDIA H100'], [withFullNvlink(node('n0', 8, 0, 81920)), n1], [
    request('ns/p', 2, 'exclusive', 0, { eligibleSet: 1 }),
  ]);
  snap.eligibleSets.push(Uint32Array.of(1));
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
  ], { gangs: [{ name: 'ml/job', minMember: 3, bound: 0, pending: Uint32Array.of(0, 1, 2) }] });
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
  snap.pending[2].count = 8;
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
