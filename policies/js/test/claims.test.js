// DRA placement (pods asking through ResourceClaims): the Rust SDK's
// cluster/claims/tests.rs, ported. Each round is held to the host's validator
// when a wasmgpu binary is at hand ($WASMGPU, or on PATH); without one the
// SDK's own assertions still run.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { Cluster, Fit, placeEach, reason } from '../sdk/index.js';
import {
  candidateSet,
  claim,
  decisionFor,
  draRequest,
  gang,
  large,
  node,
  podOf,
  request,
  restrict,
  snapshot,
  tenant,
  validate,
  wasmgpuMissing,
  withMig,
} from '../sdk/testing.js';

const missing = wasmgpuMissing();

/** Holds `decisions` to the host's rules, when a binary is at hand; the verdict, or `null` without one. */
function checked(snap, decisions) {
  if (missing) return null;
  const verdict = validate(snap, decisions);
  assert.deepEqual(verdict.refused, [], JSON.stringify(verdict.refused));
  return verdict;
}

/** Decides the round with `placeEach` and holds it to the host's rules: one decision per pod. */
function decide(snap, fit) {
  const decisions = placeEach(snap, fit);
  checked(snap, decisions);
  assert.equal(decisions.length, snap.pending.length, JSON.stringify(decisions, show));
  return decisions;
}

const show = (k, v) => (typeof v === 'bigint' ? `${v}` : v instanceof Uint32Array ? [...v] : v);

/** The decision about pod `pod` (by name). */
function of(snap, decisions, pod) {
  const d = decisionFor(snap, decisions, pod);
  assert.ok(d !== undefined, `${pod} decided`);
  return d;
}

/** `[node, choices]` of an assignment, each choice's `gpus` as an array. */
function choices(decision) {
  assert.equal(decision.tag, 'assign', `not assigned: ${JSON.stringify(decision, show)}`);
  assert.equal(decision.val.gpus.length, 0, 'a DRA assignment names no GPUs');
  return [decision.val.node, decision.val.claims.map((c) => ({ ...c, gpus: [...c.gpus] }))];
}

function why(decision) {
  assert.ok(decision.tag === 'wait' || decision.tag === 'reject', `placed: ${JSON.stringify(decision, show)}`);
  return decision.val.reason;
}

/** Adds pending request `r` to `snap`, its namespace interned in the snapshot's table. */
function push(snap, r) {
  const ns = r.pod.slice(0, r.pod.indexOf('/'));
  let at = snap.namespaces.indexOf(ns);
  if (at < 0) {
    snap.namespaces.push(ns);
    at = snap.namespaces.length - 1;
  }
  r.namespace = at;
  snap.pending.push(r);
  return r;
}

/** Every GPU of `nodes` (positions `0..gpus` each, `[node, gpus]` pairs) as one candidate set. */
function allGpus(snap, nodes) {
  const gpus = [];
  for (const [n, count] of nodes) for (let g = 0; g < count; g++) gpus.push([n, g]);
  return candidateSet(snap, gpus);
}

/** Marks GPU `g` held exclusively, all its memory allocated (as the host's snapshot check wants it). */
function hold(g, held = true) {
  g.held = held;
  g.allocatedMib = held ? g.memoryMib : 0n;
}

const oneClaim = (pod, requests) => draRequest(pod, [claim(pod, requests)]);
const h100 = (name, gpus) => node(name, gpus, 'NVIDIA H100', 81920);
const claimsOfPod = (snap, p) => snap.pending[p].ask.val;

test('two of eight candidates go to one node, the fullest for binpack', () => {
  const busy = h100('busy', 8);
  for (const g of busy.gpus.slice(0, 4)) hold(g);
  const snap = snapshot([h100('idle', 8), busy], []);
  const set = allGpus(snap, [[0, 8], [1, 8]]);
  push(snap, oneClaim('ml/train', [['gpus', 2, set]]));
  const packed = decide(snap, Fit.Tightest);
  let [n, chosen] = choices(packed[0]);
  assert.equal(n, 1, 'binpack fills the fuller node');
  assert.equal(chosen.length, 1);
  assert.deepEqual([chosen[0].claim, chosen[0].request, chosen[0].alternative], [0, 0, 0]);
  assert.deepEqual(chosen[0].gpus, [4, 5], 'the first free candidates');
  const spread = decide(snap, Fit.Loosest);
  [n, chosen] = choices(spread[0]);
  assert.deepEqual([n, chosen[0].gpus], [0, [0, 1]]);
});

test('DRA pods of one round never share a device', () => {
  const snap = snapshot([h100('a', 4)], []);
  const set = allGpus(snap, [[0, 4]]);
  for (const pod of ['ml/p0', 'ml/p1', 'ml/p2']) push(snap, oneClaim(pod, [['gpus', 2, set]]));
  const decisions = decide(snap, Fit.Tightest);
  assert.deepEqual(choices(decisions[0])[1][0].gpus, [0, 1]);
  assert.deepEqual(choices(decisions[1])[1][0].gpus, [2, 3]);
  assert.equal(
    why(decisions[2]),
    'no eligible node has 2 device(s) for claim ml/p2 request "gpus" (4 candidate(s) on eligible nodes) free right now; at most 0 free on any eligible node',
  );
  assert.equal(decisions[2].tag, 'wait');
});

test('firstAvailable takes the first alternative that can be satisfied', () => {
  const n = h100('a', 4);
  hold(n.gpus[0]);
  hold(n.gpus[1]);
  const snap = snapshot([n], []);
  const first = candidateSet(snap, [[0, 0], [0, 1]]);
  const second = candidateSet(snap, [[0, 2], [0, 3]]);
  const wants = claim('ml/c', [['gpu', 1, first]]);
  wants.requests[0].alternatives.push({ subrequest: 'fallback', count: 2, candidates: second });
  wants.requests[0].alternatives[0].subrequest = 'preferred';
  push(snap, draRequest('ml/p', [wants]));
  let chosen = choices(decide(snap, Fit.Tightest)[0])[1];
  assert.deepEqual([chosen[0].alternative, chosen[0].gpus], [1, [2, 3]]);
  // With its candidates free, the first alternative wins.
  const idle = structuredClone(snap);
  hold(idle.nodes[0].gpus[0], false);
  chosen = choices(decide(idle, Fit.Tightest)[0])[1];
  assert.deepEqual([chosen[0].alternative, chosen[0].gpus], [0, [0]]);
});

/** A constraint over `requests` with `values[g]` for GPU `g` of node 0 (`undefined`: none). */
function constraint(requests, distinct, values) {
  const listed = [];
  values.forEach((value, g) => {
    if (value !== undefined) listed.push({ device: { node: 0, gpu: g }, value });
  });
  return { requests: Uint32Array.from(requests), distinct, attribute: 'resource.kubernetes.io/pcieRoot', values: listed };
}

/**
 * One node of `values.length` GPUs, every one a candidate of both requests
 * of claim `ml/c` (`counts` devices), bound by `constraint`.
 */
function constrained(distinct, values, counts) {
  const gpus = values.length;
  const snap = snapshot([h100('a', gpus)], []);
  const set = allGpus(snap, [[0, gpus]]);
  const c = claim('ml/c', [['a', counts[0], set], ['b', counts[1], set]]);
  c.constraints.push(constraint([], distinct, values));
  push(snap, draRequest('ml/p', [c]));
  return snap;
}

test('matchAttribute tries each value where taking the first devices would break it', () => {
  // Values 0,1,1,2,1: the first three devices (0, 1, 1) break the match;
  // value 0 has one device, value 1 has three.
  const snap = constrained(false, [0, 1, 1, 2, 1], [2, 1]);
  const chosen = choices(decide(snap, Fit.Tightest)[0])[1];
  assert.deepEqual(chosen[0].gpus, [1, 2]);
  assert.deepEqual(chosen[1].gpus, [4]);
  // Bound by position, across the two requests only.
  const byPosition = structuredClone(snap);
  claimsOfPod(byPosition, 0)[0].constraints[0].requests = Uint32Array.of(0, 1);
  assert.deepEqual(choices(decide(byPosition, Fit.Tightest)[0])[1][1].gpus, [4]);
  // Values 0,0,1,1: no value has three devices, ever.
  const never = constrained(false, [0, 0, 1, 1], [2, 1]);
  const decisions = decide(never, Fit.Tightest);
  assert.equal(decisions[0].tag, 'reject', JSON.stringify(decisions, show));
  assert.equal(
    why(decisions[0]),
    "no eligible node has 3 device(s) for claim ml/c within the claims' constraints, even when idle",
  );
});

test('distinctAttribute takes devices of values not yet used', () => {
  // GPU 0 has no value: it cannot be chosen for a bound request.
  const snap = constrained(true, [undefined, 0, 0, 1, 2], [2, 1]);
  const chosen = choices(decide(snap, Fit.Tightest)[0])[1];
  assert.deepEqual(chosen[0].gpus, [1, 3]);
  assert.deepEqual(chosen[1].gpus, [4]);
  // Two values among four devices: three distinct ones never fit.
  const never = constrained(true, [0, 0, 1, 1], [2, 1]);
  assert.equal(decide(never, Fit.Tightest)[0].tag, 'reject');
});

test('a request asking more than its candidates is rejected, and one whose candidates are held waits', () => {
  const snap = snapshot([h100('a', 4)], []);
  const two = candidateSet(snap, [[0, 0], [0, 1]]);
  push(snap, oneClaim('ml/train', [['gpus', 3, two]]));
  let decisions = decide(snap, Fit.Tightest);
  assert.equal(decisions[0].tag, 'reject');
  assert.equal(
    why(decisions[0]),
    'no eligible node has 3 device(s) for claim ml/train request "gpus" (2 candidate(s) on eligible nodes), even when idle',
  );
  // An empty candidate set can never be served either.
  const empty = structuredClone(snap);
  empty.candidateSets[0] = [];
  assert.equal(decide(empty, Fit.Tightest)[0].tag, 'reject');
  // Its two candidates held: it waits.
  const held = structuredClone(snap);
  claimsOfPod(held, 0)[0].requests[0].alternatives[0].count = 2;
  hold(held.nodes[0].gpus[1]);
  held.pending[0].preemption = 'never';
  decisions = decide(held, Fit.Tightest);
  assert.equal(decisions[0].tag, 'wait');
  assert.equal(
    why(decisions[0]),
    'no eligible node has 2 device(s) for claim ml/train request "gpus" (2 candidate(s) on eligible nodes) free right now; at most 1 free on any eligible node',
  );
  const cluster = new Cluster(held);
  const want = cluster.want(0);
  assert.ok(!cluster.claimsShortfall(want).permanent);
  assert.ok(!cluster.shortfall(want).permanent, 'shortfall delegates');
  assert.deepEqual(cluster.unplaced(want), decisions[0], 'unplaced delegates');
});

test('a pod whose claims are allocated goes to its eligible node without devices', () => {
  const snap = snapshot([h100('a', 2), h100('b', 2)], []);
  push(snap, draRequest('ml/ready', []));
  restrict(snap, 0, [1]);
  let decisions = decide(snap, Fit.Tightest);
  const [n, chosen] = choices(decisions[0]);
  assert.equal(n, 1);
  assert.deepEqual(chosen, []);
  const verdict = checked(snap, decisions);
  if (verdict !== null) assert.equal(verdict.accepted.length, 1);
  // No eligible node at all.
  restrict(snap, 0, []);
  decisions = decide(snap, Fit.Tightest);
  assert.equal(decisions[0].tag, 'reject');
  assert.equal(why(decisions[0]), reason.noEligibleNode());
});

test('DRA and GPUResource pods of one round share no GPU, in priority order', () => {
  const snap = snapshot([h100('a', 4)], [request('ml/old', 2, 'exclusive', 0), request('ml/late', 1, 'exclusive', 0)]);
  const set = allGpus(snap, [[0, 4]]);
  const dra = oneClaim('ml/dra', [['gpus', 3, set]]);
  dra.priority = 10;
  push(snap, dra);
  snap.pending[1].createdMs = 5n;
  const decisions = decide(snap, Fit.Tightest);
  // The DRA pod goes first (priority), then the older GPU pod waits.
  assert.equal(podOf(decisions[0]), 2);
  assert.deepEqual(choices(decisions[0])[1][0].gpus, [0, 1, 2]);
  assert.equal(of(snap, decisions, 'ml/old').tag, 'wait');
  const late = of(snap, decisions, 'ml/late');
  assert.equal(late.tag, 'assign');
  assert.deepEqual([...late.val.gpus], [3]);
});

test('MIG instances exclude their parent within a pod and across the round', () => {
  // Positions: 0 = GPU 0, 1 and 2 its instances, 3 = GPU 1.
  const n = withMig(node('a', 2, 'NVIDIA A100', 81920), 0, [['1g.10gb', 9856], ['1g.10gb', 9856]]);
  let snap = snapshot([n], [request('ml/whole', 2, 'exclusive', 0)]);
  const mig = candidateSet(snap, [[0, 1], [0, 2]]);
  const dra = oneClaim('ml/mig', [['slice', 1, mig]]);
  dra.priority = 1;
  push(snap, dra);
  let decisions = decide(snap, Fit.Tightest);
  assert.deepEqual(choices(decisions[0])[1][0].gpus, [1]);
  assert.equal(decisions[1].tag, 'wait', `GPU 0 has an instance held now: ${JSON.stringify(decisions, show)}`);
  // A whole GPU and its instance never go to one pod.
  snap = snapshot([n], []);
  const both = candidateSet(snap, [[0, 0], [0, 1]]);
  push(snap, oneClaim('ml/both', [['gpus', 2, both]]));
  decisions = decide(snap, Fit.Tightest);
  assert.equal(why(decisions[0]), 'no eligible node has 2 device(s) for claim ml/both, even when idle');
});

test('devices only a DRA driver publishes go to DRA pods only', () => {
  const n = h100('a', 2);
  for (const g of n.gpus) g.publishedBy = 'dra-driver';
  const snap = snapshot([n], [request('ml/gpu', 1, 'exclusive', 0)]);
  const set = allGpus(snap, [[0, 2]]);
  push(snap, oneClaim('ml/dra', [['gpus', 2, set]]));
  const decisions = decide(snap, Fit.Tightest);
  assert.equal(of(snap, decisions, 'ml/gpu').tag, 'reject');
  assert.deepEqual(choices(of(snap, decisions, 'ml/dra'))[1][0].gpus, [0, 1]);
});

test('the tenant limit counts DRA devices', () => {
  let snap = snapshot([h100('a', 8)], []);
  const set = allGpus(snap, [[0, 8]]);
  push(snap, oneClaim('ml/p0', [['gpus', 2, set]]));
  push(snap, oneClaim('ml/p1', [['gpus', 1, set], ['more', 1, set]]));
  push(snap, request('ml/p2', 1, 'exclusive', 0));
  snap.pending.forEach((r, i) => {
    r.createdMs = BigInt(i);
    r.tenant = 0;
  });
  snap.tenants = [tenant('ml', { quota: 0, limit: 4, holding: 1, waiting: 5 })];
  const decisions = decide(snap, Fit.Tightest);
  assert.equal(decisions[0].tag, 'assign');
  assert.equal(why(decisions[1]), 'tenant ml holds 3 of its limit 4 GPUs (GPUTenant ml: spec.limit); this pod needs 2 more');
  assert.equal(decisions[2].tag, 'assign', '1 held + 2 + 1 = 4');
  // placeClaims checks what it picks too: a later alternative of 3.
  snap = structuredClone(snap);
  snap.pending.length = 1;
  hold(snap.nodes[0].gpus[0]);
  const zero = candidateSet(snap, [[0, 0]]);
  const alternatives = claimsOfPod(snap, 0)[0].requests[0].alternatives;
  alternatives[0] = { subrequest: 'one', count: 1, candidates: zero };
  alternatives.push({ subrequest: 'four', count: 4, candidates: set });
  const cluster = new Cluster(snap);
  const want = cluster.want(0);
  assert.equal(cluster.overTenantLimit(want), null, '1 held + 1 asked');
  assert.equal(cluster.placeClaims(want, Fit.Tightest), null, '4 would pass it');
});

test('claims of one pod take distinct devices and commit together', () => {
  const snap = snapshot([h100('a', 4), h100('b', 4)], []);
  const set = allGpus(snap, [[0, 4], [1, 4]]);
  push(snap, draRequest('ml/p', [claim('ml/x', [['gpus', 2, set]]), claim('ml/y', [['gpus', 1, set], ['spare', 1, set]])]));
  push(snap, oneClaim('ml/q', [['gpus', 1, set]]));
  snap.pending[1].createdMs = 1n;
  const decisions = decide(snap, Fit.Tightest);
  const [n, chosen] = choices(decisions[0]);
  assert.equal(n, 0);
  assert.deepEqual(
    chosen.map((c) => [c.claim, c.request, c.gpus]),
    [
      [0, 0, [0, 1]],
      [1, 0, [2]],
      [1, 1, [3]],
    ],
  );
  // The node is full: the next pod goes to the other one.
  assert.deepEqual(choices(decisions[1]), [1, [{ claim: 0, request: 0, alternative: 0, gpus: [0] }]]);
  const want = new Cluster(snap).want(0);
  assert.deepEqual([want.devices(), reason.asked(want.request)], [4, '2 device(s) for claim ml/x, 2 device(s) for claim ml/y']);
  assert.equal(want.describe(), '2 device(s) for claim ml/x, 2 device(s) for claim ml/y');
  assert.ok(want.isDra() && want.claims().length === 2);
});

test('gang members asking through claims are left to their gang', () => {
  const snap = snapshot([h100('a', 4)], [request('ml/g0', 1, 'exclusive', 0)]);
  const set = allGpus(snap, [[0, 4]]);
  push(snap, oneClaim('ml/g1', [['gpus', 1, set]]));
  gang(snap, 'ml/gang', 1, [0, 1]);
  const decisions = placeEach(snap, Fit.Tightest);
  checked(snap, decisions);
  assert.equal(decisions.length, 1, JSON.stringify(decisions, show));
  assert.equal(podOf(decisions[0]), 0);
});

test('positions out of range are skipped', () => {
  // The host never sends them (its snapshot check refuses them): the SDK's
  // own decisions only.
  const snap = snapshot([h100('a', 2)], []);
  const set = candidateSet(snap, [[0, 1], [0, 7], [5, 0]]);
  push(snap, oneClaim('ml/p', [['gpus', 1, set], ['no', 1, 99]]));
  let decisions = placeEach(snap, Fit.Tightest);
  assert.equal(decisions[0].tag, 'reject', JSON.stringify(decisions, show));
  snap.pending[0] = oneClaim('ml/p', [['gpus', 1, set]]);
  snap.pending[0].namespace = snap.namespaces.indexOf('ml');
  decisions = placeEach(snap, Fit.Tightest);
  assert.deepEqual(choices(decisions[0])[1][0].gpus, [1]);
});

// A large round of GPUResource pods with DRA pods of every kind among them:
// one decision each, and the host accepts all of them.
test('a large mixed round is accepted whole', () => {
  const snap = large(60, 200);
  const every = [];
  for (let n = 0; n < snap.nodes.length; n++) for (let g = 0; g < 8; g++) every.push([n, g]);
  const set = candidateSet(snap, every);
  const half = candidateSet(
    snap,
    every.filter(([n]) => n % 2 === 0),
  );
  // A value per device: its half of the node's GPUs.
  const values = every.map(([n, g]) => ({ device: { node: n, gpu: g }, value: Math.floor(g / 4) }));
  for (let i = 0; i < 120; i++) {
    const c = claim(`ml/c${i}`, [
      ['a', 1 + (i % 4), i % 3 === 0 ? half : set],
      ['b', i % 2, set],
    ]);
    if (i % 5 === 0) c.requests[0].alternatives.unshift({ subrequest: 'big', count: 8, candidates: set });
    if (i % 4 === 1) {
      c.constraints.push({ requests: new Uint32Array(0), distinct: i % 8 === 1, attribute: 'numa', values: values.slice() });
    }
    const r = draRequest(`ml/dra${i}`, [c]);
    r.priority = i % 3;
    r.createdMs = BigInt(i);
    push(snap, r);
  }
  for (const fit of [Fit.Tightest, Fit.Loosest]) {
    const decisions = decide(snap, fit);
    const verdict = checked(snap, decisions);
    const placed =
      verdict !== null
        ? verdict.accepted.map((p) => p.pod)
        : decisions.filter((d) => d.tag === 'assign').map((d) => snap.pending[d.val.pod].pod);
    const draPlaced = placed.filter((p) => p.startsWith('ml/dra')).length;
    assert.ok(draPlaced > 20, `${draPlaced} DRA pods placed`);
    assert.ok(placed.length > draPlaced);
  }
});
