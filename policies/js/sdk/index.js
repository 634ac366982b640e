// wasmgpu policy SDK for JavaScript.
//
// Everything a JavaScript allocation policy needs besides the contract's types
// (generated from wit/policy.wit into types/ by `npm run build`): decision
// builders, the model glob, config parsing, accessors for what the contract
// encodes compactly (a request's GPU shape, namespace and label tables, node
// and NVLink bit sets), round state that tracks what is free as the policy
// places pods (`Cluster`), the placement loop most policies share
// (`placeEach`), and `exportPolicy`, which turns a policy into the component's
// `describe` and `allocate` exports.
//
// The contract names pods, nodes and GPUs by position: `assign(pod, node,
// gpus)` takes the pod's position in `snapshot.pending`, the node's in
// `snapshot.nodes` and the GPUs' in that node's `gpus` list.
//
// `Cluster` and `placeEach` place GPUResource requests (`ask.tag === 'gpus'`)
// on GPUs the wasmgpu agent publishes. They make no decision for DRA pods
// (`ask.tag === 'claims'`), which therefore wait, and they never preempt.
//
// The same modules run under Node (unit tests) and inside the component.

/** @typedef {import('wasmgpu:policy/types@0.3.0').Snapshot} Snapshot */
/** @typedef {import('wasmgpu:policy/types@0.3.0').Request} Request */
/** @typedef {import('wasmgpu:policy/types@0.3.0').Running} Running */
/** @typedef {import('wasmgpu:policy/types@0.3.0').GpuShape} GpuShape */
/** @typedef {import('wasmgpu:policy/types@0.3.0').Node} Node */
/** @typedef {import('wasmgpu:policy/types@0.3.0').Gpu} Gpu */
/** @typedef {import('wasmgpu:policy/types@0.3.0').Tenant} Tenant */
/** @typedef {import('wasmgpu:policy/types@0.3.0').Decision} Decision */
/** @typedef {import('wasmgpu:policy/types@0.3.0').Info} Info */

let logSink = () => {};

/** Writes a line to the controller's log (discarded under Node unless set). */
export function log(message) {
  logSink(String(message));
}

/**
 * Stops the round with `message`: the message goes to the controller's log
 * and the call traps, so the controller keeps its previous policy version (at
 * load time) or applies nothing this round. Use it for errors the operator
 * must fix, such as an invalid config.json.
 */
export function fail(message) {
  log(message);
  throw new PolicyError(message);
}

/** The error `fail` throws. */
export class PolicyError extends Error {}

/**
 * An `Info` record. `labelKeys`: the node label keys the policy reads (at
 * most 32); each node in a snapshot then carries its values for these, by
 * position (`labelOf` reads one by key).
 */
export function info(name, version, description, labelKeys = []) {
  return { name, version, description, labelKeys: Array.from(labelKeys) };
}

/**
 * `assign`: pending position `pod` on node position `node`, GPU positions
 * `gpus` (a GPUResource request; `claims` is empty).
 */
export function assign(pod, node, gpus) {
  return { tag: 'assign', val: { pod, node, gpus: Uint32Array.from(gpus), claims: [] } };
}

/**
 * `preempt`: evict the running pods at `victims` (positions in
 * `snapshot.running`) and give pending position `pod` GPU positions `gpus` of
 * node position `node` once they are gone. `Cluster` and `placeEach` never
 * emit it.
 */
export function preempt(pod, node, gpus, victims) {
  return {
    tag: 'preempt',
    val: {
      assignment: { pod, node, gpus: Uint32Array.from(gpus), claims: [] },
      victims: Uint32Array.from(victims),
    },
  };
}

/** `wait`: leave pending position `pod` for a later round, with a reason shown to users. */
export function wait(pod, reason) {
  return { tag: 'wait', val: { pod, reason } };
}

/** `reject`: the request at pending position `pod` can never fit as posed. */
export function reject(pod, reason) {
  return { tag: 'reject', val: { pod, reason } };
}

/**
 * What a request asks for through its GPUResource (`count`, `model`,
 * `migProfile`, `memoryMib`, `sharing`), or `undefined` for a DRA pod (its
 * `ask` is `claims`).
 * @param {Request} request
 * @returns {GpuShape | undefined}
 */
export function shapeOf(request) {
  return request.ask.tag === 'gpus' ? request.ask.val : undefined;
}

/** The DRA claims a request asks for, or `undefined` for a GPUResource request. */
export function claimsOf(request) {
  return request.ask.tag === 'claims' ? request.ask.val : undefined;
}

/** The namespace name of a pending or running pod (`undefined` past the table's end). */
export function namespaceOf(snapshot, pod) {
  return snapshot.namespaces[pod.namespace];
}

/** The tenant of a pending or running pod, or `undefined` when it has none. */
export function tenantOf(snapshot, pod) {
  return pod.tenant === undefined ? undefined : snapshot.tenants[pod.tenant];
}

/**
 * The value of label `key` on `node` (a `Node` or its position), or
 * `undefined` when the node lacks it or the policy did not ask for the key
 * (in `info(…, labelKeys)`).
 */
export function labelOf(snapshot, node, key) {
  const n = typeof node === 'number' ? snapshot.nodes[node] : node;
  const at = snapshot.labelKeys.indexOf(key);
  return at < 0 || n === undefined ? undefined : (n.labels[at] ?? undefined);
}

/**
 * The members of a bit set carried as 64-bit words (`snapshot.eligibleSets[i]`:
 * bit i of word i/64 is member i), ascending; those of `limit` and more are
 * left out.
 */
export function setMembers(words, limit = Infinity) {
  const out = [];
  for (let w = 0; w < words.length; w++) {
    const word = BigInt.asUintN(64, BigInt(words[w]));
    if (word === 0n) continue;
    const halves = [Number(word & 0xffffffffn), Number(word >> 32n)];
    for (let h = 0; h < 2; h++) {
      let bits = halves[h];
      const base = w * 64 + h * 32;
      while (bits !== 0) {
        const low = bits & -bits;
        const member = base + 31 - Math.clz32(low);
        if (member >= limit) return out;
        out.push(member);
        bits = (bits ^ low) >>> 0;
      }
    }
  }
  return out;
}

/** Whether `member` is in a bit set carried as 64-bit words. */
export function inSet(words, member) {
  if (!Number.isInteger(member) || member < 0) return false;
  const w = Math.floor(member / 64);
  if (w >= words.length) return false;
  return ((BigInt(words[w]) >> BigInt(member % 64)) & 1n) === 1n;
}

/** Whether node position `node` is in `request`'s eligible set. */
export function nodeEligible(snapshot, request, node) {
  const set = snapshot.eligibleSets[request.eligibleSet];
  return set !== undefined && inSet(set, node);
}

/**
 * The GPUs GPU position `gpu` of `node` has an NVLink to, as positions in the
 * node's `gpus` list, ascending (the contract names them by GPU `index`; an
 * index no whole GPU of the node has is left out).
 * @param {Node} node
 */
export function nvlinkPeers(node, gpu) {
  const g = node.gpus[gpu];
  if (g === undefined || BigInt(g.nvlink) === 0n) return [];
  const at = wholeByIndex(node.gpus);
  const out = [];
  for (const index of setMembers([g.nvlink])) {
    const peer = at.get(index);
    if (peer !== undefined) out.push(peer);
  }
  return out.sort((a, b) => a - b);
}

/** Position of the whole GPU with each `index` (the first, should two share one). */
function wholeByIndex(gpus) {
  const at = new Map();
  for (let i = 0; i < gpus.length; i++) {
    if (gpus[i].mig === undefined && !at.has(gpus[i].index)) at.set(gpus[i].index, i);
  }
  return at;
}

/**
 * Whether a GPUResource request may take `gpu`: the wasmgpu agent publishes
 * it (`publishedBy` is `agent` or `both`, not only a DRA driver).
 * @param {Gpu} gpu
 */
export function agentPublished(gpu) {
  return gpu.publishedBy !== 'dra-driver';
}

/**
 * Model globs: `*` matches any run of characters, `?` any one character;
 * everything else matches itself, case-sensitively (the host's rule).
 */
export function globMatch(pattern, text) {
  const p = Array.from(pattern);
  const t = Array.from(text);
  let pi = 0;
  let ti = 0;
  let starP = -1;
  let starT = 0;
  while (ti < t.length) {
    if (pi < p.length && (p[pi] === '?' || p[pi] === t[ti])) {
      pi++;
      ti++;
    } else if (pi < p.length && p[pi] === '*') {
      starP = pi++;
      starT = ti;
    } else if (starP >= 0) {
      pi = starP + 1;
      ti = ++starT;
    } else {
      return false;
    }
  }
  while (pi < p.length && p[pi] === '*') pi++;
  return pi === p.length;
}

/**
 * Parses the snapshot's config string: empty (or all blanks) gives
 * `defaults`; otherwise a JSON object whose keys must be keys of `defaults`
 * and whose values must have the same type. Throws a message naming the
 * problem (`fail` it, or put it in a `wait` reason).
 */
export function parseConfig(config, defaults) {
  if (config.trim() === '') return { ...defaults };
  let parsed;
  try {
    parsed = JSON.parse(config);
  } catch (e) {
    throw new PolicyError(`invalid policy config.json: ${e.message}`);
  }
  if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed)) {
    throw new PolicyError('invalid policy config.json: expected a JSON object');
  }
  const known = Object.keys(defaults);
  const out = { ...defaults };
  for (const [key, value] of Object.entries(parsed)) {
    if (!known.includes(key)) {
      const expected = known.map((k) => `\`${k}\``).join(', ');
      throw new PolicyError(
        `invalid policy config.json: unknown field \`${key}\`, expected one of ${expected}`,
      );
    }
    if (typeof value !== typeof defaults[key]) {
      throw new PolicyError(
        `invalid policy config.json: \`${key}\` must be a ${typeof defaults[key]}, got ${JSON.stringify(value)}`,
      );
    }
    out[key] = value;
  }
  return out;
}

/** Which end to prefer when several candidates fit. */
export const Fit = Object.freeze({
  /** The candidate with the least room left that still fits (packing). */
  Tightest: 'tightest',
  /** The candidate with the most room (spreading). */
  Loosest: 'loosest',
});

/**
 * Why a request cannot be placed this round, in the SDK's standard words.
 * `permanent`: waiting cannot help (the decision is a `reject`).
 */
export class Shortfall {
  constructor(kind, what) {
    this.kind = kind; // 'no-eligible-node' | 'never' | 'not-now'
    this.what = what;
  }

  get permanent() {
    return this.kind !== 'not-now';
  }

  reason() {
    switch (this.kind) {
      case 'no-eligible-node':
        return 'no eligible node: node selector, affinity or taints exclude every GPU node';
      case 'never':
        return `no eligible node has ${this.what}, even when idle`;
      default:
        return `no eligible node has ${this.what} free right now`;
    }
  }
}

/**
 * What a request (or its `GpuShape`) asks for, in words (used in wait and
 * reject reasons).
 */
export function describeRequest(request) {
  if (request.ask !== undefined && request.ask.tag === 'claims') {
    return `devices through ${request.ask.val.length} DRA claim(s)`;
  }
  const shape = request.ask !== undefined ? request.ask.val : request;
  const model = shape.model !== undefined ? ` matching "${shape.model}"` : '';
  const mem = BigInt(shape.memoryMib);
  if (shape.migProfile !== undefined) {
    return `${shape.count} MIG instance(s) of profile ${JSON.stringify(shape.migProfile)}${model}`;
  }
  if (shape.sharing === 'shared') {
    return `${shape.count} GPU(s)${model} with ${mem} MiB to share`;
  }
  if (mem === 0n) return `${shape.count} GPU(s)${model}`;
  return `${shape.count} GPU(s)${model} with at least ${mem} MiB each`;
}

// Kinds of request, as far as fitting goes.
const EXCLUSIVE = 0;
const SHARED = 1;
const MIG = 2;

/**
 * Round state: what is free on each node, updated as the policy places pods
 * (`commit`), so a policy never hands out the same GPU twice in its round.
 *
 * A node's `gpus` list holds whole GPUs, each followed by its MIG instances.
 * A whole-GPU request takes whole GPUs none of whose instances is held; a MIG
 * request takes free instances of its profile whose parent is not held. Only
 * GPUs the wasmgpu agent publishes (`agentPublished`) are ever taken: the
 * others are for DRA claims, which `Cluster` does not place.
 */
export class Cluster {
  /** @param {Snapshot} snapshot */
  constructor(snapshot) {
    this.snapshot = snapshot;
    const n = snapshot.nodes.length;
    this.nodes = new Array(n);
    for (let i = 0; i < n; i++) this.nodes[i] = newNodeState(snapshot.nodes[i]);
    // Eligible sets as sorted node positions (bits past the nodes dropped).
    this.eligibleSets = snapshot.eligibleSets.map((set) => setMembers(set, n));
    this.everFits = new Map();
    this.modelOk = new Map();
    // Nodes in the order commits changed them, and the shared-request
    // headroom per shape (see `sharedRooms`).
    this.touched = [];
    this.shared = new Map();
    this.eligibleMasks = new Map();
    // Nodes whose GPUs are all whole and of one model and memory, bucketed
    // by free whole GPUs (sorted node positions per bucket); the others.
    this.classes = [];
    this.mixed = [];
    const classOf = new Map();
    for (let node = 0; node < n; node++) {
      const state = this.nodes[node];
      if (!state.uniform) {
        this.mixed.push(node);
        continue;
      }
      const u = state.units[0];
      const key = `${u.model}\u0000${u.memory}`;
      let cls = classOf.get(key);
      if (cls === undefined) {
        cls = { model: u.model, memory: u.memory, buckets: [] };
        classOf.set(key, cls);
        this.classes.push(cls);
      }
      while (cls.buckets.length <= state.units.length) cls.buckets.push([]);
      cls.buckets[state.freeWhole].push(node);
      state.cls = cls;
    }
  }

  /**
   * Positions of the pending GPUResource requests in the order they should be
   * served: higher priority first, then older, then by pod name (a total
   * order). DRA pods (`ask` is `claims`) are left out: `Cluster` does not
   * place them, and a pod no decision names waits.
   */
  pendingInOrder() {
    const pending = this.snapshot.pending;
    const order = [];
    for (let i = 0; i < pending.length; i++) if (pending[i].ask.tag === 'gpus') order.push(i);
    order.sort((a, b) => compareRequests(pending[a], pending[b]));
    return order;
  }

  /**
   * The prepared form of pending request `pod` (a position) for the checks
   * below: `{ pod, request, shape, kind, count, memory, profile, modelOk }`.
   * `null` for a DRA pod.
   */
  want(pod) {
    const request = this.snapshot.pending[pod];
    const shape = shapeOf(request);
    if (shape === undefined) return null;
    const kind =
      shape.migProfile !== undefined ? MIG : shape.sharing === 'shared' ? SHARED : EXCLUSIVE;
    const profile = kind === MIG ? this.snapshot.migProfiles.indexOf(shape.migProfile) : -1;
    return {
      pod,
      request,
      shape,
      kind,
      count: shape.count,
      memory: Number(shape.memoryMib),
      profile,
      modelOk: this.modelMask(shape.model),
    };
  }

  /** For each entry of `snapshot.models`, whether `glob` (or no glob) accepts it. */
  modelMask(glob) {
    const key = glob === undefined ? '\u0000any' : glob;
    let mask = this.modelOk.get(key);
    if (mask === undefined) {
      mask = this.snapshot.models.map((m) => glob === undefined || globMatch(glob, m));
      this.modelOk.set(key, mask);
    }
    return mask;
  }

  /** The node positions the request may run on, ascending (positions past the end dropped). */
  eligible(want) {
    return this.eligibleSets[want.request.eligibleSet] ?? [];
  }

  /** Whether the request may run on node position `node`. */
  isEligible(want, node) {
    return this.eligibleMask(want)[node] === 1;
  }

  /** Whole GPUs on `node` nobody holds any part of. */
  freeWhole(node) {
    return this.nodes[node].freeWhole;
  }

  /** Healthy whole GPUs on `node` that the wasmgpu agent publishes. */
  healthy(node) {
    return this.nodes[node].healthyWhole;
  }

  /** Whether unit `i` of `node` can take `want` right now. */
  unitFits(node, i, want) {
    const state = this.nodes[node];
    const u = state.units[i];
    if (!u.healthy || !u.agent || u.held || !want.modelOk[u.model]) return false;
    if (want.kind === MIG) {
      // An instance is free while its parent is used neither whole nor shared.
      if (u.parent < 0 || u.profile !== want.profile || u.memory < want.memory) return false;
      const parent = state.units[u.parent];
      // It takes its parent's health, too.
      return parent.healthy && !parent.held && parent.shares === 0 && parent.free >= parent.memory;
    }
    if (u.parent >= 0 || u.kidsHeld > 0) return false;
    if (want.kind === EXCLUSIVE) {
      return u.shares === 0 && u.free === u.memory && u.memory >= want.memory;
    }
    return u.free >= want.memory;
  }

  /** True when `node` has `count` units that fit `want` right now. */
  fits(node, want) {
    const state = this.nodes[node];
    if (want.kind === EXCLUSIVE) {
      if (state.freeWhole < want.count) return false;
      if (state.uniform) {
        return want.modelOk[state.units[0].model] && state.units[0].memory >= want.memory;
      }
    }
    let fitting = 0;
    for (let i = 0; i < state.units.length; i++) {
      if (this.unitFits(node, i, want) && ++fitting >= want.count) return true;
    }
    return false;
  }

  /**
   * Room left on `node` for requests like `want`: free whole GPUs for an
   * exclusive request, free instances of the profile for a MIG request, free
   * MiB on the GPUs a shared request could share.
   */
  headroom(node, want) {
    const state = this.nodes[node];
    if (want.kind === EXCLUSIVE) return state.freeWhole;
    let room = 0;
    for (let i = 0; i < state.units.length; i++) {
      if (this.unitFits(node, i, want)) room += want.kind === MIG ? 1 : state.units[i].free;
    }
    return room;
  }

  /**
   * The eligible node that fits `want` with the least (`Fit.Tightest`) or most
   * (`Fit.Loosest`) headroom; ties go to the lowest position. `-1` when none.
   */
  chooseNode(want, fit) {
    let best = -1;
    let bestRoom = 0;
    const consider = (room, node) => {
      if (
        best < 0 ||
        (fit === Fit.Tightest ? room < bestRoom : room > bestRoom) ||
        (room === bestRoom && node < best)
      ) {
        best = node;
        bestRoom = room;
      }
    };
    if (want.kind === EXCLUSIVE) {
      // Nodes of one GPU type sit in buckets by free whole GPUs: the first
      // eligible node of the first bucket that holds the request, from the
      // preferred end, is the class's candidate. Other nodes are scanned.
      const eligible = this.eligibleMask(want);
      for (const cls of this.classes) {
        if (!want.modelOk[cls.model] || cls.memory < want.memory) continue;
        const top = cls.buckets.length - 1;
        for (let k = 0; k <= top - want.count; k++) {
          const level = fit === Fit.Tightest ? want.count + k : top - k;
          const node = cls.buckets[level].find((n) => eligible[n] === 1);
          if (node !== undefined) {
            consider(level, node);
            break;
          }
        }
      }
      for (const node of this.mixed) {
        if (eligible[node] === 1 && this.fits(node, want)) consider(this.headroom(node, want), node);
      }
      return best;
    }
    const rooms = want.kind === SHARED ? this.sharedRooms(want) : null;
    for (const node of this.eligible(want)) {
      let room;
      if (rooms !== null) {
        room = rooms[node];
        if (room < 0) continue;
      } else {
        if (!this.fits(node, want)) continue;
        room = this.headroom(node, want);
      }
      consider(room, node);
    }
    return best;
  }

  /** For each node, 1 when the request may run there (built once per eligible set). */
  eligibleMask(want) {
    const set = want.request.eligibleSet;
    let mask = this.eligibleMasks.get(set);
    if (mask === undefined) {
      mask = new Uint8Array(this.nodes.length);
      for (const node of this.eligible(want)) mask[node] = 1;
      this.eligibleMasks.set(set, mask);
    }
    return mask;
  }

  /**
   * Per node, the headroom of a shared request shaped like `want` (model
   * glob, memory, count) where it fits, else -1: computed once per shape and
   * round, then brought up to date with the nodes commits touched since.
   */
  sharedRooms(want) {
    const key = `${want.shape.model ?? '\u0000'}\u0000${want.memory}\u0000${want.count}`;
    let entry = this.shared.get(key);
    if (entry === undefined) {
      const rooms = new Float64Array(this.nodes.length);
      for (let n = 0; n < rooms.length; n++) rooms[n] = this.sharedRoom(n, want);
      entry = { seen: this.touched.length, rooms };
      this.shared.set(key, entry);
    }
    for (; entry.seen < this.touched.length; entry.seen++) {
      const n = this.touched[entry.seen];
      entry.rooms[n] = this.sharedRoom(n, want);
    }
    return entry.rooms;
  }

  sharedRoom(node, want) {
    const state = this.nodes[node];
    let fitting = 0;
    let room = 0;
    for (let i = 0; i < state.units.length; i++) {
      if (this.unitFits(node, i, want)) {
        fitting++;
        room += state.units[i].free;
      }
    }
    return fitting >= want.count ? room : -1;
  }

  /**
   * Chooses `count` units on `node` for `want`, as positions in the node's
   * `gpus` list (ascending), or `null` when the node does not fit. Exclusive
   * requests for more than one GPU take a connected NVLink group that holds
   * them when `preferNvlink` (the smallest for `Fit.Tightest`, the largest for
   * `Fit.Loosest`; a connected group, not GPUs that are all mutual peers),
   * else the first free GPUs; shared requests take the GPUs with the least
   * (most) free memory; MIG requests the instances whose parent has the
   * fewest (most) free instances.
   */
  pickGpus(node, want, fit, preferNvlink) {
    const state = this.nodes[node];
    let candidates = [];
    for (let i = 0; i < state.units.length; i++) {
      if (this.unitFits(node, i, want)) candidates.push(i);
    }
    if (candidates.length < want.count) return null;
    if (want.kind === EXCLUSIVE && preferNvlink && want.count > 1) {
      let bestGroup = -1;
      let bestSize = 0;
      const seen = new Set();
      for (const i of candidates) {
        const group = state.units[i].group;
        if (seen.has(group)) continue;
        seen.add(group);
        let size = 0;
        for (const j of candidates) if (state.units[j].group === group) size++;
        if (size < want.count) continue;
        if (bestGroup < 0 || (fit === Fit.Tightest ? size < bestSize : size > bestSize)) {
          bestGroup = group;
          bestSize = size;
        }
      }
      if (bestGroup >= 0) candidates = candidates.filter((i) => state.units[i].group === bestGroup);
    } else if (want.kind === MIG) {
      // Pack (or spread) instances by how many of their parent's instances
      // are still free: fewest first packs them onto the fewest parents.
      const freeSiblings = (i) => {
        let n = 0;
        for (const u of state.units) if (u.parent === state.units[i].parent && !u.held) n++;
        return n;
      };
      const key = new Map(candidates.map((i) => [i, freeSiblings(i)]));
      candidates.sort(
        fit === Fit.Tightest ? (a, b) => key.get(a) - key.get(b) : (a, b) => key.get(b) - key.get(a),
      );
    } else if (want.kind === SHARED) {
      // Array.prototype.sort is stable: ties keep position order.
      const free = (i) => state.units[i].free;
      candidates.sort(fit === Fit.Tightest ? (a, b) => free(a) - free(b) : (a, b) => free(b) - free(a));
    }
    candidates = candidates.slice(0, want.count);
    candidates.sort((a, b) => a - b);
    return candidates;
  }

  /** Records that `want` took the units at `positions` on `node`. */
  commit(node, positions, want) {
    const state = this.nodes[node];
    if (positions.length > 0) this.touched.push(node);
    const freeBefore = state.freeWhole;
    for (const i of positions) {
      const u = state.units[i];
      const wasFree = u.parent < 0 && isWholeFree(u);
      if (want.kind === SHARED) {
        u.shares += 1;
        u.free = Math.max(0, u.free - want.memory);
      } else {
        u.held = true;
        u.free = 0;
      }
      if (u.parent >= 0) {
        const parent = state.units[u.parent];
        const parentWasFree = isWholeFree(parent);
        parent.kidsHeld += 1;
        if (parentWasFree) state.freeWhole -= 1;
      } else if (wasFree) {
        state.freeWhole -= 1;
      }
    }
    if (state.cls !== undefined && state.freeWhole !== freeBefore) {
      const buckets = state.cls.buckets;
      removeSorted(buckets[freeBefore], node);
      insertSorted(buckets[state.freeWhole], node);
    }
  }

  /** Picks, commits and returns the `assign` decision, or `null` when `node` does not fit. */
  place(node, want, fit, preferNvlink) {
    const positions = this.pickGpus(node, want, fit, preferNvlink);
    if (positions === null) return null;
    this.commit(node, positions, want);
    return assign(want.pod, node, positions);
  }

  /** A copy whose placements do not touch this one (for trials). */
  clone() {
    const copy = Object.create(Cluster.prototype);
    Object.assign(copy, this);
    copy.nodes = this.nodes.map((state) => ({
      ...state,
      units: state.units.map((u) => ({ ...u })),
    }));
    copy.touched = this.touched.slice();
    copy.shared = new Map();
    copy.classes = this.classes.map((cls) => ({ ...cls, buckets: cls.buckets.map((b) => b.slice()) }));
    this.classes.forEach((cls, i) => {
      for (const b of copy.classes[i].buckets) for (const node of b) copy.nodes[node].cls = copy.classes[i];
    });
    return copy;
  }

  /**
   * Places the pending members of gang `gang` (an index into
   * `snapshot.gangs`) all together or not at all: each member, in order, goes
   * where `chooseNode` and `pickGpus` put it, on a trial copy of the round's
   * state. When enough fit to reach the gang's `minMember` with the members
   * already bound, the trial becomes the state and the members that fit are
   * assigned (the others wait); otherwise nothing is committed and every
   * member waits, with the reason. A member that can never fit is rejected
   * on its own reason; when without such members the gang could never reach
   * minMember, every member is rejected, naming the one that fits nowhere.
   * The host applies a gang's assignments on the same rule. DRA members get
   * no decision (they wait) and count as members that may fit later.
   */
  placeGang(gang, fit, preferNvlink) {
    const g = this.snapshot.gangs[gang];
    if (g === undefined) return [];
    const pending = this.snapshot.pending;
    const all = Array.from(g.pending).filter((p) => p < pending.length);
    const members = all.filter((p) => pending[p].ask.tag === 'gpus');
    const dra = all.length - members.length;
    members.sort((a, b) => compareRequests(pending[a], pending[b]));
    const need = Math.max(0, g.minMember - g.bound);
    const trial = this.clone();
    const placed = [];
    const left = [];
    for (const pod of members) {
      const want = trial.want(pod);
      const node = trial.chooseNode(want, fit);
      const decision = node >= 0 ? trial.place(node, want, fit, preferNvlink) : null;
      if (decision !== null) placed.push(decision);
      else left.push([pod, want, trial.shortfall(want)]);
    }
    // Members that can never fit are rejected on their own; the gang waits
    // for the others as long as they could still reach its minMember.
    const never = left.filter(([, , s]) => s.permanent);
    const later = left.filter(([, , s]) => !s.permanent);
    if (placed.length + later.length + dra < need) {
      const reason =
        never.length > 0
          ? `gang ${g.name} can never be placed: member ${never[0][1].request.pod} fits nowhere (${never[0][2].reason()})`
          : `gang ${g.name}: ${placed.length} of the ${need} more members needed fit now (${g.bound} bound, minMember ${g.minMember}); all or nothing, so none is placed yet`;
      const pods = placed.map((d) => d.val.pod).concat(later.concat(never).map(([pod]) => pod));
      return pods.map((pod) => reject(pod, reason));
    }
    const rejected = never.map(([pod, , s]) => reject(pod, s.reason()));
    if (placed.length >= need) {
      this.nodes = trial.nodes;
      this.touched = trial.touched;
      this.classes = trial.classes;
      const reason = `gang ${g.name} is placed without this member (${placed.length} of ${need} needed fit); it waits for room`;
      return placed.concat(later.map(([pod]) => wait(pod, reason)), rejected);
    }
    const reason = `gang ${g.name}: ${placed.length} of the ${need} more members needed fit now (${g.bound} bound, minMember ${g.minMember}); all or nothing, so none is placed yet`;
    const pods = placed.map((d) => d.val.pod).concat(later.map(([pod]) => pod));
    return pods.map((pod) => wait(pod, reason)).concat(rejected);
  }

  /** Why `want` fits on none of its eligible nodes. */
  shortfall(want) {
    const key = `${want.request.eligibleSet}\u0000${want.kind}\u0000${want.shape.model ?? '\u0000'}\u0000${want.memory}\u0000${want.count}\u0000${want.profile}`;
    let ever = this.everFits.get(key);
    if (ever === undefined) {
      ever = this.computeEverFits(want);
      this.everFits.set(key, ever);
    }
    if (ever === null) return new Shortfall('no-eligible-node');
    return new Shortfall(ever ? 'not-now' : 'never', describeRequest(want.shape));
  }

  computeEverFits(want) {
    const eligible = this.eligible(want);
    if (eligible.length === 0) return null;
    for (const node of eligible) {
      let could = 0;
      for (const u of this.nodes[node].units) {
        if (!u.healthy || !u.agent || !want.modelOk[u.model]) continue;
        const kind = want.kind === MIG ? u.parent >= 0 && u.profile === want.profile : u.parent < 0;
        if (kind && u.memory >= want.memory) {
          if (++could >= want.count) return true;
        }
      }
    }
    return false;
  }

  /** `wait` (GPUs may free up) or `reject` (it can never fit) for a request placed nowhere. */
  unplaced(want) {
    const shortfall = this.shortfall(want);
    return shortfall.permanent
      ? reject(want.pod, shortfall.reason())
      : wait(want.pod, shortfall.reason());
  }
}

function insertSorted(list, value) {
  let lo = 0;
  let hi = list.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (list[mid] < value) lo = mid + 1;
    else hi = mid;
  }
  list.splice(lo, 0, value);
}

function removeSorted(list, value) {
  let lo = 0;
  let hi = list.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (list[mid] < value) lo = mid + 1;
    else hi = mid;
  }
  if (list[lo] === value) list.splice(lo, 1);
}

/** Higher priority first, then older, then by pod name. */
function compareRequests(ra, rb) {
  if (ra.priority !== rb.priority) return rb.priority - ra.priority;
  const ca = BigInt(ra.createdMs);
  const cb = BigInt(rb.createdMs);
  if (ca !== cb) return ca < cb ? -1 : 1;
  return ra.pod < rb.pod ? -1 : ra.pod > rb.pod ? 1 : 0;
}

function isWholeFree(u) {
  return u.healthy && u.agent && !u.held && u.shares === 0 && u.free === u.memory && u.kidsHeld === 0;
}

function newNodeState(node) {
  const gpus = node.gpus;
  const units = new Array(gpus.length);
  // NVLink groups: connected components of the peer graph (union-find). A
  // GPU's `nvlink` names its peers by `index`: each is the whole GPU with it.
  const parentOf = gpus.map((_, i) => i);
  const find = (i) => {
    while (parentOf[i] !== i) {
      parentOf[i] = parentOf[parentOf[i]];
      i = parentOf[i];
    }
    return i;
  };
  let byIndex = null;
  for (let i = 0; i < gpus.length; i++) {
    if (BigInt(gpus[i].nvlink) === 0n) continue;
    if (byIndex === null) byIndex = wholeByIndex(gpus);
    for (const index of setMembers([gpus[i].nvlink])) {
      const peer = byIndex.get(index);
      if (peer !== undefined) {
        const a = find(i);
        const b = find(peer);
        if (a !== b) parentOf[Math.max(a, b)] = Math.min(a, b);
      }
    }
  }
  let freeWhole = 0;
  let healthyWhole = 0;
  let uniform = gpus.length > 0;
  for (let i = 0; i < gpus.length; i++) {
    const g = gpus[i];
    const mig = g.mig !== undefined && g.mig.parent < gpus.length;
    const memory = Number(g.memoryMib);
    const allocated = Number(g.allocatedMib);
    units[i] = {
      model: g.model,
      memory,
      free: Math.max(0, memory - allocated),
      held: g.held,
      shares: g.sharedOwners,
      healthy: g.healthy,
      // Published by the wasmgpu agent: a GPUResource request may take it.
      agent: agentPublished(g),
      group: find(i),
      // An instance naming a parent out of range reads as a whole GPU.
      parent: mig ? g.mig.parent : -1,
      profile: mig ? g.mig.profile : -1,
      kidsHeld: 0,
    };
    if (mig) uniform = false;
    else if (g.model !== gpus[0].model || memory !== Number(gpus[0].memoryMib)) uniform = false;
  }
  for (const u of units) {
    if (u.parent >= 0 && u.held && u.parent < units.length) units[u.parent].kidsHeld += 1;
  }
  for (const u of units) {
    if (u.parent >= 0) continue;
    if (u.healthy && u.agent) healthyWhole++;
    if (isWholeFree(u)) freeWhole++;
  }
  return { units, freeWhole, healthyWhole, uniform };
}

/**
 * Parameters understood by `placeEach` (config.json, all optional).
 * `preemption` is accepted (a boolean, as the Rust binpack reads it) but
 * changes nothing: `placeEach` does not preempt yet.
 */
export const PLACEMENT_DEFAULTS = Object.freeze({ preferNvlink: true, preemption: true });

/**
 * Serves the GPUResource requests by priority then age; each goes to the
 * eligible node `chooseNode` picks for `fit`, on the GPUs `pickGpus` picks. A
 * gang is served whole, all or nothing (`Cluster.placeGang`), when its first
 * member's turn comes. Requests that fit nowhere get `wait` or `reject` with
 * the reason. DRA pods get no decision (they wait); nothing is preempted. An
 * invalid config.json fails the round.
 */
export function placeEach(snapshot, fit) {
  let params;
  try {
    params = parseConfig(snapshot.config, PLACEMENT_DEFAULTS);
  } catch (e) {
    fail(e.message);
  }
  const cluster = new Cluster(snapshot);
  const decisions = [];
  const gangServed = new Array(snapshot.gangs.length).fill(false);
  for (const pod of cluster.pendingInOrder()) {
    const gang = snapshot.pending[pod].gang;
    if (gang !== undefined && gang < gangServed.length) {
      if (!gangServed[gang]) {
        gangServed[gang] = true;
        decisions.push(...cluster.placeGang(gang, fit, params.preferNvlink));
      }
      continue;
    }
    const want = cluster.want(pod);
    const node = cluster.chooseNode(want, fit);
    const placed = node >= 0 ? cluster.place(node, want, fit, params.preferNvlink) : null;
    decisions.push(placed ?? cluster.unplaced(want));
  }
  return decisions;
}

/**
 * Turns a policy (`{ describe(): Info, allocate(snapshot): Decision[] }`)
 * into the component's exports, sending `log` lines to the controller (pass
 * the world's `log` import) and logging the message of an uncaught error
 * before the call traps.
 */
export function exportPolicy(policy, logImport) {
  logSink = logImport;
  const guard = (what, f) => {
    try {
      return f();
    } catch (e) {
      if (!(e instanceof PolicyError)) log(`${what} failed: ${e && e.stack ? e.stack : e}`);
      throw e;
    }
  };
  return {
    describe: () => guard('describe', () => policy.describe()),
    allocate: (snapshot) => guard('allocate', () => policy.allocate(snapshot)),
  };
}

/** Sends `log` lines to `sink` (tests). */
export function setLogSink(sink) {
  logSink = sink;
}
