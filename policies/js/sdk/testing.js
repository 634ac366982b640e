// Part of the SDK: snapshot builders for unit tests, shaped as the component
// receives them (u64 fields are BigInts, lists of u32 are Uint32Arrays, node
// sets are BigUint64Arrays of bit words, a GPU's `nvlink` is a BigInt bit set
// of GPU indices), on par with the Rust builders (crates/contract/src/testing.rs).
//
// GPU models, MIG profiles, label keys and namespaces are tables of the
// snapshot that entries index. The builders take a model as its index or its
// name, a MIG profile and a label key by name; `snapshot` (and
// `refreshTables`, after later edits) turns names into indices, adding them to
// the snapshot's tables.
//
// `validate(snapshot, decisions)` holds a round's decisions to the host's own
// rules, the controller's validator, through `wasmgpu policy validate`; the
// checks the SDK makes itself (`Cluster` never offers a GPU it has given out)
// are no substitute for it.

import { spawnSync } from 'node:child_process';
import { accessSync, constants, mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';

import { setMembers } from './index.js';
import { compareText } from './order.js';

// Labels set by `withLabels`, per node, until `snapshot` or `refreshTables`
// writes them into the node's `labels` (by the snapshot's `labelKeys`).
const pendingLabels = new WeakMap();
// The names GPU models and MIG profiles were given by (per GPU, per MIG
// record), so that a node built once can go into several snapshots.
const modelNames = new WeakMap();
const profileNames = new WeakMap();

// A healthy, free GPU published by the wasmgpu agent, no NVLink. `model`: an
// index into the snapshot's `models`, or a model name.
export function gpu(index, model, memoryMib) {
  return {
    index,
    model,
    memoryMib: BigInt(memoryMib),
    allocatedMib: 0n,
    held: false,
    sharedOwners: 0,
    numaNode: undefined,
    nvlink: 0n,
    healthy: true,
    mig: undefined,
    publishedBy: 'agent',
  };
}

// `count` identical whole GPUs (indices 0…) of `model` (an index or a name);
// no labels (see `withLabels`).
export function node(name, count, model, memoryMib) {
  const gpus = [];
  for (let i = 0; i < count; i++) gpus.push(gpu(i, model, memoryMib));
  return { name, labels: [], gpus };
}

// The NVLink bit set of GPU indices `indices` (indices of 64 and more left out).
export function nvlinkOf(indices) {
  let set = 0n;
  for (const i of indices) if (i < 64) set |= 1n << BigInt(i);
  return set;
}

// Links every pair of whole GPUs on the node (as on an HGX board).
export function withFullNvlink(n) {
  const whole = n.gpus.filter((g) => g.mig === undefined);
  for (const g of whole) g.nvlink = nvlinkOf(whole.filter((h) => h !== g).map((h) => h.index));
  return n;
}

// Links the GPUs of each pair [a, b] (positions in the node's `gpus`) with
// NVLink, on both ends: withNvlink(n, [[0, 1], [2, 3]]) makes two bridged
// pairs, withNvlink(n, [[0, 1], [1, 2], [2, 3], [3, 0]]) a ring. Links already
// there are kept. Throws on a position the node lacks, or a === b.
export function withNvlink(n, pairs) {
  for (const [a, b] of pairs) {
    if (n.gpus[a] === undefined || n.gpus[b] === undefined || a === b) {
      throw new RangeError(`withNvlink: [${a}, ${b}] is not a pair of distinct GPUs of node ${n.name} (${n.gpus.length} GPUs)`);
    }
    n.gpus[a].nvlink = BigInt(n.gpus[a].nvlink) | nvlinkOf([n.gpus[b].index]);
    n.gpus[b].nvlink = BigInt(n.gpus[b].nvlink) | nvlinkOf([n.gpus[a].index]);
  }
  return n;
}

// Adds `profiles` ([name, memoryMib] pairs) as MIG instances of the node's
// GPU at position `parent`, right after the parent's other instances; each
// copies the parent (index, model, health, held, …) with its own memory, no
// NVLink. Positions of later GPUs shift: build MIG nodes last.
export function withMig(n, parent, profiles) {
  const base = n.gpus[parent];
  let at = parent + 1;
  while (n.gpus[at] !== undefined && n.gpus[at].mig !== undefined) at++;
  profiles.forEach(([profile, memoryMib], k) => {
    const instance = { ...base, memoryMib: BigInt(memoryMib), nvlink: 0n, mig: { parent, profile } };
    if (modelNames.has(base)) modelNames.set(instance, modelNames.get(base));
    n.gpus.splice(at + k, 0, instance);
  });
  return n;
}

// Sets labels on the node (`[[key, value], …]` or `{ key: value }`),
// replacing the value of a key it already has. `snapshot` (or
// `refreshTables`) adds the keys to the snapshot's `labelKeys`, as if the
// policy had asked for them, and gives every node a value or none per key.
export function withLabels(n, labels) {
  const pairs = Array.isArray(labels) ? labels : Object.entries(labels);
  let map = pendingLabels.get(n);
  if (map === undefined) {
    map = new Map();
    pendingLabels.set(n, map);
  }
  for (const [key, value] of pairs) map.set(key, value);
  return n;
}

// A node set (an entry of `snapshot.eligibleSets`) holding node positions `members`.
export function nodeSet(...members) {
  const words = new BigUint64Array(members.length === 0 ? 0 : Math.floor(Math.max(...members) / 64) + 1);
  for (const m of members) words[Math.floor(m / 64)] |= 1n << BigInt(m % 64);
  return words;
}

const SHAPE_KEYS = ['count', 'model', 'migProfile', 'memoryMib', 'sharing'];

// A GPUResource request. `extra` may set request fields (priority,
// createdMs, eligibleSet, gang, tenant, preemption, …) and shape fields
// (model, migProfile), which go into `ask.val`. Its `namespace` is set by
// `snapshot` (from the pod's `namespace/` prefix) unless `snapshot` is given
// `namespaces`.
export function request(pod, count, sharing, memoryMib, extra = {}) {
  const shape = { count, model: undefined, migProfile: undefined, memoryMib: BigInt(memoryMib), sharing };
  const fields = {};
  for (const [key, value] of Object.entries(extra)) {
    if (SHAPE_KEYS.includes(key)) shape[key] = key === 'memoryMib' ? BigInt(value) : value;
    else fields[key] = value;
  }
  return { ...base(pod), ask: { tag: 'gpus', val: shape }, ...fields };
}

// The GPU shape of a GPUResource request (its `ask.val`), to edit; throws for a DRA pod.
export function shape(req) {
  if (req.ask.tag !== 'gpus') throw new TypeError(`${req.pod} asks through DRA claims`);
  return req.ask.val;
}

// A DRA pod asking for `claims` (contract `claim` records, e.g. from `claim`;
// none by default: its claims are allocated already), otherwise as `request`
// builds one (priority 0, created at 0, eligible set 0); `extra` sets request
// fields.
export function draRequest(pod, claims = [], extra = {}) {
  return { ...base(pod), ask: { tag: 'claims', val: claims }, ...extra };
}

// A claim `name` (`namespace/name`) without constraints, with one request per
// `[name, count, candidateSet]`, each with one alternative (`exactly`: no
// subrequest). Add `firstAvailable` alternatives to a request's
// `alternatives` (`{ subrequest, count, candidates }`) and constraints to
// `constraints` (`{ requests: Uint32Array, distinct, attribute, values:
// [{ device: { node, gpu }, value }] }`) as needed.
export function claim(name, requests) {
  return {
    name,
    requests: requests.map(([request, count, candidates]) => ({
      name: request,
      alternatives: [{ subrequest: undefined, count, candidates }],
    })),
    constraints: [],
  };
}

// Adds a candidate set of the GPUs `[node, gpu]` (positions) to the
// snapshot, sorted and each once as the host sends them; returns its index,
// for an alternative's `candidates`.
export function candidateSet(snap, gpus) {
  const seen = new Set();
  const set = [];
  for (const [n, g] of gpus) {
    const key = `${n}/${g}`;
    if (seen.has(key)) continue;
    seen.add(key);
    set.push({ node: n, gpu: g });
  }
  set.sort((a, b) => a.node - b.node || a.gpu - b.gpu);
  snap.candidateSets.push(set);
  return snap.candidateSets.length - 1;
}

function base(pod) {
  return {
    pod,
    namespace: 0,
    tenant: undefined,
    priority: 0,
    preemption: 'preempt-lower-priority',
    createdMs: 0n,
    eligibleSet: 0,
    gang: undefined,
  };
}

// Two forms:
//
// * running(pod, node, gpus, extra): a running pod record holding GPU
//   positions `gpus` of node position `node` (exclusively unless
//   `extra.sharedMib` is set), to pass in `snapshot(…, { running })`; its
//   `namespace` is set by `snapshot`. The GPUs are not marked held.
// * running(snap, pod, priority, node, gpus, startedMs = 0), as the Rust
//   builder: adds to `snap.running` a pod of `priority` holding `gpus`
//   exclusively, marks them held (all their memory allocated), interns its
//   namespace, and returns its position in `running`. Evictable, not
//   protected.
export function running(...args) {
  if (typeof args[0] === 'object' && args[0] !== null && Array.isArray(args[0].running)) {
    const [snap, pod, priority, nodeAt, gpus, startedMs = 0] = args;
    for (const g of gpus) {
      const held = snap.nodes[nodeAt].gpus[g];
      held.held = true;
      held.allocatedMib = BigInt(held.memoryMib);
    }
    snap.running.push(runningPod(pod, nodeAt, gpus, { priority, startedMs: BigInt(startedMs), namespace: internNamespace(snap, pod) }));
    return snap.running.length - 1;
  }
  const [pod, nodeAt, gpus, extra = {}] = args;
  return runningPod(pod, nodeAt, gpus, extra);
}

function runningPod(pod, nodeAt, gpus, extra) {
  return {
    pod,
    namespace: 0,
    tenant: undefined,
    priority: 0,
    node: nodeAt,
    gpus: Uint32Array.from(gpus),
    sharedMib: 0n,
    startedMs: 0n,
    gang: undefined,
    evictable: true,
    protectedMs: 0n,
    ...extra,
  };
}

function namespaceName(pod) {
  const slash = pod.indexOf('/');
  return slash < 0 ? 'default' : pod.slice(0, slash);
}

function internNamespace(snap, pod) {
  const name = namespaceName(pod);
  let at = snap.namespaces.indexOf(name);
  if (at < 0) {
    snap.namespaces.push(name);
    at = snap.namespaces.length - 1;
  }
  return at;
}

// Fills node position `node` of `snap` with running pods `${prefix}${g}` of
// `priority`, one per GPU g (exclusive), each started at g ms: a full node a
// preemption may free (the Rust `running_on_each_gpu`).
export function runningOnEachGpu(snap, nodeAt, prefix, priority) {
  const count = snap.nodes[nodeAt].gpus.length;
  for (let g = 0; g < count; g++) running(snap, `${prefix}${g}`, priority, nodeAt, [g], g);
}

// Two forms:
//
// * gang(name, minMember, pending, extra): a gang record of pending positions
//   `pending` that must hold GPUs `minMember` at a time, none bound or
//   running, to pass in `snapshot(…, { gangs })` (set the members' `gang`
//   yourself).
// * gang(snap, name, minMember, members), as the Rust builder: adds the gang
//   to `snap.gangs`, sets its members' `gang`, and returns its index.
export function gang(...args) {
  if (typeof args[0] === 'object' && args[0] !== null && Array.isArray(args[0].gangs)) {
    const [snap, name, minMember, members] = args;
    snap.gangs.push(gangRecord(name, minMember, members, {}));
    const index = snap.gangs.length - 1;
    for (const m of members) snap.pending[m].gang = index;
    return index;
  }
  const [name, minMember, pending, extra = {}] = args;
  return gangRecord(name, minMember, pending, extra);
}

function gangRecord(name, minMember, pending, extra) {
  return {
    name,
    minMember,
    bound: 0,
    pending: Uint32Array.from(pending),
    running: new Uint32Array(),
    ...extra,
  };
}

// A tenant record (`snapshot.tenants`): no quota or limit, holding and
// waiting nothing unless `extra` says so (`{ limit: 4, holding: 1 }`).
export function tenant(name, extra = {}) {
  return { name, weight: 1, quota: 0, limit: undefined, holding: 0, waiting: 0, ...extra };
}

// A snapshot, every request eligible on every node through eligible set 0.
// Two forms: snapshot(models, nodes, pending, extra) (models: the model
// table; GPUs name models by index or by name) and, as the Rust builder,
// snapshot(nodes, pending, extra) (models by name). `extra` sets any other
// field (running, gangs, tenants, config, migProfiles, labelKeys, …). Unless
// `extra.namespaces` is given, the namespace table is the sorted namespaces
// of the pods' names and each pod's `namespace` indexes it. Model, MIG
// profile and label-key names are added to the tables (`refreshTables`).
export function snapshot(...args) {
  const legacy = Array.isArray(args[2]);
  const [models, nodes, pending, extra = {}] = legacy ? args : [[], ...args];
  const snap = {
    round: 1n,
    models: models.slice(),
    migProfiles: [],
    namespaces: [],
    labelKeys: [],
    nodes,
    pending,
    running: [],
    eligibleSets: [nodeSet(...nodes.keys())],
    candidateSets: [],
    gangs: [],
    tenants: [],
    config: '',
    ...extra,
  };
  // The builders add names to these tables: copies, not the caller's arrays.
  snap.migProfiles = snap.migProfiles.slice();
  snap.labelKeys = snap.labelKeys.slice();
  if (extra.namespaces === undefined) {
    const pods = [...snap.pending, ...snap.running];
    snap.namespaces = [...new Set(pods.map((p) => namespaceName(p.pod)))].sort(compareText);
    for (const p of pods) p.namespace = snap.namespaces.indexOf(namespaceName(p.pod));
  }
  return refreshTables(snap);
}

// Turns the names builders left in `snap` into table indices: GPU models
// given by name (into `models`), MIG profiles by name (into `migProfiles`),
// labels set by `withLabels` (keys into `labelKeys`; every node gets a value
// or none per key). Names already in a table keep their index. Returns `snap`.
export function refreshTables(snap) {
  const intern = (table, name) => {
    let at = table.indexOf(name);
    if (at < 0) {
      table.push(name);
      at = table.length - 1;
    }
    return at;
  };
  for (const n of snap.nodes) {
    for (const g of n.gpus) {
      const model = typeof g.model === 'string' ? g.model : modelNames.get(g);
      if (model !== undefined) {
        g.model = intern(snap.models, model);
        modelNames.set(g, model);
      }
      if (g.mig !== undefined) {
        const profile = typeof g.mig.profile === 'string' ? g.mig.profile : profileNames.get(g.mig);
        if (profile !== undefined) {
          g.mig.profile = intern(snap.migProfiles, profile);
          profileNames.set(g.mig, profile);
        }
      }
    }
    const labels = pendingLabels.get(n);
    if (labels !== undefined) for (const key of labels.keys()) intern(snap.labelKeys, key);
  }
  for (const n of snap.nodes) {
    const labels = pendingLabels.get(n);
    const values = snap.labelKeys.map((key, k) => (labels !== undefined && labels.has(key) ? labels.get(key) : n.labels[k]));
    n.labels = values;
  }
  return snap;
}

// Restricts pending request `pod` (a position) to node positions `nodes`,
// through a new eligible set.
export function restrict(snap, pod, nodes) {
  snap.eligibleSets.push(nodeSet(...nodes));
  snap.pending[pod].eligibleSet = snap.eligibleSets.length - 1;
  return snap;
}

// Two forms:
//
// * assigned(decisions): the assignments as [pod, node, [gpus]] positions,
//   in decision order.
// * assigned(snap, decisions), as the Rust builder: [pod name, node name,
//   [GPU names]], GPUs named as the host names them (`GPU-{node}-{index}`,
//   `MIG-GPU-{node}-{index}-{k}` for the k-th instance of a GPU).
export function assigned(...args) {
  if (args.length === 1) {
    return args[0].filter((d) => d.tag === 'assign').map((d) => [d.val.pod, d.val.node, [...d.val.gpus]]);
  }
  const [snap, decisions] = args;
  return decisions
    .filter((d) => d.tag === 'assign')
    .map((d) => {
      const n = snap.nodes[d.val.node];
      const pod = snap.pending[d.val.pod];
      return [pod === undefined ? '?' : pod.pod, n === undefined ? '?' : n.name, [...d.val.gpus].map((g) => gpuName(n, g))];
    });
}

// The host's made-up name of GPU position `g` of node `n`.
export function gpuName(n, g) {
  const entry = n === undefined ? undefined : n.gpus[g];
  if (entry === undefined) return '?';
  const whole = `GPU-${n.name}-${entry.index}`;
  if (entry.mig === undefined) return whole;
  let k = 0;
  for (let i = 0; i < g; i++) if (n.gpus[i].mig !== undefined && n.gpus[i].mig.parent === entry.mig.parent) k++;
  return `MIG-${whole}-${k}`;
}

// The pending position a decision names (a preemption names it in its assignment).
export function podOf(decision) {
  return decision.tag === 'preempt' ? decision.val.assignment.pod : decision.val.pod;
}

// The decision naming pending position `pod`.
export function decisionOf(decisions, pod) {
  return decisions.find((d) => podOf(d) === pod);
}

// The decision about the pending pod named `pod` (`namespace/name`), if any.
export function decisionFor(snap, decisions, pod) {
  const at = snap.pending.findIndex((r) => r.pod === pod);
  return at < 0 ? undefined : decisionOf(decisions, at);
}

// A large, deterministic snapshot for benchmarks, the same as the Rust
// `large(nodes, pods)` builds: `nodes` nodes of 8 GPUs (alternating 8×H100
// 80GB with full NVLink and 8×A100 40GB in NVLink pairs), labelled with
// their hostname and one of three zones, about a quarter of the GPUs already
// in use, and `pods` pending requests of 1, 2, 4 or 8 GPUs, mostly exclusive,
// a fifth shared, some pinned to a model, a tenth restricted to one of three
// zones (eligible sets 1–3).
export function large(nodeCount, pods) {
  let rng = 0x9e3779b97f4a7c15n;
  const M = (1n << 64n) - 1n;
  const next = () => {
    // xorshift64*: deterministic, no dependency.
    rng ^= rng >> 12n;
    rng = (rng ^ (rng << 25n)) & M;
    rng ^= rng >> 27n;
    return (rng * 0x2545f4914f6cdd1dn) & M;
  };
  const nodes = [];
  for (let n = 0; n < nodeCount; n++) {
    const name = `gpu-node-${String(n).padStart(4, '0')}`;
    let built;
    if (n % 2 === 0) {
      built = withFullNvlink(node(name, 8, 'NVIDIA H100 80GB HBM3', 81559));
    } else {
      built = node(name, 8, 'NVIDIA A100-SXM4-40GB', 40960);
      for (const g of built.gpus) g.nvlink = nvlinkOf([g.index ^ 1]);
    }
    withLabels(built, [
      ['kubernetes.io/hostname', name],
      ['topology.kubernetes.io/zone', `zone-${n % 3}`],
    ]);
    built.gpus.forEach((g, i) => {
      g.numaNode = Math.floor(i / 4);
      const roll = next() % 8n;
      if (roll === 0n) {
        g.held = true;
        g.allocatedMib = g.memoryMib;
      } else if (roll === 1n) {
        g.sharedOwners = 1;
        g.allocatedMib = 8192n;
      }
    });
    nodes.push(built);
  }
  const pending = [];
  for (let p = 0; p < pods; p++) {
    const roll = next();
    const sharing = roll % 5n === 0n ? 'shared' : 'exclusive';
    const count = sharing === 'shared' ? 1 : [1, 1, 2, 4, 8][Number((roll >> 8n) % 5n)];
    const memory =
      sharing === 'shared' ? 4096 << Number((roll >> 16n) % 3n) : [0, 40960, 65536][Number((roll >> 16n) % 3n)];
    const r = request(`team-${p % 7}/job-${String(p).padStart(5, '0')}`, count, sharing, memory);
    const pin = (roll >> 24n) % 6n;
    shape(r).model = pin === 0n ? 'NVIDIA H100*' : pin === 1n ? '*A100*' : undefined;
    r.priority = Number((roll >> 32n) % 3n);
    r.createdMs = 1700000000000n + BigInt(p) * 10n;
    pending.push(r);
  }
  const snap = snapshot(nodes, pending);
  for (let z = 0; z < 3; z++) {
    const members = [];
    for (let n = 0; n < nodeCount; n++) if (n % 3 === z) members.push(n);
    snap.eligibleSets.push(nodeSet(...members));
  }
  snap.pending.forEach((r, p) => {
    if (p % 10 === 0) r.eligibleSet = 1 + (Math.floor(p / 10) % 3);
  });
  return snap;
}

// === Snapshot files and the host's validator ===

const CONTRACT = 'wasmgpu:policy@0.3.0';
// The contract's strings as the Rust serde derives write them.
const PUBLISHERS = { agent: 'agent', 'dra-driver': 'draDriver', both: 'both' };
const PREEMPTION = { 'preempt-lower-priority': 'PreemptLowerPriority', never: 'Never' };

// A u64 of the contract (a BigInt, or a number) as a JSON number; one JSON
// readers would round is refused rather than written wrong.
function u64(value, field) {
  const n = Number(value);
  if (!Number.isSafeInteger(n)) {
    throw new RangeError(`snapshotFile: ${field} is ${value}, over 2^53: JSON numbers would not keep it exactly`);
  }
  return n;
}

const option = (value) => (value === undefined ? null : value);

// The GPU indices of an NVLink bit set (a GPU's `nvlink`).
function nvlinkIndices(set) {
  const out = [];
  const bits = BigInt.asUintN(64, BigInt(set));
  for (let i = 0; i < 64; i++) if ((bits >> BigInt(i)) & 1n) out.push(i);
  return out;
}

function fileGpu(n, g, p) {
  return {
    uuid: gpuName(n, p),
    index: g.index,
    model: g.model,
    memoryMiB: u64(g.memoryMib, `${n.name} GPU ${p} memoryMib`),
    allocatedMiB: u64(g.allocatedMib, `${n.name} GPU ${p} allocatedMib`),
    held: g.held,
    sharedOwners: g.sharedOwners,
    numaNode: option(g.numaNode),
    healthy: g.healthy,
    mig: g.mig === undefined ? null : { parent: g.mig.parent, profile: g.mig.profile },
    nvlink: nvlinkIndices(g.nvlink),
    publishedBy: PUBLISHERS[g.publishedBy] ?? g.publishedBy,
  };
}

const gpuRef = (r) => ({ node: r.node, gpu: r.gpu });

function fileClaim(c) {
  return {
    name: c.name,
    requests: c.requests.map((r) => ({
      name: r.name,
      alternatives: r.alternatives.map((a) => ({ subrequest: option(a.subrequest), count: a.count, candidates: a.candidates })),
    })),
    constraints: c.constraints.map((k) => ({
      requests: [...k.requests],
      distinct: k.distinct,
      attribute: k.attribute,
      values: k.values.map((v) => ({ device: gpuRef(v.device), value: v.value })),
    })),
  };
}

function fileAsk(r) {
  if (r.ask.tag === 'claims') return { claims: r.ask.val.map(fileClaim) };
  const s = r.ask.val;
  return {
    gpus: {
      count: s.count,
      model: option(s.model),
      migProfile: option(s.migProfile),
      memoryMiB: u64(s.memoryMib, `${r.pod} memoryMib`),
      sharing: s.sharing,
    },
  };
}

// `snap` (built with these builders, or as the component receives it) as a
// snapshot file: the Rust `SnapshotFile` (crates/contract/src/snapshot_file.rs),
// camelCase, ready for JSON.stringify; for `wasmgpu policy run --snapshot
// FILE` and `validate`. GPU UUIDs are `gpuName`'s (`GPU-{node}-{index}`,
// `MIG-GPU-{node}-{index}-{k}`), labels by key, eligible sets as node
// positions, a GPU's NVLink as the indices it links to.
export function snapshotFile(snap) {
  const nodeCount = snap.nodes.length;
  return {
    contract: CONTRACT,
    round: u64(snap.round, 'round'),
    models: [...snap.models],
    migProfiles: [...snap.migProfiles],
    namespaces: [...snap.namespaces],
    nodes: snap.nodes.map((n) => {
      const labels = {};
      snap.labelKeys.forEach((key, k) => {
        if (n.labels[k] !== undefined && n.labels[k] !== null) labels[key] = n.labels[k];
      });
      return { name: n.name, labels, gpus: n.gpus.map((g, p) => fileGpu(n, g, p)) };
    }),
    pending: snap.pending.map((r) => ({
      pod: r.pod,
      namespace: r.namespace,
      tenant: option(r.tenant),
      priority: r.priority,
      preemption: PREEMPTION[r.preemption] ?? r.preemption,
      createdMs: u64(r.createdMs, `${r.pod} createdMs`),
      eligibleSet: r.eligibleSet,
      gang: option(r.gang),
      ask: fileAsk(r),
    })),
    running: snap.running.map((r) => ({
      pod: r.pod,
      namespace: r.namespace,
      tenant: option(r.tenant),
      priority: r.priority,
      node: r.node,
      gpus: [...r.gpus],
      sharedMiB: u64(r.sharedMib, `${r.pod} sharedMib`),
      startedMs: u64(r.startedMs, `${r.pod} startedMs`),
      gang: option(r.gang),
      evictable: r.evictable,
      protectedMs: u64(r.protectedMs, `${r.pod} protectedMs`),
    })),
    eligibleSets: snap.eligibleSets.map((words) => setMembers(words, nodeCount)),
    candidateSets: snap.candidateSets.map((set) => set.map(gpuRef)),
    gangs: snap.gangs.map((g) => ({
      name: g.name,
      minMember: g.minMember,
      bound: g.bound,
      pending: [...g.pending],
      running: [...g.running],
    })),
    tenants: snap.tenants.map((t) => ({
      name: t.name,
      weight: t.weight,
      quota: t.quota,
      limit: option(t.limit),
      holding: t.holding,
      waiting: t.waiting,
    })),
    config: snap.config,
  };
}

function fileAssignment(a) {
  const out = { pod: a.pod, node: a.node, gpus: [...a.gpus] };
  // As serde writes it: left out when empty.
  if (a.claims !== undefined && a.claims.length > 0) {
    out.claims = a.claims.map((c) => ({ claim: c.claim, request: c.request, alternative: c.alternative, gpus: [...c.gpus] }));
  }
  return out;
}

// `decisions` as `wasmgpu policy validate --decisions FILE` reads them
// (JSON.stringify it): the Rust `Decision` in serde's externally tagged form,
// positions into the snapshot, e.g. `[{"assign": {"pod": 0, "node": 1,
// "gpus": [0, 1]}}, {"wait": {"pod": 1, "reason": "no room"}}, {"preempt":
// {"assignment": {...}, "victims": [3]}}]`.
export function decisionsFile(decisions) {
  return decisions.map((d, i) => {
    switch (d === null || typeof d !== 'object' ? undefined : d.tag) {
      case 'assign':
        return { assign: fileAssignment(d.val) };
      case 'preempt':
        return { preempt: { assignment: fileAssignment(d.val.assignment), victims: [...d.val.victims] } };
      case 'wait':
      case 'reject':
        return { [d.tag]: { pod: d.val.pod, reason: d.val.reason } };
      default:
        throw new TypeError(
          `decisionsFile: decision ${i} (${JSON.stringify(d)}) is not a Decision: give { tag: 'assign' | 'wait' | 'reject' | 'preempt', val } (assign, wait, reject, preempt build them)`,
        );
    }
  });
}

const isExecutable = (path) => {
  try {
    accessSync(path, constants.X_OK);
    return statSync(path).isFile();
  } catch {
    return false;
  }
};

// The `wasmgpu` binary `validate` runs: `$WASMGPU` when set, else `wasmgpu`
// on PATH. Throws an Error (code 'ENOENT'), naming both and the fix, when
// there is none; tests that need it skip on that (`wasmgpuMissing`).
export function wasmgpuCli() {
  const given = process.env.WASMGPU;
  if (given) {
    if (isExecutable(given)) return given;
    throw Object.assign(
      new Error(
        `WASMGPU=${given} is not an executable file; build it with \`make build\` in a wasmgpu checkout, or set WASMGPU to the binary (e.g. WASMGPU=target/release/wasmgpu)`,
      ),
      { code: 'ENOENT' },
    );
  }
  for (const dir of (process.env.PATH ?? '').split(delimiter)) {
    if (dir !== '' && isExecutable(join(dir, 'wasmgpu'))) return join(dir, 'wasmgpu');
  }
  throw Object.assign(
    new Error(
      'no wasmgpu binary: $WASMGPU is not set and there is no `wasmgpu` on PATH; build it with `make build` in a wasmgpu checkout and set WASMGPU=target/release/wasmgpu (or put it on PATH)',
    ),
    { code: 'ENOENT' },
  );
}

// Why `validate` cannot run here (no binary: `wasmgpuCli`'s message), or
// false; for `test(name, { skip: wasmgpuMissing() }, …)`.
export function wasmgpuMissing() {
  try {
    wasmgpuCli();
    return false;
  } catch (e) {
    return e.message;
  }
}

// Holds `decisions` to the host's own rules on `snap`: the verdict the
// controller would give them, from `wasmgpu policy validate` (the binary
// `wasmgpuCli` finds), parsed:
//
//   { valid: boolean,
//     accepted:   [{ pod: 'ns/name', node: 'n', gpus: ['GPU-n-0'] }],
//     preempting: [{ placement: { ...as accepted }, victims: ['ns/name'] }],
//     waiting:    [{ pod: 'ns/name', reason: '...', gang }],   // gang only when set
//     rejected:   [...as waiting],
//     refused:    [{ index: 0, pod: 'ns/name' or null, decision: 'text',
//                    reason: { kind: 'wrong-count', ... }, why: 'in words' }] }
//
// Names are the snapshot's (GPUs as `gpuName` names them); `index` is the
// decision's position in `decisions`. A refused decision is not an error:
// `valid` is false and `refused` says why. Throws when there is no binary
// (`wasmgpuCli`) or when it fails (with its stderr). Synchronous.
export function validate(snap, decisions) {
  const cli = wasmgpuCli();
  const dir = mkdtempSync(join(tmpdir(), 'wasmgpu-validate-'));
  let done;
  try {
    const snapshotPath = join(dir, 'snapshot.json');
    const decisionsPath = join(dir, 'decisions.json');
    writeFileSync(snapshotPath, JSON.stringify(snapshotFile(snap)));
    writeFileSync(decisionsPath, JSON.stringify(decisionsFile(decisions)));
    done = spawnSync(cli, ['policy', 'validate', '--snapshot', snapshotPath, '--decisions', decisionsPath, '--output', 'json'], {
      encoding: 'utf8',
      maxBuffer: 1 << 30,
    });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  if (done.error) throw new Error(`running \`${cli} policy validate\`: ${done.error.message}`);
  // 0: nothing refused; 2: something refused (the verdict is printed either
  // way); 1: an error. A binary without `policy validate` also exits 2 (a
  // usage error), with nothing on stdout: that is an error too.
  if (done.status === 0 || done.status === 2) {
    let verdict;
    try {
      verdict = JSON.parse(done.stdout);
    } catch {
      verdict = undefined;
    }
    if (verdict !== null && typeof verdict === 'object' && 'valid' in verdict) return verdict;
  }
  const said = (done.stderr || done.stdout || '').trim();
  const old = done.stderr.includes('unrecognized subcommand')
    ? '; a wasmgpu without `policy validate` is too old: rebuild it (`make build`)'
    : '';
  throw new Error(`\`${cli} policy validate\` failed (${done.signal ? `signal ${done.signal}` : `exit status ${done.status}`}): ${said}${old}`);
}
