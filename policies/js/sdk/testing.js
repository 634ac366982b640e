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

// A DRA pod asking for `claims` (contract `claim` records; none by default).
export function draRequest(pod, claims = [], extra = {}) {
  return { ...base(pod), ask: { tag: 'claims', val: claims }, ...extra };
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
