// Differential check: the SDK's `placeEach` against the Rust binpack
// (Fit.Tightest) and spread (Fit.Loosest) components, on random snapshots
// (MIG, NVLink rings and pairs, held, shared, unhealthy and DRA-published
// GPUs, running pods to preempt, PodDisruptionBudgets, tenants with limits,
// gangs, eligible sets, every placement config form) and on `large` rounds.
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

/** A random snapshot; `full`: most GPUs held by pods of 1–3 GPUs (preemption); `mig`: mostly MIG nodes and requests. */
function randomSnapshot(full, mig) {
  const nodes = [];
  const count = 1 + rnd(10);
  for (let i = 0; i < count; i++) nodes.push(randomNode(i, mig));
  const pending = [];
  const pods = 1 + rnd(20);
  for (let p = 0; p < pods; p++) {
    if (rnd(15) === 0) {
      pending.push(draRequest(`ns${rnd(3)}/dra${p}`, [], { priority: rnd(3) }));
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
  const snap = snapshot(MODELS, nodes, pending, { migProfiles: ['1g.10gb', '3g.40gb'] });
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

const tally = { agree: 0, differ: 0, preempt: 0, assign: 0, refused: 0 };

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
    for (const rings of [false, true]) {
      const snap = large(n, p);
      if (rings) {
        snap.nodes.forEach((nd, i) => {
          if (i % 4 === 0) nd.gpus.forEach((g, j) => (g.nvlink = nvlinkOf([(j + 7) % 8, (j + 1) % 8])));
        });
      }
      if (rings) gang(snap, 'team-1/train', 3, [1, 8, 15]);
      snap.config = config;
      const label = `large(${n}, ${p})${rings ? ' with rings and a gang' : ''}`;
      for (const fit of [Fit.Tightest, Fit.Loosest]) await compare(snap, fit, label);
    }
  }
}
console.log(
  `${tally.agree} rounds agree (${tally.assign} assignments, ${tally.preempt} preemptions, ${tally.refused} configs refused by both), ${tally.differ} differ`,
);
process.exit(tally.differ === 0 ? 0 : 1);
