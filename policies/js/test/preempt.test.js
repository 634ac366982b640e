// Preemption by priority, tenant limits and usage (the Rust SDK's
// cluster/preempt.rs, placement.rs and usage.rs tests, ported).
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { allocate } from '../binpack/binpack.js';
import { Cluster, Fit, Nvlink, placeEach, preempt, usage } from '../sdk/index.js';
import {
  candidateSet,
  claim,
  decisionOf,
  draRequest,
  gang,
  node,
  request,
  running,
  runningOnEachGpu,
  snapshot,
  tenant,
  validate,
  wasmgpuMissing,
  withMig,
} from '../sdk/testing.js';

/** Node "n": 8 GPUs each held by a pod of priority 100 (started 0–7); node "m": 4 free GPUs. */
function full() {
  const snap = snapshot(
    [node('n', 8, 'NVIDIA H100', 81920), node('m', 4, 'NVIDIA H100', 81920)],
    [request('ml/urgent', 4, 'exclusive', 0, { priority: 1000 })],
  );
  runningOnEachGpu(snap, 0, 'batch/p', 100);
  return snap;
}

function decide(snap) {
  const cluster = new Cluster(snap);
  return cluster.preempt(cluster.want(0), Fit.Tightest, Nvlink.Ignore);
}

/** A candidate set of node n's first 6 GPUs (for DRA pods). */
function firstSixOfN(snap) {
  return candidateSet(snap, [0, 1, 2, 3, 4, 5].map((g) => [0, g]));
}

/** Makes running pods `members` gang `batch/g`. */
function gangOf(snap, members) {
  const g = gang(snap, 'batch/g', members.length, []);
  for (const r of members) snap.running[r].gang = g;
  snap.gangs[g].running = Uint32Array.from(members);
}

const missing = wasmgpuMissing();
if (missing) console.log(`# skipping the checks that run \`wasmgpu policy validate\`: ${missing}`);

/** The host accepts `decisions` on `snap` (when there is a `wasmgpu` to ask). */
function accepted(snap, decisions) {
  if (missing) return;
  const verdict = validate(snap, decisions);
  assert.deepEqual(verdict.refused, [], JSON.stringify(verdict.refused));
}

test('a gang goes whole, and only when cheaper than pods in none', () => {
  // The youngest two are a gang: the four youngest in no gang go.
  let snap = full();
  gangOf(snap, [6, 7]);
  let decision = decide(snap);
  assert.deepEqual(decision, preempt(0, 0, [2, 3, 4, 5], [5, 4, 3, 2]));
  accepted(snap, [decision]);

  // p0–p3 are protected; p4 and p5 are a gang with m0 on node m. On m,
  // evicting m0 makes room, and the gang goes whole: 3 victims, fewer than
  // n's 5 (p7, p6 and the gang).
  snap = full();
  assert.equal(running(snap, 'batch/m0', 100, 1, [0], 0), 8);
  for (const r of snap.running.slice(0, 4)) r.protectedMs = 1n;
  gangOf(snap, [4, 5, 8]);
  decision = decide(snap);
  assert.deepEqual(decision, preempt(0, 1, [0, 1, 2, 3], [4, 5, 8]));
  accepted(snap, [decision]);

  // A gang member that may not go keeps its whole gang: 2 GPUs can be freed
  // on n, none on m.
  snap.running[8].evictable = false;
  assert.equal(decide(snap), null);
});

test('the fewest, lowest, youngest pods go', () => {
  const snap = full();
  // m has 2 GPUs free and 2 held by priority-10 pods: 2 victims there.
  assert.equal(running(snap, 'batch/m0', 10, 1, [0], 0), 8);
  running(snap, 'batch/m1', 10, 1, [1], 0);
  assert.deepEqual(decide(snap), preempt(0, 1, [0, 1, 2, 3], [8, 9]));
  // Without m's pods, n's youngest four go, youngest first.
  assert.deepEqual(decide(full()), preempt(0, 0, [4, 5, 6, 7], [7, 6, 5, 4]));
});

test('nobody is preempted for equal priority, by a pod that never preempts, or when protected', () => {
  let snap = full();
  snap.pending[0].priority = 100;
  assert.equal(decide(snap), null);
  snap = full();
  snap.pending[0].preemption = 'never';
  assert.equal(decide(snap), null);
  snap = full();
  for (const r of snap.running.slice(0, 6)) r.protectedMs = 1n;
  assert.equal(decide(snap), null, 'only 2 GPUs could be freed');
  for (const r of snap.running.slice(0, 2)) r.protectedMs = 0n;
  assert.deepEqual(decide(snap), preempt(0, 0, [0, 1, 6, 7], [7, 6, 1, 0]));
  // A gang with a member that is not evictable is no victim either: p5–p7
  // free only 3 GPUs.
  snap = full();
  gangOf(snap, [0, 1, 2, 3, 4]);
  snap.running[0].evictable = false;
  assert.equal(decide(snap), null);
});

test('shared requests and gang members do not preempt; a victim is named once', () => {
  const snap = snapshot(
    [node('n', 2, 'NVIDIA H100', 81920)],
    [
      request('ml/a', 1, 'exclusive', 0, { priority: 50 }),
      request('ml/b', 1, 'exclusive', 0, { priority: 50 }),
      request('ml/c', 1, 'exclusive', 0, { priority: 50 }),
      request('ml/s', 1, 'shared', 1000, { priority: 50 }),
    ],
  );
  runningOnEachGpu(snap, 0, 'batch/p', 1);
  const cluster = new Cluster(snap);
  assert.deepEqual(cluster.preempt(cluster.want(0), Fit.Tightest, true), preempt(0, 0, [1], [1]));
  assert.deepEqual(cluster.preempt(cluster.want(1), Fit.Tightest, true), preempt(1, 0, [0], [0]));
  assert.equal(cluster.preempt(cluster.want(2), Fit.Tightest, true), null, 'both victims taken');
  assert.equal(cluster.preempt(cluster.want(3), Fit.Tightest, true), null, 'shared requests do not preempt');
  snap.pending[2].gang = 0;
  assert.equal(new Cluster(snap).preempt(new Cluster(snap).want(2), Fit.Tightest, true), null, 'gang members do not');
});

test('a DRA pod preempts through its claims, and the host accepts it', () => {
  // Node n's 8 GPUs held by priority-100 pods; a priority-1000 pod claims 3
  // of n's first 6 (its candidates) with a second claim of 1.
  const snap = full();
  snap.pending.length = 0;
  const six = firstSixOfN(snap);
  const claims = [claim('ml/urgent-a', [['gpus', 3, six]]), claim('ml/urgent-b', [['gpu', 1, six]])];
  snap.pending.push(draRequest('ml/urgent', claims, { priority: 1000 }));
  const decision = decide(snap);
  assert.equal(decision?.tag, 'preempt', 'a preemption');
  const p = decision.val;
  // The youngest among the candidates' holders go: p5, p4, p3, p2.
  assert.deepEqual([...p.victims], [5, 4, 3, 2]);
  assert.equal(p.assignment.gpus.length, 0, 'named by the claims');
  assert.deepEqual(
    p.assignment.claims.map((c) => [c.claim, c.request, c.alternative, [...c.gpus]]),
    [
      [0, 0, 0, [2, 3, 4]],
      [1, 0, 0, [5]],
    ],
  );
  accepted(snap, [decision]);
  if (!missing) assert.equal(validate(snap, [decision]).preempting.length, 1);

  // placeEach preempts the same way, unless config says no; then the pod waits.
  assert.deepEqual(placeEach(snap, Fit.Tightest), [decision]);
  snap.config = '{"preemption": false}';
  assert.equal(placeEach(snap, Fit.Tightest)[0].tag, 'wait');
  snap.config = '';

  // Never, or nothing lower: no preemption.
  snap.pending[0].preemption = 'never';
  assert.equal(decide(snap), null);
  snap.pending[0].preemption = 'preempt-lower-priority';
  snap.pending[0].priority = 100;
  assert.equal(decide(snap), null);
});

test('a DRA pod that cannot preempt waits saying why', () => {
  // As above, but the candidates' holders are protected by a budget.
  const snap = full();
  snap.pending.length = 0;
  const six = firstSixOfN(snap);
  snap.pending.push(draRequest('ml/urgent', [claim('ml/urgent-a', [['gpus', 4, six]])], { priority: 1000 }));
  for (const r of snap.running.slice(0, 6)) r.evictable = false;
  assert.deepEqual(placeEach(snap, Fit.Tightest), [
    {
      tag: 'wait',
      val: {
        pod: 0,
        reason:
          'no eligible node has 4 device(s) for claim ml/urgent-a request "gpus" (6 candidate(s) on eligible nodes) free right now; ' +
          'at most 0 free on any eligible node; ' +
          '6 pod(s) of lower priority it could preempt are protected by a PodDisruptionBudget now',
      },
    },
  ]);
  // A pod that can never fit does not preempt: it is rejected.
  for (const r of snap.running) r.evictable = true;
  snap.pending[0].ask.val[0].requests[0].alternatives[0].count = 7;
  assert.equal(placeEach(snap, Fit.Tightest)[0].tag, 'reject');
});

test('preemptWhere takes another rule for who may go', () => {
  const snap = full();
  snap.pending[0].priority = 0;
  const cluster = new Cluster(snap);
  const want = cluster.want(0);
  assert.equal(cluster.preempt(want, Fit.Tightest, Nvlink.Ignore), null, 'priority 0 preempts nobody');
  const batch = snap.namespaces.indexOf('batch');
  const d = cluster.preemptWhere(want, Fit.Tightest, Nvlink.Ignore, (pod) => pod.namespace === batch);
  assert.deepEqual(d, preempt(0, 0, [4, 5, 6, 7], [7, 6, 5, 4]));
});

test('MIG requests preempt the pod on an instance, or on its parent', () => {
  const n = withMig(node('m', 1, 'NVIDIA A100 80GB PCIe', 81920), 0, [['1g.10gb', 9856], ['1g.10gb', 9856]]);
  const snap = snapshot([n], [request('ml/m', 1, 'exclusive', 0, { priority: 10, migProfile: '1g.10gb' })]);
  running(snap, 'batch/i1', 1, 0, [1], 5);
  running(snap, 'batch/i2', 1, 0, [2], 6);
  assert.deepEqual(decide(snap), preempt(0, 0, [2], [1]), 'the younger instance pod goes');
  const whole = snapshot([withMig(node('m', 1, 'NVIDIA A100 80GB PCIe', 81920), 0, [['1g.10gb', 9856]])], [
    request('ml/m', 1, 'exclusive', 0, { priority: 10, migProfile: '1g.10gb' }),
  ]);
  running(whole, 'batch/parent', 1, 0, [0], 0);
  assert.deepEqual(decide(whole), preempt(0, 0, [1], [0]), 'the pod holding the parent goes');
});

test('placeEach preempts for a pod that fits nowhere now, unless config says no', () => {
  const snap = full();
  snap.nodes.pop();
  snap.eligibleSets[0] = new BigUint64Array([1n]);
  const d = allocate(snap);
  assert.deepEqual(d, [preempt(0, 0, [4, 5, 6, 7], [7, 6, 5, 4])]);
  snap.config = '{"preemption": false}';
  assert.deepEqual(allocate(snap), [{ tag: 'wait', val: { pod: 0, reason: 'no eligible node has 4 GPU(s) free right now' } }]);
  // A pod that can never fit does not preempt.
  snap.config = '';
  snap.pending[0].ask.val.count = 9;
  assert.equal(allocate(snap)[0].tag, 'reject');
});

test('a wait says how many would-be victims a PodDisruptionBudget protects', () => {
  const snap = full();
  snap.nodes.pop();
  snap.eligibleSets[0] = new BigUint64Array([1n]);
  for (const r of snap.running.slice(0, 6)) r.evictable = false;
  const d = placeEach(snap, Fit.Tightest);
  assert.deepEqual(d, [
    {
      tag: 'wait',
      val: {
        pod: 0,
        reason:
          'no eligible node has 4 GPU(s) free right now; 6 pod(s) of lower priority it could preempt are protected by a PodDisruptionBudget now',
      },
    },
  ]);
  const cluster = new Cluster(snap);
  assert.equal(
    cluster.preemptionBlocked(cluster.want(0)),
    '6 pod(s) of lower priority it could preempt are protected by a PodDisruptionBudget now',
  );
  snap.pending[0].preemption = 'never';
  assert.equal(new Cluster(snap).preemptionBlocked(new Cluster(snap).want(0)), null);
  snap.config = '{"preemption": false}';
  snap.pending[0].preemption = 'preempt-lower-priority';
  assert.equal(placeEach(snap, Fit.Tightest)[0].val.reason, 'no eligible node has 4 GPU(s) free right now');
});

test('a wait says how many would-be victims are within their minimum runtime, and when the first is past it', () => {
  // As the Rust SDK's test: 6 pods protected for 1 ms, one of them 1500 ms.
  let snap = full();
  for (const r of snap.running.slice(0, 6)) r.protectedMs = 1n;
  snap.running[0].protectedMs = 1500n;
  let cluster = new Cluster(snap);
  assert.equal(
    cluster.preemptionBlocked(cluster.want(0)),
    '6 pod(s) of lower priority it could preempt are within their minimum runtime (the first is past it in 1 s)',
  );
  // Whole seconds, rounded up; a plain number works as well as a BigInt.
  snap = full();
  snap.running[0].protectedMs = 2001n;
  snap.running[1].protectedMs = 4000;
  cluster = new Cluster(snap);
  assert.equal(
    cluster.preemptionBlocked(cluster.want(0)),
    '2 pod(s) of lower priority it could preempt are within their minimum runtime (the first is past it in 3 s)',
  );
  snap.running[0].protectedMs = 2000n;
  assert.equal(
    new Cluster(snap).preemptionBlocked(new Cluster(snap).want(0)),
    '2 pod(s) of lower priority it could preempt are within their minimum runtime (the first is past it in 2 s)',
  );
  // Both: the budget first, then the minimum runtime; a pod a budget
  // protects is counted there only, and pods of equal priority not at all.
  snap = full();
  snap.nodes.pop();
  snap.eligibleSets[0] = new BigUint64Array([1n]);
  for (const r of snap.running.slice(0, 3)) r.evictable = false;
  snap.running[2].protectedMs = 500n;
  snap.running[3].protectedMs = 61_001n;
  snap.running[4].protectedMs = 120_000n;
  snap.running[5].protectedMs = 1n;
  snap.running[5].priority = 1000;
  const both =
    '3 pod(s) of lower priority it could preempt are protected by a PodDisruptionBudget now; ' +
    '2 pod(s) of lower priority it could preempt are within their minimum runtime (the first is past it in 62 s)';
  cluster = new Cluster(snap);
  assert.equal(cluster.preemptionBlocked(cluster.want(0)), both);
  assert.deepEqual(placeEach(snap, Fit.Tightest), [
    { tag: 'wait', val: { pod: 0, reason: `no eligible node has 4 GPU(s) free right now; ${both}` } },
  ]);
  snap.pending[0].preemption = 'never';
  assert.equal(new Cluster(snap).preemptionBlocked(new Cluster(snap).want(0)), null);
  // None protected, none young: no reason.
  assert.equal(new Cluster(full()).preemptionBlocked(new Cluster(full()).want(0)), null);
});

test('a pod whose tenant is at its limit waits saying so', () => {
  const snap = snapshot(
    [node('n', 8, 'NVIDIA H100', 81920)],
    [0, 1, 2].map((i) => request(`ml/p${i}`, 1, 'exclusive', 0, { tenant: 0 })),
    { tenants: [tenant('ml', { limit: 3, holding: 1, waiting: 3 })] },
  );
  const decisions = placeEach(snap, Fit.Tightest);
  assert.equal(decisions.filter((d) => d.tag === 'assign').length, 2, '1 held + 2 = the limit of 3');
  assert.deepEqual(decisions[2], {
    tag: 'wait',
    val: { pod: 2, reason: 'tenant ml holds 3 of its limit 3 GPUs (GPUTenant ml: spec.limit); this pod needs 1 more' },
  });
  const cluster = new Cluster(snap);
  assert.equal(cluster.overTenantLimit(cluster.want(0)), null);
  snap.tenants[0].limit = undefined;
  assert.equal(placeEach(snap, Fit.Tightest).filter((d) => d.tag === 'assign').length, 3, 'no limit');
});

test('usage counts what each namespace holds, sorted by namespace', () => {
  const n = withMig(node('a', 4, 'NVIDIA L4', 23034), 3, [['1g.5gb', 5000]]);
  const snap = snapshot([n], []);
  running(snap, 'ml/train', 0, 0, [0, 1], 0);
  running(snap, 'batch/mig', 0, 0, [4], 0);
  snap.running.push(running('ai/share', 0, [2], { sharedMib: 4096n, namespace: snap.namespaces.push('ai') - 1 }));
  assert.deepEqual(usage(snap), [
    { namespace: 'ai', exclusiveGpus: 0, sharedMib: 4096, migInstances: 0 },
    { namespace: 'batch', exclusiveGpus: 0, sharedMib: 0, migInstances: 1 },
    { namespace: 'ml', exclusiveGpus: 2, sharedMib: 0, migInstances: 0 },
  ]);
  assert.deepEqual(usage(snapshot([node('b', 1, 'NVIDIA L4', 23034)], [])), []);
  assert.equal(decisionOf([], 0), undefined);
});
