// Differential check: the SDK's `placeEach` against the Rust binpack
// (Fit.Tightest) and spread (Fit.Loosest) components, on random snapshots
// (MIG, NVLink rings and pairs, held, shared, unhealthy and DRA-published
// GPUs, running pods to preempt, PodDisruptionBudgets, tenants with limits,
// gangs, eligible sets, every placement config form; DRA pods with claims of
// one to three requests, firstAvailable alternatives, candidate sets of whole
// GPUs, MIG instances or both, matchAttribute and distinctAttribute
// constraints) and on `large` rounds, with and without DRA pods.
// Decisions must be identical, field for field; a config one side refuses
// the other must refuse too.
//
//   node rust-agreement.mjs ORACLE_DIR [--seeds N] [--rounds N]
//
// ORACLE_DIR holds binpack/binpack.js and spread/spread.js, the Rust
// components transpiled by jco (`build.sh --agree` makes it, in the cache).
// Not part of `build.sh --test`: it needs the toolchain and built Rust
// components.
import { pathToFileURL } from 'node:url';

import { Fit, placeEach } from './sdk/index.js';
import {
  claim,
  draRequest,
  gang,
  large,
  node,
  nodeSet,
  nvlinkOf,
  request,
  snapshot,
  tenant,
  withFullNvlink,
  withMig,
  withNvlink,
} from './sdk/testing.js';

const args = process.argv.slice(2);
const oracleDir = args[0];
const option = (name, fallback) => {
  const at = args.indexOf(name);
  return at < 0 ? fallback : Number(args[at + 1]);
};
if (oracleDir === undefined) {
  console.error('usage: node rust-agreement.mjs ORACLE_DIR [--seeds N] [--rounds N]');
  process.exit(2);
}

// A trap poisons a component instance: import it afresh after one.
let generation = 0;
const instances = {};
async function oracle(fit) {
  if (instances[fit] === undefined) {
    const file = fit === Fit.Tightest ? 'binpack/binpack.js' : 'spread/spread.js';
    const url = pathToFileURL(`${oracleDir}/${file}`);
    url.search = `?${generation++}`;
    instances[fit] = await import(url.href);
  }
  return instances[fit];
}

const show = (v) =>
  JSON.stringify(v, (k, x) =>
    typeof x === 'bigint' ? `${x}` : x instanceof Uint32Array || x instanceof BigUint64Array ? [...x].map(String) : x,
  );

let seed = 1;
const rnd = (n) => {
  seed = (seed * 1103515245 + 12345) % 2147483648;
  return Math.floor((seed / 2147483648) * n);
};
const pick = (xs) => xs[rnd(xs.length)];

const MODELS = ['NVIDIA H100 80GB HBM3', 'NVIDIA A100-SXM4-40GB', 'NVIDIA L4'];
const CONFIGS = [
  '',
  '{"nvlink":"require"}',
  '{"nvlink":"ignore"}',
  '{"preemption":false}',
  '{"preferNvlink":false}',
  '{"nvlink":"require","preemption":false}',
  '{"nvlink":"prefer"}',
  '[false,"require",true]',
  '{"nvlink":{"require":null}}',
  '{"nvlink":null,"preferNvlink":false}',
  '{"nvlink":"Require"}',
  '{"foo":1}',
  '{"nvlink":"prefer","nvlink":"ignore"}',
  '\ufeff',
  ' \u0085 ',
];

function randomNode(i, mig) {
  const kind = mig && rnd(3) !== 0 ? 4 : rnd(9);
  const model = pick([0, 1, 2]);
  const mem = [81559, 40960, 23034][model];
  let n;
  if (kind === 0) n = withFullNvlink(node(`n${i}`, 8, model, mem));
  else if (kind === 1) n = withNvlink(node(`n${i}`, 4, model, mem), [[0, 1], [1, 2], [2, 3], [3, 0]]);
  else if (kind === 2) n = withNvlink(node(`n${i}`, 4, model, mem), [[0, 1], [2, 3]]);
  else if (kind === 3) {
    n = node(`n${i}`, 4, model, mem);
    n.gpus[1].memoryMib = 16384n;
    n.gpus[2].model = (model + 1) % 3;
  } else if (kind === 4) {
    n = withMig(node(`n${i}`, 2, 1, 81920), 1, [['1g.10gb', 9856], ['1g.10gb', 9856], ['3g.40gb', 40192]]);
    n = withMig(n, 0, [['1g.10gb', 9856]]);
    if (rnd(3) === 0) n.gpus[rnd(n.gpus.length)].held = true;
    if (rnd(4) === 0) n.gpus[0].healthy = false;
    if (rnd(5) === 0) n.gpus[0].publishedBy = 'dra-driver';
  } else if (kind === 5) n = { name: `n${i}`, labels: [], gpus: [] };
  else if (kind === 6) {
    n = node(`n${i}`, 8, model, mem);
    for (const g of n.gpus) g.nvlink = nvlinkOf([rnd(8), rnd(8), rnd(70)]);
  } else if (kind === 7) {
    n = withNvlink(node(`n${i}`, 6, model, mem), [[0, 1], [1, 2], [0, 2], [3, 4], [4, 5], [3, 5], [2, 3]]);
  } else {
    n = node(`n${i}`, 1 + rnd(8), model, mem);
  }
  for (const g of n.gpus) {
    const r = rnd(14);
    if (r === 0) g.healthy = false;
    else if (r === 1) g.publishedBy = 'dra-driver';
    else if (r === 2) g.publishedBy = 'both';
    else if (r === 3 && g.mig === undefined) {
      g.sharedOwners = 1;
      g.allocatedMib = 8192n;
    }
  }
  return n;
}

function runningPod(pod, node, gpus, extra) {
  return {
    pod,
    namespace: 0,
    tenant: undefined,
    priority: rnd(4) - 1,
    node,
    gpus: Uint32Array.from(gpus),
    sharedMib: 0n,
    startedMs: BigInt(rnd(5)),
    gang: undefined,
    evictable: rnd(7) !== 0,
    protectedMs: rnd(7) === 0 ? 5n : 0n,
    ...extra,
  };
}

/**
 * A random candidate set over `nodes` (pushed to `sets`, its index
 * returned), sorted by node then GPU and each once, as the host sends them:
 * every whole GPU, the whole GPUs of some nodes, MIG instances only, a random
 * mix of GPUs and instances (a whole GPU and its instance may both be
 * candidates), one model's GPUs, none; now and then with a position past a
 * node's GPUs or past the nodes (the host sends none; both sides skip them).
 */
function randomSet(nodes, sets) {
  const kind = rnd(7);
  const model = rnd(3);
  const some = nodes.map(() => rnd(2) === 0);
  const set = [];
  nodes.forEach((n, ni) => {
    n.gpus.forEach((g, gi) => {
      const whole = g.mig === undefined;
      const keep =
        kind === 0
          ? whole
          : kind === 1
            ? whole && some[ni]
            : kind === 2
              ? !whole
              : kind === 3 || kind === 4
                ? rnd(3) !== 0
                : kind === 5
                  ? whole && g.model === model
                  : false;
      if (keep) set.push({ node: ni, gpu: gi });
    });
    if (rnd(25) === 0) set.push({ node: ni, gpu: n.gpus.length + rnd(3) });
  });
  if (rnd(25) === 0) set.push({ node: nodes.length + rnd(2), gpu: 0 });
  sets.push(set);
  return sets.length - 1;
}

/** A random claim constraint over a claim of `requests` requests, with values for the devices of `nodes`. */
function randomConstraint(nodes, requests) {
  const bound = [];
  if (rnd(2) === 0) {
    for (let r = 0; r < requests; r++) if (rnd(2) === 0) bound.push(r);
    if (rnd(8) === 0) bound.push(requests + rnd(2));
  }
  const spread = 1 + rnd(4);
  const values = [];
  nodes.forEach((n, ni) => {
    n.gpus.forEach((g, gi) => {
      if (rnd(8) === 0) return;
      // A PCIe root or NUMA node per pair of GPUs, an instance its parent's.
      const at = g.mig === undefined ? gi : g.mig.parent;
      const value = rnd(3) === 0 ? rnd(spread) : Math.floor(at / 2) % spread;
      values.push({ device: { node: ni, gpu: gi }, value });
      // Now and then a device listed twice: the first value wins.
      if (rnd(20) === 0) values.push({ device: { node: ni, gpu: gi }, value: value + 1 });
    });
  });
  if (rnd(2) === 0) values.reverse();
  return {
    requests: Uint32Array.from(bound),
    distinct: rnd(2) === 0,
    attribute: pick(['resource.kubernetes.io/pcieRoot', 'gpu.nvidia.com/numaNode']),
    values,
  };
}

/**
 * A random DRA pod: one or two claims (now and then none: allocated
 * already) of one to three requests, each with one alternative or a
 * firstAvailable list of up to three, over random candidate sets; some
 * claims with a matchAttribute or distinctAttribute constraint.
 */
function randomDraPod(p, nodes, sets) {
  const claims = [];
  const count = rnd(10) === 0 ? 0 : 1 + (rnd(3) === 0 ? 1 : 0);
  for (let c = 0; c < count; c++) {
    const requests = rnd(12) === 0 ? 0 : 1 + rnd(3);
    const made = claim(
      `ns${rnd(3)}/claim${p}-${c}`,
      Array.from({ length: requests }, (_, r) => [`req${r}`, pick([0, 1, 1, 1, 2, 2, 3, 4, 8]), randomSet(nodes, sets)]),
    );
    for (const r of made.requests) {
      const more = rnd(3) === 0 ? 1 + rnd(2) : 0;
      if (more > 0 || rnd(6) === 0) r.alternatives[0].subrequest = 'first';
      for (let k = 0; k < more; k++) {
        r.alternatives.push({ subrequest: `alt${k}`, count: pick([0, 1, 1, 2, 3, 8]), candidates: randomSet(nodes, sets) });
      }
      if (rnd(40) === 0) r.alternatives = [];
    }
    if (rnd(3) === 0) made.constraints.push(randomConstraint(nodes, requests));
    if (rnd(12) === 0) made.constraints.push(randomConstraint(nodes, requests));
    claims.push(made);
  }
  const extra = { priority: rnd(5) - 1, createdMs: BigInt(rnd(4)) };
  if (rnd(6) === 0) extra.preemption = 'never';
  return draRequest(`ns${rnd(3)}/dra${p}`, claims, extra);
}

/** A random snapshot; `full`: most GPUs held by pods of 1–3 GPUs (preemption); `mig`: mostly MIG nodes and requests. */
function randomSnapshot(full, mig) {
  const nodes = [];
  const count = 1 + rnd(10);
  for (let i = 0; i < count; i++) nodes.push(randomNode(i, mig));
  const pending = [];
  const candidateSets = [];
  const pods = 1 + rnd(20);
  for (let p = 0; p < pods; p++) {
    if (rnd(4) === 0) {
      pending.push(randomDraPod(p, nodes, candidateSets));
      continue;
    }
    const sharing = rnd(4) === 0 ? 'shared' : 'exclusive';
    const extra = { priority: rnd(5) - 1, createdMs: BigInt(rnd(4)) };
    const r = rnd(10);
    if (r === 0) extra.model = pick(['NVIDIA H100*', '*A100*', 'AMD*', 'NVIDIA L?']);
    if (r === 1 || (mig && r < 6)) extra.migProfile = pick(['1g.10gb', '3g.40gb', '7g.80gb']);
    if (rnd(8) === 0) extra.preemption = 'never';
    const c = pick([0, 1, 1, 1, 2, 2, 3, 4, 8, 9]);
    const mem = sharing === 'shared' ? pick([0, 4096, 8192, 30000]) : pick([0, 0, 20000, 40960, 65536]);
    pending.push(request(`ns${rnd(3)}/p${p}-${rnd(100)}`, c, sharing, mem, extra));
  }
  const snap = snapshot(MODELS, nodes, pending, { migProfiles: ['1g.10gb', '3g.40gb'], candidateSets });
  // Now and then a candidate set index past the end (the host sends none).
  if (rnd(30) === 0) {
    const dra = snap.pending.find((r) => r.ask.tag === 'claims' && r.ask.val.length > 0 && r.ask.val[0].requests.length > 0);
    const alternative = dra === undefined ? undefined : dra.ask.val[0].requests[0].alternatives[0];
    if (alternative !== undefined) alternative.candidates = candidateSets.length + 5;
  }
  // Eligible sets: all, a random subset, none, one past the end.
  const subset = [];
  for (let i = 0; i < count; i++) if (rnd(2) === 0) subset.push(i);
  snap.eligibleSets.push(nodeSet(...subset), new BigUint64Array(0), nodeSet(count + 3, 0));
  for (const r of snap.pending) if (rnd(full ? 12 : 3) === 0) r.eligibleSet = rnd(5);
  nodes.forEach((n, ni) => {
    const carved = (k) => n.gpus.some((h) => h.mig !== undefined && h.mig.parent === k);
    if (full) {
      for (let gi = 0; gi < n.gpus.length; ) {
        const span = 1 + rnd(3);
        const gpus = [];
        for (let k = gi; k < Math.min(n.gpus.length, gi + span); k++) {
          if (n.gpus[k].sharedOwners === 0 && !(n.gpus[k].mig === undefined && carved(k))) gpus.push(k);
        }
        gi += span;
        if (gpus.length === 0 || rnd(5) === 0) continue;
        for (const k of gpus) Object.assign(n.gpus[k], { held: true, allocatedMib: n.gpus[k].memoryMib });
        snap.running.push(runningPod(`run${rnd(3)}/r${ni}-${gi}`, ni, gpus, { gang: rnd(12) === 0 ? 0 : undefined }));
      }
    }
    n.gpus.forEach((g, gi) => {
      const shared = g.sharedOwners > 0;
      if (full && !shared) return;
      if (!g.held && !shared && rnd(4) !== 0) return;
      if (!g.held && !shared) Object.assign(g, { held: true, allocatedMib: g.memoryMib });
      snap.running.push(
        runningPod(`run${rnd(3)}/s${ni}-${gi}`, ni, [gi], {
          tenant: rnd(4) === 0 ? 0 : undefined,
          sharedMib: shared ? 8192n : 0n,
          gang: rnd(10) === 0 ? 0 : undefined,
        }),
      );
    });
  });
  if (rnd(3) === 0) {
    snap.tenants = [tenant('t0', { limit: rnd(4) === 0 ? undefined : rnd(6), holding: rnd(3) }), tenant('t1', { limit: rnd(8) })];
    for (const r of snap.pending) if (rnd(2) === 0) r.tenant = rnd(3) === 0 ? 5 : rnd(2);
  }
  if (rnd(3) === 0 && snap.pending.length >= 3) {
    const members = [0, 1, 2].filter(() => rnd(4) !== 0);
    const g = gang(`ml/g${rnd(9)}`, 1 + rnd(4), members);
    g.bound = rnd(2);
    snap.gangs.push(g);
    for (const m of members) snap.pending[m].gang = 0;
    if (rnd(4) === 0) snap.pending[snap.pending.length - 1].gang = 7;
  }
  snap.config = pick(CONFIGS);
  return snap;
}

const tally = {
  agree: 0,
  differ: 0,
  preempt: 0,
  assign: 0,
  refused: 0,
  dra: 0,
  draLater: 0,
  draMig: 0,
  draWait: 0,
  draReject: 0,
  draPreempt: 0,
};

async function compare(snap, fit, label) {
  let want = null;
  let got = null;
  try {
    want = (await oracle(fit)).allocate(snap);
  } catch {
    instances[fit] = undefined;
  }
  try {
    got = placeEach(snap, fit);
  } catch {
    got = null;
  }
  if ((want === null) !== (got === null) || (want !== null && show(want) !== show(got))) {
    tally.differ++;
    console.log(`DIFFER ${label} (${fit}, config ${JSON.stringify(snap.config)})`);
    if (want === null || got === null) {
      console.log(`  rust ${want === null ? 'refused the round' : 'decided'}, js ${got === null ? 'refused the round' : 'decided'}`);
      return;
    }
    for (let i = 0; i < Math.max(want.length, got.length); i++) {
      if (show(want[i]) !== show(got[i])) {
        console.log(`  decision ${i}:\n    rust ${show(want[i])}\n    js   ${show(got[i])}`);
        break;
      }
    }
    return;
  }
  tally.agree++;
  if (got === null) tally.refused++;
  else
    for (const d of got) {
      if (d.tag === 'preempt') tally.preempt++;
      if (d.tag === 'assign') tally.assign++;
      const pod = d.tag === 'preempt' ? d.val.assignment.pod : d.val.pod;
      if (snap.pending[pod]?.ask.tag !== 'claims') continue;
      if (d.tag === 'assign') {
        tally.dra++;
        if (d.val.claims.some((c) => c.alternative > 0)) tally.draLater++;
        const gpus = snap.nodes[d.val.node].gpus;
        if (d.val.claims.some((c) => [...c.gpus].some((g) => gpus[g].mig !== undefined))) tally.draMig++;
      }
      if (d.tag === 'wait') tally.draWait++;
      if (d.tag === 'reject') tally.draReject++;
      if (d.tag === 'preempt') tally.draPreempt++;
    }
}

/**
 * Adds `count` DRA pods to `large`'s round, as the Rust SDK's test of a large
 * mixed round does: requests of 1–4 devices over every GPU or every other
 * node's, a second request of 0 or 1, a firstAvailable alternative of 8
 * first for every fifth, a NUMA-like constraint (match or distinct) for every
 * fourth.
 */
function withDraPods(snap, count) {
  const every = [];
  snap.nodes.forEach((nd, ni) => nd.gpus.forEach((g, gi) => every.push({ node: ni, gpu: gi })));
  snap.candidateSets.push(every, every.filter((g) => g.node % 2 === 0));
  const [set, half] = [snap.candidateSets.length - 2, snap.candidateSets.length - 1];
  const values = every.map((device) => ({ device, value: Math.floor(device.gpu / 4) }));
  for (let i = 0; i < count; i++) {
    const c = claim(`team-${i % 7}/c${i}`, [
      ['a', 1 + (i % 4), i % 3 === 0 ? half : set],
      ['b', i % 2, set],
    ]);
    if (i % 5 === 0) c.requests[0].alternatives.unshift({ subrequest: 'big', count: 8, candidates: set });
    if (i % 4 === 1) c.constraints.push({ requests: new Uint32Array(0), distinct: i % 8 === 1, attribute: 'numa', values });
    const r = draRequest(`team-${i % 7}/dra-${i}`, [c], { priority: i % 3, createdMs: 1700000000000n + BigInt(i) * 15n });
    r.namespace = snap.namespaces.indexOf(`team-${i % 7}`);
    snap.pending.push(r);
  }
}

const seeds = option('--seeds', 6);
const rounds = option('--rounds', 300);
for (let s = 1; s <= seeds; s++) {
  for (let k = 0; k < rounds; k++) {
    seed = s * 7919 + k;
    const snap = randomSnapshot(s % 3 === 1, s % 3 === 2);
    for (const fit of [Fit.Tightest, Fit.Loosest]) await compare(snap, fit, `seed ${s} round ${k}`);
  }
}
for (const [n, p] of [
  [60, 200],
  [120, 400],
]) {
  for (const config of CONFIGS.slice(0, 6)) {
    for (const [rings, dra] of [
      [false, false],
      [true, false],
      [false, true],
    ]) {
      const snap = large(n, p);
      if (rings) {
        snap.nodes.forEach((nd, i) => {
          if (i % 4 === 0) nd.gpus.forEach((g, j) => (g.nvlink = nvlinkOf([(j + 7) % 8, (j + 1) % 8])));
        });
      }
      if (rings) gang(snap, 'team-1/train', 3, [1, 8, 15]);
      if (dra) withDraPods(snap, Math.floor(p / 2));
      snap.config = config;
      const label = `large(${n}, ${p})${rings ? ' with rings and a gang' : ''}${dra ? ' with DRA pods' : ''}`;
      for (const fit of [Fit.Tightest, Fit.Loosest]) await compare(snap, fit, label);
    }
  }
}
console.log(
  `${tally.agree} rounds agree (${tally.assign} assignments, ${tally.dra} of DRA pods: ${tally.draLater} on a later firstAvailable alternative, ${tally.draMig} with MIG instances; ${tally.draWait} DRA waits, ${tally.draReject} DRA rejects; ${tally.preempt} preemptions (${tally.draPreempt} of DRA pods), ${tally.refused} configs refused by both), ${tally.differ} differ`,
);
process.exit(tally.differ === 0 ? 0 : 1);
