// Part of the SDK: snapshot builders for unit tests, shaped as the component
// receives them (u64 fields are BigInts, lists of u32 are Uint32Arrays, node
// sets are BigUint64Arrays of bit words, a GPU's `nvlink` is a BigInt bit set
// of GPU indices).

// A healthy, free GPU published by the wasmgpu agent, no NVLink.
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

// `count` identical whole GPUs (indices 0…) of model table index `model`;
// no labels (a snapshot's `labelKeys` is empty unless given).
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
// NVLink, on both ends: withNvlink(n, [[0, 1], [2, 3]]) makes two bridged pairs.
export function withNvlink(n, pairs) {
  for (const [a, b] of pairs) {
    n.gpus[a].nvlink |= nvlinkOf([n.gpus[b].index]);
    n.gpus[b].nvlink |= nvlinkOf([n.gpus[a].index]);
  }
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

// A pod holding GPU positions `gpus` of node position `node` (exclusively
// unless `extra.sharedMib` is set). Its `namespace` is set by `snapshot`.
export function running(pod, node, gpus, extra = {}) {
  return {
    pod,
    namespace: 0,
    tenant: undefined,
    priority: 0,
    node,
    gpus: Uint32Array.from(gpus),
    sharedMib: 0n,
    startedMs: 0n,
    gang: undefined,
    evictable: true,
    protectedMs: 0n,
    ...extra,
  };
}

// A gang of pending positions `pending` that must hold GPUs `minMember` at a
// time, none bound or running (set the members' `gang` yourself).
export function gang(name, minMember, pending, extra = {}) {
  return {
    name,
    minMember,
    bound: 0,
    pending: Uint32Array.from(pending),
    running: new Uint32Array(),
    ...extra,
  };
}

// A snapshot of `nodes` and `pending` (and `extra.running`), every request
// eligible on every node through eligible set 0. Unless `extra.namespaces` is
// given, the namespace table is the sorted namespaces of the pods' names and
// each pod's `namespace` indexes it.
export function snapshot(models, nodes, pending, extra = {}) {
  const snap = {
    round: 1n,
    models,
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
  if (extra.namespaces === undefined) {
    const pods = [...snap.pending, ...snap.running];
    const namespaceOf = (p) => p.pod.split('/')[0];
    snap.namespaces = [...new Set(pods.map(namespaceOf))].sort();
    for (const p of pods) p.namespace = snap.namespaces.indexOf(namespaceOf(p));
  }
  return snap;
}

// Assignments as [pod, node, [gpus]] in decision order.
export function assigned(decisions) {
  return decisions.filter((d) => d.tag === 'assign').map((d) => [d.val.pod, d.val.node, [...d.val.gpus]]);
}

// The decision naming pending position `pod` (a preemption names it in its assignment).
export function decisionOf(decisions, pod) {
  return decisions.find((d) => (d.tag === 'preempt' ? d.val.assignment.pod : d.val.pod) === pod);
}
