// Part of the SDK: // Snapshot builders for unit tests, shaped as the component receives them
// (u64 fields are BigInts, lists of u32 are Uint32Arrays).

export function gpu(uuid, index, model, memoryMib) {
  return {
    uuid,
    index,
    model,
    memoryMib: BigInt(memoryMib),
    allocatedMib: 0n,
    held: false,
    sharedOwners: 0,
    numaNode: undefined,
    nvlinkPeers: new Uint32Array(),
    healthy: true,
    mig: undefined,
  };
}

// `count` identical whole GPUs of model table index `model`.
export function node(name, count, model, memoryMib) {
  const gpus = [];
  for (let i = 0; i < count; i++) gpus.push(gpu(`GPU-${name}-${i}`, i, model, memoryMib));
  return { name, labels: [], gpus };
}

export function withFullNvlink(n) {
  const count = n.gpus.length;
  n.gpus.forEach((g, i) => {
    g.nvlinkPeers = Uint32Array.from([...Array(count).keys()].filter((j) => j !== i));
  });
  return n;
}

export function request(pod, count, sharing, memoryMib, extra = {}) {
  const namespace = pod.split('/')[0];
  return {
    pod,
    namespace,
    resource: `${namespace}/gpus`,
    count,
    model: undefined,
    migProfile: undefined,
    memoryMib: BigInt(memoryMib),
    sharing,
    priority: 0,
    createdMs: 0n,
    eligibleSet: 0,
    gang: undefined,
    ...extra,
  };
}

export function snapshot(models, nodes, pending, extra = {}) {
  return {
    round: 1n,
    models,
    migProfiles: [],
    nodes,
    pending,
    eligibleSets: [Uint32Array.from(nodes.keys())],
    gangs: [],
    usage: [],
    config: '',
    ...extra,
  };
}

// Assignments as [pod, node, [gpus]] in decision order.
export function assigned(decisions) {
  return decisions.filter((d) => d.tag === 'assign').map((d) => [d.val.pod, d.val.node, [...d.val.gpus]]);
}

export function decisionOf(decisions, pod) {
  return decisions.find((d) => d.val.pod === pod);
}
