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
// on GPUs the wasmgpu agent publishes, and DRA requests (`ask.tag ===
// 'claims'`: devices through ResourceClaims) on their claims' candidates
// (`Cluster.placeClaims`), and decide exactly what the Rust SDK's `Cluster`
// and `place_each` decide (NVLink modes, gangs, tenant limits, preemption by
// priority, DRA alternatives and constraints).
//
// The same modules run under Node (unit tests) and inside the component.

import { PLACEMENT_FIELDS, PlacementParams, PolicyError, blankConfig, parseConfig, parsePlacementParams } from './config.js';
import { Nvlink, clique, groupIds, linkMatrix, nvlinkMode } from './nvlink.js';
import { FREE, HEALTHY, bottleneck, claimNodes, devicesOf, solveOn } from './claims.js';
import { compareRequests, compareText } from './order.js';
import * as reason from './reason.js';
import { usage } from './usage.js';

export { PLACEMENT_FIELDS, PlacementParams, PolicyError, blankConfig, parseConfig, parsePlacementParams };
export { Nvlink, nvlinkMode, compareText, devicesOf, reason, usage };

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
 * node position `node` once they are gone (a GPUResource request; `claims` is
 * empty). `Cluster.preempt` and `placeEach` emit it for a pod that fits
 * nowhere now, for a DRA pod with empty `gpus` and its claim choices.
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
 * node's `gpus` list, ascending: the whole GPUs whose `index` its `nvlink` set
 * names (the contract names peers by GPU `index`, not position). A MIG
 * instance has none.
 * @param {Node} node
 */
export function nvlinkPeers(node, gpu) {
  const g = node.gpus[gpu];
  if (g === undefined || g.mig !== undefined || BigInt(g.nvlink) === 0n) return [];
  const out = [];
  for (let p = 0; p < node.gpus.length; p++) {
    const other = node.gpus[p];
    if (other.mig === undefined && other.index < 64 && inSet([g.nvlink], other.index)) out.push(p);
  }
  return out;
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

/** Which end to prefer when several candidates fit. */
export const Fit = Object.freeze({
  /** The candidate with the least room left that still fits (packing). */
  Tightest: 'tightest',
  /** The candidate with the most room (spreading). */
  Loosest: 'loosest',
});

/** A request's `sharing`, as the contract spells it. */
export const Sharing = Object.freeze({ Exclusive: 'exclusive', Shared: 'shared' });

/** `want.kind`: whole GPUs of its own. */
export const EXCLUSIVE = 0;
/** `want.kind`: part of a GPU's memory (`sharing: 'shared'`). */
export const SHARED = 1;
/** `want.kind`: MIG instances of a profile. */
export const MIG = 2;
/** The kinds of request, as far as fitting goes (`want.kind`). */
export const Kind = Object.freeze({ Exclusive: EXCLUSIVE, Shared: SHARED, Mig: MIG });

/**
 * Why a request cannot be placed this round, in the SDK's standard words.
 * `kind`: `'no-eligible-node'`, `'never'` or `'not-now'`; `what`: what it asks
 * for, in words. `permanent`: waiting cannot help (the decision is a `reject`).
 */
export class Shortfall {
  constructor(kind, what) {
    this.kind = kind;
    this.what = what;
  }

  get permanent() {
    return this.kind !== 'not-now';
  }

  reason() {
    switch (this.kind) {
      case 'no-eligible-node':
        return reason.noEligibleNode();
      case 'never':
        return reason.never(this.what);
      default:
        return reason.notNow(this.what);
    }
  }
}

/**
 * What a request (or its `GpuShape`) asks for, in words: `reason.asked` (for
 * a DRA pod, per claim: `2 device(s) for claim ml/train`).
 */
export function describeRequest(request) {
  return reason.asked(request);
}

/**
 * The shape the GPU fit helpers give a DRA request (`Want.shape`), Rust's
 * `NO_SHAPE`: no GPU fits it (`Cluster.placeClaims` places DRA requests). Its
 * sharing is `'exclusive'`, so `Cluster.commit` holds a DRA request's devices
 * exclusively.
 */
export const NO_SHAPE = Object.freeze({
  count: 0,
  model: undefined,
  migProfile: undefined,
  memoryMib: 18446744073709551615n,
  sharing: 'exclusive',
});

/**
 * A pending request prepared for the fit checks (`Cluster.want`). `pod`
 * (also `position`): its position in `snapshot.pending`, what decisions name;
 * `kind`: `EXCLUSIVE`, `SHARED` or `MIG`; `exclusive`: its sharing is
 * `'exclusive'` (MIG requests usually are); `count`, `memory` (MiB, a
 * number), `profile` (the MIG profile's index in `snapshot.migProfiles`, -1
 * if none), `modelOk` (per model index, whether the request's glob accepts
 * it). A DRA request (`isDra()`) has the shape `NO_SHAPE`, which no GPU fits
 * through the GPU fit helpers: place it with `Cluster.placeClaims`.
 */
export class Want {
  constructor(pod, request, shape, profile, modelOk) {
    this.pod = pod;
    this.position = pod;
    this.request = request;
    this.shape = shape;
    this.kind = shape.migProfile !== undefined ? MIG : shape.sharing === 'shared' ? SHARED : EXCLUSIVE;
    this.exclusive = shape.sharing !== 'shared';
    this.count = shape.count;
    this.memory = Number(shape.memoryMib);
    this.profile = profile;
    this.modelOk = modelOk;
  }

  /** True for a DRA request (claims): the GPU fit helpers place none; `Cluster.placeClaims` does. */
  isDra() {
    return this.request.ask.tag !== 'gpus';
  }

  /**
   * The claims of a DRA request (empty when all are allocated already and
   * the pod only needs a node); `undefined` for a GPUResource request.
   */
  claims() {
    return claimsOf(this.request);
  }

  /** The devices the request asks for (`devicesOf`): what the tenant limit counts before placing. */
  devices() {
    return devicesOf(this.request);
  }

  /** The request asks for MIG instances, not whole GPUs. */
  isMig() {
    return this.kind === MIG;
  }

  /** The request asks for whole GPUs of its own (not shares, not MIG instances). */
  isExclusiveWhole() {
    return this.kind === EXCLUSIVE;
  }

  /** Whether NVLink mode `nvlink` changes which GPUs it gets: exclusive, more than one whole GPU, mode not `ignore`. */
  usesNvlink(nvlink) {
    return nvlinkMode(nvlink) !== 'ignore' && this.kind === EXCLUSIVE && this.count > 1;
  }

  /** What it asks for, in words (`reason.asked`). */
  describe() {
    return reason.asked(this.request);
  }
}

/**
 * Round state: what is free on each node, updated as the policy places pods
 * (`commit`), so a policy never hands out the same GPU twice in its round. It
 * decides exactly what the Rust SDK's `Cluster` decides.
 *
 * A node's `gpus` list holds whole GPUs, each followed by its MIG instances.
 * A whole-GPU request takes whole GPUs none of whose instances is held; a MIG
 * request takes free instances of its profile whose parent is not in use.
 * A GPUResource request takes only GPUs the wasmgpu agent publishes
 * (`agentPublished`): the others read as unhealthy to the GPU fit helpers,
 * and so do the instances of such a GPU. A DRA request (`placeClaims`) takes
 * only its claims' candidates, healthy and free, whoever publishes them; both
 * kinds commit to the same state, so no device is given twice in a round.
 *
 * Query methods (`gpuNow`, `freeGpus`, `fittingGpus`, `freeByLabel`,
 * `nvlinkGroups`, …) answer for the state as it stands after this round's
 * commits (inside `placeGang`'s trial, for the trial).
 */
export class Cluster {
  /** @param {Snapshot} snapshot */
  constructor(snapshot) {
    this.snapshot = snapshot;
    const n = snapshot.nodes.length;
    const models = snapshot.models.length;
    this.nodes = new Array(n);
    for (let i = 0; i < n; i++) this.nodes[i] = newNodeState(snapshot.nodes[i], models);
    // Eligible sets as sorted node positions (bits past the nodes dropped).
    this.eligibleSets = snapshot.eligibleSets.map((set) => setMembers(set, n));
    this.everFits = new Map();
    this.everClique = new Map();
    this.modelOk = new Map();
    // Nodes in the order commits changed them, and the shared-request
    // headroom per shape (see `sharedRooms`).
    this.touched = [];
    this.shared = new Map();
    this.eligibleMasks = new Map();
    // Per node, its running pods (positions in `snapshot.running`); the
    // running pods named as victims this round; GPUs each tenant holds.
    this.runningOn = new Array(n);
    for (let i = 0; i < n; i++) this.runningOn[i] = [];
    snapshot.running.forEach((pod, r) => {
      if (pod.node < n) this.runningOn[pod.node].push(r);
    });
    this.victimTaken = new Array(snapshot.running.length).fill(false);
    this.tenantHeld = snapshot.tenants.map((t) => t.holding);
    // Each commit gives its node a version no other state (clones included)
    // has, so what `chooseNodeWith` learnt about a node stays valid until
    // the node changes.
    this.versions = { last: 0 };
    this.cliqueFits = new Map();
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
   * order). Only GPUResource requests, which the GPU fit helpers place: DRA
   * pods (`ask` is `claims`) are in `draPending()`, and both, in one order,
   * in `allPendingInOrder()` (what `placeEach` serves).
   */
  pendingInOrder() {
    return this.inOrder((r) => r.ask.tag === 'gpus');
  }

  /**
   * Positions of the pending DRA pods, in the order of `pendingInOrder`. The
   * GPU fit helpers do not place them; `placeClaims` does (a policy that
   * decides none of them leaves them waiting).
   */
  draPending() {
    return this.inOrder((r) => r.ask.tag !== 'gpus');
  }

  /**
   * Positions of every pending request, GPUResource and DRA alike, in the
   * order of `pendingInOrder` (priority, then age, then pod name): the two
   * lists above merged.
   */
  allPendingInOrder() {
    return this.inOrder(() => true);
  }

  inOrder(keep) {
    const pending = this.snapshot.pending;
    const order = [];
    for (let i = 0; i < pending.length; i++) if (keep(pending[i])) order.push(i);
    order.sort((a, b) => compareRequests(pending[a], pending[b]));
    return order;
  }

  /**
   * The prepared form (`Want`) of pending request `pod` (a position). A DRA
   * pod's has the shape `NO_SHAPE` (`want.isDra()`): place it with
   * `placeClaims`.
   */
  want(pod) {
    const request = this.snapshot.pending[pod];
    const shape = shapeOf(request);
    if (shape === undefined) {
      // No model accepted: no GPU fits it through the GPU fit helpers.
      const none = new Array(this.snapshot.models.length + 1).fill(false);
      return new Want(pod, request, NO_SHAPE, -1, none);
    }
    const profile = shape.migProfile !== undefined ? this.snapshot.migProfiles.indexOf(shape.migProfile) : -1;
    return new Want(pod, request, shape, profile, this.modelMask(shape.model));
  }

  /** For each entry of `snapshot.models`, whether `glob` (or no glob) accepts it; `false` past the end. */
  modelMask(glob) {
    const key = glob === undefined ? '\u0000any' : glob;
    let mask = this.modelOk.get(key);
    if (mask === undefined) {
      mask = this.snapshot.models.map((m) => glob === undefined || globMatch(glob, m));
      mask.push(false);
      this.modelOk.set(key, mask);
    }
    return mask;
  }

  /** The node positions the request may run on, ascending (positions past the end dropped). */
  eligible(want) {
    return this.eligibleSets[want.request.eligibleSet] ?? [];
  }

  /** How many nodes the request may run on. */
  eligibleCount(want) {
    return this.eligible(want).length;
  }

  /** Whether the request may run on node position `node`. */
  isEligible(want, node) {
    return this.eligibleMask(want)[node] === 1;
  }

  /** Number of nodes in the snapshot. */
  nodeCount() {
    return this.nodes.length;
  }

  /** The node's name. */
  nodeName(node) {
    return this.snapshot.nodes[node].name;
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
    return unitFits(this.nodes[node].units[i], want);
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
    if (fitting >= want.count) return true;
    for (const u of state.units) {
      if (unitFits(u, want) && ++fitting >= want.count) return true;
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
    for (const u of state.units) {
      if (unitFits(u, want)) room += want.kind === MIG ? 1 : u.free;
    }
    return room;
  }

  /**
   * The eligible node that fits `want` with the least (`Fit.Tightest`) or most
   * (`Fit.Loosest`) headroom; ties go to the lowest position. `-1` when none.
   * With `nvlink` `Nvlink.Require` (for a request it applies to), see
   * `chooseNodeWith`; other modes do not change the choice.
   */
  chooseNode(want, fit, nvlink) {
    if (nvlink !== undefined && nvlinkMode(nvlink) === 'require') return this.chooseNodeWith(want, fit, nvlink);
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
        // MIG requests go to nodes with MIG instances only (even for none).
        if (!this.nodes[node].hasMig || !this.fits(node, want)) continue;
        room = this.headroom(node, want);
      }
      consider(room, node);
    }
    return best;
  }

  /**
   * `chooseNode` for a request placed under NVLink mode `nvlink`. Only
   * `Nvlink.Require` changes the choice (for a request it applies to, see
   * `Want.usesNvlink`): a node fits when it has `count` free GPUs that are all
   * NVLink peers of one another; those nodes are found by a scan of the
   * eligible nodes.
   */
  chooseNodeWith(want, fit, nvlink) {
    const mode = nvlinkMode(nvlink);
    if (mode !== 'require' || !want.usesNvlink(mode)) return this.chooseNode(want, fit);
    // Whether a node has a clique free for this shape, per node version.
    const key = `${fit}\u0000${want.shape.model ?? '\u0000'}\u0000${want.memory}\u0000${want.count}`;
    let known = this.cliqueFits.get(key);
    if (known === undefined) {
      known = { version: new Float64Array(this.nodes.length).fill(-1), ok: new Uint8Array(this.nodes.length) };
      this.cliqueFits.set(key, known);
    }
    let best = -1;
    let bestRoom = 0;
    for (const node of this.eligible(want)) {
      if (!this.fits(node, want)) continue;
      const version = this.nodes[node].version;
      if (known.version[node] !== version) {
        known.ok[node] = this.pick(node, want, fit, mode) === null ? 0 : 1;
        known.version[node] = version;
      }
      if (known.ok[node] === 0) continue;
      const room = this.headroom(node, want);
      if (best < 0 || (fit === Fit.Tightest ? room < bestRoom : room > bestRoom)) {
        best = node;
        bestRoom = room;
      }
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
    let fitting = 0;
    let room = 0;
    for (const u of this.nodes[node].units) {
      if (unitFits(u, want)) {
        fitting++;
        room += u.free;
      }
    }
    return fitting >= want.count ? room : -1;
  }

  /**
   * Chooses `count` units on `node` for `want`, as positions in the node's
   * `gpus` list (ascending), or `null` when the node does not fit.
   *
   * * An exclusive request for more than one whole GPU follows `nvlink` (an
   *   `Nvlink` mode or a boolean: `true` is `Prefer`, `false` `Ignore`;
   *   `undefined` is `Prefer`): `Prefer` takes the GPUs from one NVLink
   *   group (connected, not necessarily all peers of one another), the
   *   tightest group that holds the request for `Fit.Tightest`, the largest
   *   for `Fit.Loosest`, and falls back to the first free GPUs when no group
   *   holds it; `Require` takes GPUs that are all NVLink peers of one another
   *   (the first such set in the tightest, or largest, group that has one)
   *   and gives `null` when there is none, never falling back; `Ignore` takes
   *   the first free GPUs.
   * * A shared request takes the GPUs with the least (most) free memory.
   * * A MIG request takes instances of parents with the fewest (most)
   *   instances still free.
   */
  pickGpus(node, want, fit, nvlink) {
    return this.pick(node, want, fit, nvlinkMode(nvlink));
  }

  pick(node, want, fit, mode) {
    const units = this.nodes[node].units;
    const count = want.count;
    let candidates = [];
    for (let i = 0; i < units.length; i++) if (unitFits(units[i], want)) candidates.push(i);
    if (candidates.length < count) return null;
    if (want.kind === MIG) {
      // Pack (or spread) instances by how many of their parent's instances
      // are still free: fewest first packs them onto the fewest parents.
      // Array.prototype.sort is stable: ties keep position order.
      const key = new Map();
      for (const i of candidates) {
        let free = 0;
        for (const u of units) if (u.parent === units[i].parent && !u.held) free++;
        key.set(i, free);
      }
      candidates.sort(
        fit === Fit.Tightest ? (a, b) => key.get(a) - key.get(b) : (a, b) => key.get(b) - key.get(a),
      );
    } else if (want.kind === EXCLUSIVE) {
      if (mode === 'require' && count > 1) return this.pickClique(node, candidates, count, fit);
      if (mode === 'prefer' && count > 1) {
        // The NVLink groups among the candidates, in order of first
        // appearance; the first of the tightest (largest) that holds
        // `count` wins.
        let bestGroup = -1;
        let bestSize = 0;
        const seen = new Set();
        for (const i of candidates) {
          const group = units[i].group;
          if (seen.has(group)) continue;
          seen.add(group);
          let size = 0;
          for (const j of candidates) if (units[j].group === group) size++;
          if (size < count) continue;
          if (bestGroup < 0 || (fit === Fit.Tightest ? size < bestSize : size > bestSize)) {
            bestGroup = group;
            bestSize = size;
          }
        }
        if (bestGroup >= 0) candidates = candidates.filter((i) => units[i].group === bestGroup);
      }
    } else {
      const free = (i) => units[i].free;
      candidates.sort(fit === Fit.Tightest ? (a, b) => free(a) - free(b) : (a, b) => free(b) - free(a));
    }
    candidates = candidates.slice(0, count);
    candidates.sort((a, b) => a - b);
    return candidates;
  }

  /**
   * `count` of `candidates` (free GPUs of `node`) that are all NVLink peers
   * of one another: groups are tried tightest (largest) first, as `Prefer`
   * orders them, and the first clique of the first group that has one wins.
   */
  pickClique(node, candidates, count, fit) {
    const units = this.nodes[node].units;
    const groups = [];
    for (const i of candidates) {
      const found = groups.find((g) => g.id === units[i].group);
      if (found !== undefined) found.size++;
      else groups.push({ id: units[i].group, size: 1 });
    }
    const holding = groups.filter((g) => g.size >= count);
    holding.sort(fit === Fit.Tightest ? (a, b) => a.size - b.size : (a, b) => b.size - a.size);
    const rows = this.links(node);
    for (const g of holding) {
      const members = candidates.filter((i) => units[i].group === g.id);
      const found = clique(rows, members, count);
      if (found !== null) return found;
    }
    return null;
  }

  /** The node's NVLink peer matrix (`linkMatrix`), built on first use. */
  links(node) {
    const state = this.nodes[node];
    if (state.links === undefined) state.links = linkMatrix(this.snapshot.nodes[node].gpus);
    return state.links;
  }

  /** Records that `want` took the units at `positions` on `node`. */
  commit(node, positions, want) {
    const state = this.nodes[node];
    const units = state.units;
    const freeBefore = state.freeWhole;
    for (const i of positions) {
      const u = units[i];
      if (u.parent >= 0) {
        u.held = true;
        u.free = 0;
        const parent = units[u.parent];
        if (isWholeFree(parent)) state.freeWhole -= 1;
        parent.kidsHeld += 1;
        continue;
      }
      if (isWholeFree(u)) state.freeWhole -= 1;
      if (want.exclusive) {
        u.held = true;
        u.free = 0;
      } else {
        u.shares += 1;
        u.free = Math.max(0, u.free - want.memory);
      }
      if (state.hasMig) {
        for (const g of units) if (g.parent === i) g.parentBusy = true;
      }
    }
    if (state.cls !== undefined && state.freeWhole !== freeBefore) {
      const buckets = state.cls.buckets;
      removeSorted(buckets[freeBefore], node);
      insertSorted(buckets[state.freeWhole], node);
    }
    if (positions.length > 0) this.touched.push(node);
    state.version = ++this.versions.last;
    const t = want.request.tenant;
    if (t !== undefined && t < this.tenantHeld.length) this.tenantHeld[t] += positions.length;
  }

  /** Picks, commits and returns the `assign` decision, or `null` when `node` does not fit. */
  place(node, want, fit, nvlink) {
    const positions = this.pick(node, want, fit, nvlinkMode(nvlink));
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
    copy.victimTaken = this.victimTaken.slice();
    copy.tenantHeld = this.tenantHeld.slice();
    copy.classes = this.classes.map((cls) => ({ ...cls, buckets: cls.buckets.map((b) => b.slice()) }));
    this.classes.forEach((cls, i) => {
      for (const b of copy.classes[i].buckets) for (const node of b) copy.nodes[node].cls = copy.classes[i];
    });
    return copy;
  }

  /** Makes `trial` (a `clone` of this) the state. */
  adopt(trial) {
    this.nodes = trial.nodes;
    this.touched = trial.touched;
    this.classes = trial.classes;
    this.victimTaken = trial.victimTaken;
    this.tenantHeld = trial.tenantHeld;
  }

  /**
   * Places the pending members of gang `gang` (an index into
   * `snapshot.gangs`) all together or not at all: each member, in order, goes
   * where `chooseNodeWith` and `pickGpus` put it under `nvlink`, on a trial
   * copy of the round's state. When enough fit to reach the gang's
   * `minMember` with the members already bound, the trial becomes the state
   * and the members that fit are assigned (the others wait); otherwise
   * nothing is committed and every member waits, with the reason. A member
   * that can never fit is rejected on its own reason; when without such
   * members the gang could never reach minMember, every member is rejected,
   * naming the one that fits nowhere. The host applies a gang's assignments
   * on the same rule. DRA members get no decision (they wait) and count as
   * members that may fit later.
   */
  placeGang(gang, fit, nvlink) {
    const g = this.snapshot.gangs[gang];
    if (g === undefined) return [];
    const mode = nvlinkMode(nvlink);
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
      const node = trial.chooseNodeWith(want, fit, mode);
      const decision = node >= 0 ? trial.place(node, want, fit, mode) : null;
      if (decision !== null) placed.push(decision);
      else left.push([pod, want, trial.shortfallWith(want, mode)]);
    }
    // Members that can never fit are rejected on their own; the gang waits
    // for the others as long as they could still reach its minMember.
    const never = left.filter(([, , s]) => s.permanent);
    const later = left.filter(([, , s]) => !s.permanent);
    if (placed.length + later.length + dra < need) {
      const why =
        never.length > 0
          ? reason.gangNever(g.name, never[0][1].request.pod, never[0][2].reason())
          : reason.gangShort(g.name, placed.length, need, g.bound, g.minMember);
      const pods = placed.map((d) => d.val.pod).concat(later.concat(never).map(([pod]) => pod));
      return pods.map((pod) => reject(pod, why));
    }
    const rejected = never.map(([pod, , s]) => reject(pod, s.reason()));
    if (placed.length >= need) {
      this.adopt(trial);
      const why = reason.gangPlacedWithout(g.name, placed.length, need);
      return placed.concat(later.map(([pod]) => wait(pod, why)), rejected);
    }
    const why = reason.gangShort(g.name, placed.length, need, g.bound, g.minMember);
    const pods = placed.map((d) => d.val.pod).concat(later.map(([pod]) => pod));
    return pods.map((pod) => wait(pod, why)).concat(rejected);
  }

  /**
   * Why `want` fits on none of its eligible nodes (for a DRA request,
   * `claimsShortfall`). With `nvlink` `Nvlink.Require`, see `shortfallWith`.
   */
  shortfall(want, nvlink) {
    if (want.isDra()) return this.claimsShortfall(want);
    if (nvlink !== undefined && nvlinkMode(nvlink) === 'require') return this.shortfallWith(want, nvlink);
    const key = this.shapeKey(want);
    let ever = this.everFits.get(key);
    if (ever === undefined) {
      ever = this.computeEverFits(want);
      this.everFits.set(key, ever);
    }
    if (ever === null) return new Shortfall('no-eligible-node');
    return new Shortfall(ever ? 'not-now' : 'never', want.describe());
  }

  /**
   * `shortfall` for a request placed under `nvlink`. With `Nvlink.Require`
   * (for a request it applies to), what is missing is `count` GPUs that are
   * all NVLink peers of one another (`reason.askedNvlink`): `not-now` when an
   * eligible node has such a set once idle, `never` when none has.
   */
  shortfallWith(want, nvlink) {
    const mode = nvlinkMode(nvlink);
    const shortfall = this.shortfall(want);
    if (want.isDra()) return shortfall;
    if (mode !== 'require' || !want.usesNvlink(mode) || shortfall.kind !== 'not-now') return shortfall;
    const key = this.shapeKey(want);
    let ever = this.everClique.get(key);
    if (ever === undefined) {
      ever = this.computeEverClique(want);
      this.everClique.set(key, ever);
    }
    return new Shortfall(ever ? 'not-now' : 'never', reason.askedNvlink(want.request));
  }

  shapeKey(want) {
    return `${want.request.eligibleSet}\u0000${want.shape.model ?? '\u0000'}\u0000${want.shape.migProfile ?? '\u0000'}\u0000${want.memory}\u0000${want.count}`;
  }

  computeEverFits(want) {
    const eligible = this.eligible(want);
    if (eligible.length === 0) return null;
    for (const node of eligible) {
      const state = this.nodes[node];
      if (state.uniform && want.kind !== MIG) {
        const u = state.units[0];
        if (want.modelOk[u.model] && u.memory >= want.memory && state.healthyWhole >= want.count) return true;
        continue;
      }
      let could = 0;
      if (could >= want.count) return true;
      for (const u of state.units) {
        if (couldEverFit(u, want) && ++could >= want.count) return true;
      }
    }
    return false;
  }

  /** Whether an eligible node has, once idle, `count` GPUs that could hold `want` and are all NVLink peers. */
  computeEverClique(want) {
    for (const node of this.eligible(want)) {
      const units = this.nodes[node].units;
      const able = [];
      for (let i = 0; i < units.length; i++) if (couldEverFit(units[i], want)) able.push(i);
      if (able.length >= want.count && clique(this.links(node), able, want.count) !== null) return true;
    }
    return false;
  }

  /**
   * `wait` (GPUs may free up) or `reject` (it can never fit) for a request
   * placed nowhere, in the standard words (for a DRA request,
   * `claimsUnplaced`). With `nvlink` `Nvlink.Require`, see `unplacedWith`.
   */
  unplaced(want, nvlink) {
    return this.unplacedWith(want, nvlink === undefined ? 'prefer' : nvlink);
  }

  /** `unplaced` for a request placed under `nvlink`: with `Nvlink.Require` the reason says the GPUs must be NVLink peers. */
  unplacedWith(want, nvlink) {
    if (want.isDra()) return this.claimsUnplaced(want);
    const shortfall = this.shortfallWith(want, nvlink);
    return shortfall.permanent ? reject(want.pod, shortfall.reason()) : wait(want.pod, shortfall.reason());
  }

  // --- DRA requests (claims); the search is in claims.js. ---

  /**
   * Places the DRA request `want` (a pod asking through claims, see
   * `Want.claims`): on an eligible node, every request of every claim gets
   * `count` distinct free, healthy candidates of one of its alternatives
   * (`firstAvailable`, tried in order), no device (nor a whole GPU and one of
   * its MIG instances) twice in the pod, within the claims' `matchAttribute`
   * and `distinctAttribute` constraints; see claims.js for the search. Among
   * the nodes that fit, `fit` chooses: `Fit.Tightest` the one with the fewest
   * idle whole GPUs left after the placement (whatever publishes them),
   * `Fit.Loosest` the most; ties go to the lowest position. The devices are
   * committed as held exclusively and counted against the pod's tenant (a
   * node where the pick would pass the tenant's limit does not fit). The
   * decision is an `assign` with empty `gpus` and one claim choice (`{ claim,
   * request, alternative, gpus }`) per (claim, request), claims then
   * requests in order. A pod whose claims are all allocated already (no
   * claims) goes to the best eligible node by the same measure, with no
   * devices. `null` for a GPUResource request or when no node fits now (see
   * `claimsShortfall`).
   */
  placeClaims(want, fit) {
    const claims = want.claims();
    if (claims === undefined) return null;
    const allowance = this.tenantAllowance(want);
    let best = null;
    for (const node of claimNodes(this, want, claims)) {
      const choices = solveOn(this, node, claims, FREE);
      if (choices === null) continue;
      const positions = [];
      for (const c of choices) for (const g of c.gpus) positions.push(g);
      if (allowance !== null && positions.length > allowance) continue;
      const left = this.idleWholeAfter(node, positions);
      if (best === null || (fit === Fit.Tightest ? left < best.left : left > best.left)) {
        best = { left, node, choices, positions };
      }
    }
    if (best === null) return null;
    this.commit(best.node, best.positions, want);
    const chosen = claimChoices(best.choices);
    return { tag: 'assign', val: { pod: want.pod, node: best.node, gpus: new Uint32Array(0), claims: chosen } };
  }

  /**
   * Why the DRA request `want` fits no eligible node now: `no-eligible-node`;
   * `never` when no eligible node could take it even with every healthy
   * candidate free; else `not-now`. The phrase names the first request
   * (claims, then requests, in order) that no eligible node can give its
   * count of candidates for any alternative (`reason.claimRequest`, with its
   * first alternative's count and candidates on eligible nodes), or, when
   * each could alone, the whole pod (`reason.claimsTogether`). For a
   * GPUResource request it is `shortfall`.
   */
  claimsShortfall(want) {
    return this.claimsDiagnosis(want).shortfall;
  }

  /**
   * The decision for a DRA request no node takes this round: `reject` when
   * `claimsShortfall` is permanent, else `wait`; the reason is the
   * shortfall's, and when one request is short now, `; ` and
   * `reason.claimsMostFree` (the most candidates of its first alternative
   * free on one eligible node). For a GPUResource request it is `unplaced`.
   */
  claimsUnplaced(want) {
    if (!want.isDra()) return this.unplaced(want);
    const { shortfall, detail } = this.claimsDiagnosis(want);
    let why = shortfall.reason();
    if (detail !== null) why = `${why}; ${detail}`;
    return shortfall.permanent ? reject(want.pod, why) : wait(want.pod, why);
  }

  /** `claimsShortfall`, with the detail of `claimsUnplaced` (`{ shortfall, detail }`, `detail` or `null`). */
  claimsDiagnosis(want) {
    const claims = want.claims();
    if (claims === undefined) return { shortfall: this.shortfall(want), detail: null };
    if (!this.eligible(want).some((n) => n < this.nodes.length)) {
      return { shortfall: new Shortfall('no-eligible-node'), detail: null };
    }
    const ever = claimNodes(this, want, claims).some((n) => solveOn(this, n, claims, HEALTHY) !== null);
    const found = bottleneck(this, want, claims, ever ? FREE : HEALTHY);
    const what =
      found !== null
        ? reason.claimRequest(found.claim, found.request, found.count, found.total)
        : reason.claimsTogether(
            reason.asked(want.request),
            claims.some((c) => c.constraints.length > 0),
          );
    if (ever) {
      return { shortfall: new Shortfall('not-now', what), detail: found === null ? null : reason.claimsMostFree(found.most) };
    }
    return { shortfall: new Shortfall('never', what), detail: null };
  }

  /** The GPUs the tenant of `want` may still take under its limit, counting this round's commits; `null` without a limit. */
  tenantAllowance(want) {
    const t = want.request.tenant;
    if (t === undefined) return null;
    const tenant = this.snapshot.tenants[t];
    if (tenant === undefined || tenant.limit === undefined) return null;
    return Math.max(0, tenant.limit - (this.tenantHeld[t] ?? 0));
  }

  /** Whether devices `a` and `b` (positions) of `node` cannot both be given: the same device, or a whole GPU and one of its MIG instances. */
  clash(node, a, b) {
    const units = this.nodes[node].units;
    const parent = (g) => {
      const u = units[g];
      return u === undefined ? -1 : u.parent;
    };
    return a === b || parent(a) === b || parent(b) === a;
  }

  /**
   * Idle whole GPUs of `node` (healthy, whoever publishes them, nobody
   * holding any part) that stay idle when `positions` are taken.
   */
  idleWholeAfter(node, positions) {
    const units = this.nodes[node].units;
    const info = this.snapshot.nodes[node].gpus;
    let idle = 0;
    for (let i = 0; i < units.length; i++) {
      const u = units[i];
      if (u.parent >= 0 || !info[i].healthy || u.held || u.shares !== 0 || u.kidsHeld !== 0 || !(u.free >= u.memory)) continue;
      if (positions.some((p) => this.clash(node, p, i))) continue;
      idle++;
    }
    return idle;
  }

  /**
   * A `wait` for `want` when its tenant (`snapshot.tenants`) could not take
   * its GPUs without passing its limit, counting this round's commits (the
   * host would refuse the assignment); `null` when it may. A DRA request
   * counts `want.devices()` (its first alternatives); `placeClaims` checks
   * what it actually picks too.
   */
  overTenantLimit(want) {
    const t = want.request.tenant;
    if (t === undefined) return null;
    const tenant = this.snapshot.tenants[t];
    if (tenant === undefined || tenant.limit === undefined) return null;
    const held = this.tenantHeld[t] ?? 0;
    const needs = want.devices();
    if (held + needs <= tenant.limit) return null;
    return wait(want.pod, reason.overTenantLimit(tenant.name, held, tenant.limit, needs));
  }

  /**
   * A `preempt` decision for `want`, committed to this round's state (its
   * GPUs are taken, its victims may not be named again), or `null` when the
   * pod may not preempt or no eviction makes room. On each eligible node,
   * the running pods of lower priority that are evictable, past their
   * minimum runtime (`protectedMs` 0) and not yet a victim (a gang member
   * only when every running member of its gang is) are released one by one,
   * lowest priority first, pods in no gang first, then youngest, until the
   * pod fits (a gang's members on the node together); the victims are those
   * holding a GPU it is given (or its MIG parent or instance), each gang
   * among them with all its running members, on any node. The best node has
   * the fewest victims, then the lowest sum of their priorities, then the
   * lowest position. Exclusive, MIG and DRA requests preempt; shared
   * requests, gang members and pods whose `preemption` is `'never'` do not.
   * A DRA request searches the nodes `placeClaims` searches (`claimNodes`),
   * and on each finds its devices as `placeClaims` does (`solveOn` over the
   * free candidates); its victims are those holding a device of any claim
   * choice, and the decision names no GPUs but carries the claim choices.
   */
  preempt(want, fit, nvlink) {
    const priority = want.request.priority;
    return this.preemptWhere(want, fit, nvlink, (pod) => pod.priority < priority);
  }

  /**
   * `preempt` with another rule for who may be evicted: running pods for
   * which `mayEvict(pod)` holds (and which are evictable, past their minimum
   * runtime, not yet a victim; a gang member only when all its gang's
   * running members are, and then with all of them). The host checks the
   * rule it applies (docs/POLICIES.md).
   */
  preemptWhere(want, fit, nvlink, mayEvict) {
    if (want === null) return null;
    const request = want.request;
    if (request.preemption === 'never' || request.gang !== undefined || !want.exclusive) return null;
    const mode = nvlinkMode(nvlink);
    const claims = want.claims();
    const nodes = claims === undefined ? this.eligible(want) : claimNodes(this, want, claims);
    let best = null;
    for (const node of nodes) {
      const option = this.preemptOn(node, want, fit, mode, mayEvict);
      if (option === null) continue;
      if (
        best === null ||
        option.victims.length < best.victims.length ||
        (option.victims.length === best.victims.length &&
          (option.priorities < best.priorities || (option.priorities === best.priorities && option.node < best.node)))
      ) {
        best = option;
      }
    }
    if (best === null) return null;
    const { gpus, choices } = best.fits;
    this.commit(best.node, gpus, want);
    for (const v of best.victims) this.victimTaken[v] = true;
    if (choices === null) return preempt(want.pod, best.node, gpus, best.victims);
    // A DRA request's devices are named by its claim choices.
    return {
      tag: 'preempt',
      val: {
        assignment: { pod: want.pod, node: best.node, gpus: new Uint32Array(0), claims: claimChoices(choices) },
        victims: Uint32Array.from(best.victims),
      },
    };
  }

  /**
   * Where `want` goes on `node` as the round's state stands: `{ gpus,
   * choices }`, `gpus` the positions `pick` picks (`choices` `null`), or
   * for a DRA request the devices `placeClaims` would choose there (`gpus`
   * those of every claim choice, in order); `null` when it does not fit.
   */
  fitsOn(node, want, fit, mode) {
    const claims = want.claims();
    if (claims === undefined) {
      const gpus = this.pick(node, want, fit, mode);
      return gpus === null ? null : { gpus, choices: null };
    }
    const choices = solveOn(this, node, claims, FREE);
    if (choices === null) return null;
    const gpus = [];
    for (const c of choices) for (const g of c.gpus) gpus.push(g);
    return { gpus, choices };
  }

  /**
   * Why `want` could not preempt although pods of lower priority run where
   * it may go: how many a PodDisruptionBudget protects now
   * (`reason.preemptionBlocked`), and how many are within their minimum
   * runtime, with when the first is past it (`reason.preemptionMinimumRuntime`),
   * joined by "; ". `null` when none is.
   */
  preemptionBlocked(want) {
    const request = want.request;
    if (request.preemption === 'never') return null;
    let protectedPods = 0;
    let young = 0;
    let firstMs = null;
    for (const node of this.eligible(want)) {
      for (const r of this.runningOn[node]) {
        const pod = this.snapshot.running[r];
        if (!(pod.priority < request.priority)) continue;
        if (!pod.evictable) {
          protectedPods++;
          continue;
        }
        const ms = BigInt(pod.protectedMs);
        if (ms > 0n) {
          young++;
          if (firstMs === null || ms < firstMs) firstMs = ms;
        }
      }
    }
    const why = [];
    if (protectedPods > 0) why.push(reason.preemptionBlocked(protectedPods));
    if (young > 0) why.push(reason.preemptionMinimumRuntime(young, (firstMs + 999n) / 1000n));
    return why.length > 0 ? why.join('; ') : null;
  }

  /** The running pods on `node` that may be evicted, in eviction order. */
  evictionCandidates(node, mayEvict) {
    const running = this.snapshot.running;
    const mayGo = (r) => {
      const pod = running[r];
      return mayEvict(pod) && pod.evictable && BigInt(pod.protectedMs) === 0n && !this.victimTaken[r];
    };
    const found = this.runningOn[node].filter((r) => {
      if (!mayGo(r)) return false;
      const members = this.gangOfRunning(r);
      return members === null || members.every((m) => mayGo(m));
    });
    found.sort((a, b) => {
      const pa = running[a];
      const pb = running[b];
      if (pa.priority !== pb.priority) return pa.priority - pb.priority;
      const ga = pa.gang !== undefined;
      const gb = pb.gang !== undefined;
      if (ga !== gb) return ga ? 1 : -1;
      const sa = BigInt(pa.startedMs);
      const sb = BigInt(pb.startedMs);
      if (sa !== sb) return sa > sb ? -1 : 1;
      return compareText(pa.pod, pb.pod);
    });
    return found;
  }

  /** The running members of running pod `r`'s gang (positions in `running`); `null` when it is in none. */
  gangOfRunning(r) {
    const g = this.snapshot.running[r].gang;
    if (g === undefined || g === null) return null;
    const gang = this.snapshot.gangs[g];
    if (gang === undefined) return null;
    return Array.from(gang.running);
  }

  /** The preemption on `node`, if evicting candidates makes room: `{ victims, priorities, node, fits }` (`fits` as `fitsOn` gives it). */
  preemptOn(node, want, fit, mode, mayEvict) {
    const candidates = this.evictionCandidates(node, mayEvict);
    if (candidates.length === 0) return null;
    const running = this.snapshot.running;
    const state = this.nodes[node];
    const saved = state.units;
    state.units = saved.map((u) => ({ ...u }));
    const released = new Array(running.length).fill(false);
    let last = -1;
    let fits = null;
    for (let k = 0; k < candidates.length; k++) {
      // A gang member goes with its gang: its mates here free their GPUs at
      // the same time.
      const members = this.gangOfRunning(candidates[k]);
      const going = members === null ? [candidates[k]] : members.filter((m) => running[m].node === node);
      for (const r of going) {
        if (released[r]) continue;
        released[r] = true;
        release(state.units, running[r]);
      }
      fits = this.fitsOn(node, want, fit, mode);
      if (fits !== null) {
        last = k;
        break;
      }
    }
    state.units = saved;
    if (fits === null) return null;
    const nodeGpus = this.snapshot.nodes[node].gpus;
    // A gang is needed when any of its members here is.
    const touching = candidates.slice(0, last + 1).filter((v) =>
      (this.gangOfRunning(v) ?? [v]).some((m) => running[m].node === node && touches(nodeGpus, running[m], fits.gpus)),
    );
    const victims = [];
    const named = new Set();
    for (const v of touching) {
      for (const m of this.gangOfRunning(v) ?? [v]) {
        if (named.has(m)) continue;
        named.add(m);
        victims.push(m);
      }
    }
    let priorities = 0;
    for (const v of victims) priorities += running[v].priority;
    return { victims, priorities, node, fits };
  }

  // --- Queries: the round's state as it stands after its commits. ---

  /** How many GPUs (MIG instances included) the node lists. */
  gpuCount(node) {
    return this.nodes[node].units.length;
  }

  /**
   * GPU `gpu` (a position in the node's GPU list) as the round stands:
   * `{ healthy, held, shares, freeMib, memoryMib, wholeFree, migParent }`.
   * `healthy`: reported healthy and published by the wasmgpu agent (an
   * instance also takes its parent's); `held`: held exclusively (by a running
   * pod or a placement of this round); `shares`: pods sharing it; `freeMib`:
   * memory not yet handed out; `wholeFree`: a whole GPU nobody holds any part
   * of (what an exclusive request can take); `migParent`: for a MIG
   * instance, its parent's position, else `undefined`.
   */
  gpuNow(node, gpu) {
    const state = this.nodes[node];
    const u = state === undefined ? undefined : state.units[gpu];
    if (u === undefined) throw new RangeError(`no GPU at position ${gpu} of node ${node}`);
    return {
      healthy: u.healthy,
      held: u.held,
      shares: u.shares,
      freeMib: u.free,
      memoryMib: u.memory,
      wholeFree: isWholeFree(u),
      migParent: u.parent >= 0 ? u.parent : undefined,
    };
  }

  /**
   * Positions of the node's whole GPUs nobody holds any part of (healthy, not
   * held, not shared, no MIG instance held), optionally only those whose
   * model matches the glob `model` (`"NVIDIA H100*"`). Their number without
   * a glob is `freeWhole(node)`.
   */
  freeGpus(node, model) {
    const units = this.nodes[node].units;
    const models = this.snapshot.models;
    const out = [];
    for (let i = 0; i < units.length; i++) {
      if (!isWholeFree(units[i])) continue;
      if (model !== undefined) {
        const name = models[units[i].model];
        if (name === undefined || !globMatch(model, name)) continue;
      }
      out.push(i);
    }
    return out;
  }

  /**
   * Positions of the node's GPUs (or MIG instances) that could take `want`
   * right now, one by one: what `pickGpus` chooses from. The node fits when
   * there are at least `count` of them.
   */
  fittingGpus(node, want) {
    const units = this.nodes[node].units;
    const out = [];
    for (let i = 0; i < units.length; i++) if (unitFits(units[i], want)) out.push(i);
    return out;
  }

  /**
   * The value of the node's label `key`, or `undefined` when it has none.
   * Only labels the policy asked for in `describe()` (`info(…, labelKeys)`)
   * reach it: any other key reads as missing.
   */
  label(node, key) {
    return labelOf(this.snapshot, node, key);
  }

  /**
   * For each value of node label `key` (a zone, a rack), how many GPUs on
   * `want`'s eligible nodes with that value could take `want` right now,
   * counted one by one as in `fittingGpus`. Eligible nodes without the label
   * are left out; values whose nodes have nothing free are listed with 0. A
   * `Map` from value to count, in byte order of the values (as Rust's
   * `BTreeMap`).
   */
  freeByLabel(key, want) {
    const counts = new Map();
    for (const node of this.eligible(want)) {
      const value = this.label(node, key);
      if (value === undefined) continue;
      let free = 0;
      for (const u of this.nodes[node].units) if (unitFits(u, want)) free++;
      counts.set(value, (counts.get(value) ?? 0) + free);
    }
    return new Map([...counts].sort(([a], [b]) => compareText(a, b)));
  }

  /**
   * The node's NVLink groups: its whole GPUs (MIG instances left out) split
   * into connected components of the link graph. Every whole GPU is in
   * exactly one group (a GPU without links alone); groups are ordered by
   * their first GPU, GPUs by position. The GPUs of a group need not be peers
   * of one another: see `nvlinkClique`.
   */
  nvlinkGroups(node) {
    const units = this.nodes[node].units;
    const groups = [];
    const at = new Map();
    for (let i = 0; i < units.length; i++) {
      if (units[i].parent >= 0) continue;
      const members = at.get(units[i].group);
      if (members !== undefined) members.push(i);
      else {
        const fresh = [i];
        at.set(units[i].group, fresh);
        groups.push(fresh);
      }
    }
    return groups;
  }

  /** Whether GPUs `a` and `b` (positions) of the node are NVLink peers: linked directly. */
  nvlinkPeers(node, a, b) {
    const row = this.links(node)[a];
    return row !== undefined && row[b] === 1;
  }

  /** Whether the GPUs at `gpus` are all NVLink peers of one another (a clique). One GPU, or none, is one. */
  isNvlinkClique(node, gpus) {
    for (let k = 0; k < gpus.length; k++) {
      for (let j = k + 1; j < gpus.length; j++) if (!this.nvlinkPeers(node, gpus[k], gpus[j])) return false;
    }
    return true;
  }

  /**
   * `size` GPUs among `among` (positions of the node's GPUs) that are all
   * NVLink peers of one another, or `null`: the first such set in `among`'s
   * order (pass the GPUs you prefer first), in that order. To find one among
   * the free GPUs, pass `freeGpus` or `fittingGpus`. At most the first 64 of
   * `among` are considered.
   */
  nvlinkClique(node, among, size) {
    return clique(this.links(node), Array.from(among), size);
  }

  /**
   * Names of the GPUs at `positions` on `node`, for logs (a policy sees no
   * UUIDs): `node/gpu<index>`, and `node/gpu<index>/mig<k>` for the k-th
   * entry after its parent.
   */
  gpuNames(node, positions) {
    const n = this.snapshot.nodes[node];
    return Array.from(positions, (i) => {
      const g = n.gpus[i];
      return g.mig === undefined ? `${n.name}/gpu${g.index}` : `${n.name}/gpu${g.index}/mig${i - g.mig.parent - 1}`;
    });
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

/** A whole GPU (not a MIG instance) nobody holds any part of. */
function isWholeFree(u) {
  return u.parent < 0 && u.healthy && !u.held && u.shares === 0 && u.kidsHeld === 0 && u.free === u.memory;
}

/** Whether a unit can take `want` right now. */
function unitFits(u, want) {
  if (!u.healthy || u.held || !want.modelOk[u.model]) return false;
  if (want.kind === MIG) {
    return u.parent >= 0 && u.profile === want.profile && !u.parentBusy && u.memory >= want.memory;
  }
  if (u.parent >= 0 || u.kidsHeld > 0) return false;
  if (want.exclusive) return u.shares === 0 && u.free === u.memory && u.memory >= want.memory;
  return u.free >= want.memory;
}

/** Whether a unit could take `want` once everything on it is released. */
function couldEverFit(u, want) {
  if (!u.healthy || !want.modelOk[u.model]) return false;
  if (want.kind === MIG) return u.parent >= 0 && u.profile === want.profile && u.memory >= want.memory;
  return u.parent < 0 && u.memory >= want.memory;
}

/** Frees what running pod `pod` holds among `units` (a node's state). */
function release(units, pod) {
  const shared = Number(pod.sharedMib);
  for (const g of pod.gpus) {
    const u = units[g];
    if (u === undefined) continue;
    if (shared > 0) {
      u.shares = Math.max(0, u.shares - 1);
      u.free = Math.min(u.free + shared, u.memory);
      continue;
    }
    u.held = false;
    u.free = u.memory;
    if (u.parent >= 0) {
      const parent = units[u.parent];
      if (parent !== undefined) parent.kidsHeld = Math.max(0, parent.kidsHeld - 1);
    } else {
      for (const other of units) if (other.parent === g) other.parentBusy = false;
    }
  }
}

/** Whether `pod` holds one of `picked` (positions), the parent of a picked MIG instance, or an instance of a picked GPU. */
function touches(gpus, pod, picked) {
  const parentOf = (g) => {
    const gpu = gpus[g];
    return gpu === undefined || gpu.mig === undefined ? -1 : gpu.mig.parent;
  };
  for (const held of pod.gpus) {
    for (const p of picked) if (p === held || parentOf(p) === held || parentOf(held) === p) return true;
  }
  return false;
}

function newNodeState(node, models) {
  const gpus = node.gpus;
  const n = gpus.length;
  const group = groupIds(gpus);
  const units = new Array(n);
  let hasMig = false;
  for (let i = 0; i < n; i++) {
    const g = gpus[i];
    // An instance naming a parent out of range reads as a whole GPU.
    const mig = g.mig !== undefined && g.mig.parent < n;
    if (mig) hasMig = true;
    const memory = Number(g.memoryMib);
    units[i] = {
      // A model index out of range reads as a model no glob matches.
      model: g.model < models ? g.model : models,
      memory,
      free: Math.max(0, memory - Number(g.allocatedMib)),
      held: g.held,
      shares: g.sharedOwners,
      // A GPU only a DRA driver publishes is not for a GPUResource request.
      healthy: g.healthy && agentPublished(g),
      group: group[i],
      parent: mig ? g.mig.parent : -1,
      profile: mig ? g.mig.profile : -1,
      // For a whole GPU: its MIG instances held; for an instance: its parent is in use.
      kidsHeld: 0,
      parentBusy: false,
    };
  }
  if (hasMig) {
    for (let i = 0; i < n; i++) {
      const u = units[i];
      if (u.parent < 0) continue;
      const p = units[u.parent];
      u.parentBusy = p.held || p.shares > 0 || p.free < p.memory;
      // An instance takes its parent's health.
      u.healthy = u.healthy && p.healthy;
      if (u.held) p.kidsHeld += 1;
    }
  }
  let uniform = n > 0 && !hasMig;
  for (let i = 1; uniform && i < n; i++) {
    if (units[i].model !== units[0].model || units[i].memory !== units[0].memory) uniform = false;
  }
  let freeWhole = 0;
  let healthyWhole = 0;
  for (const u of units) {
    if (u.parent >= 0) continue;
    if (u.healthy) healthyWhole++;
    if (isWholeFree(u)) freeWhole++;
  }
  return { units, freeWhole, healthyWhole, hasMig, uniform, cls: undefined, links: undefined, version: 0 };
}

/**
 * Parameters understood by `placeEach` (config.json, all optional) and their
 * defaults: `nvlink` (not given: `preferNvlink` decides), `preferNvlink`
 * (`true`: `"prefer"`, `false`: `"ignore"`), `preemption` (`true`: a pod
 * that fits nowhere now evicts the fewest lower-priority pods that make
 * room). `PLACEMENT_FIELDS` declares them for `parseConfig`.
 */
export const PLACEMENT_DEFAULTS = Object.freeze({ preferNvlink: true, preemption: true });

/**
 * Serves the snapshot's requests, GPUResource and DRA alike, by priority then
 * age (`Cluster.allPendingInOrder`), exactly as the Rust SDK's `place_each`:
 * each GPUResource request goes to the eligible node `chooseNodeWith` picks
 * for `fit`, on the GPUs `pickGpus` picks, under the config's NVLink mode,
 * and each DRA request where `Cluster.placeClaims` puts it for `fit`. A gang
 * is served whole, all or nothing (`Cluster.placeGang`), when its first
 * GPUResource member's turn comes (members asking through DRA claims get no
 * decision: they wait). A pod whose tenant is at its limit waits saying so
 * (`overTenantLimit`). A request that fits nowhere now preempts
 * lower-priority pods when `preemption` allows it (`Cluster.preempt`), DRA
 * requests alike. The others that fit nowhere get `wait` or `reject` with the
 * reason (for a DRA request, `Cluster.claimsUnplaced`'s); a wait also says
 * how many would-be victims a PodDisruptionBudget protects, and how many are
 * within their minimum runtime (`preemptionBlocked`). An invalid config.json
 * fails the round.
 */
export function placeEach(snapshot, fit) {
  let params;
  try {
    params = parsePlacementParams(snapshot.config);
  } catch (e) {
    fail(e.message);
  }
  const nvlink = params.nvlinkMode();
  const cluster = new Cluster(snapshot);
  const decisions = [];
  const gangServed = new Array(snapshot.gangs.length).fill(false);
  for (const pod of cluster.allPendingInOrder()) {
    const request = snapshot.pending[pod];
    const dra = shapeOf(request) === undefined;
    const gang = request.gang;
    if (gang !== undefined && gang < gangServed.length) {
      if (!dra && !gangServed[gang]) {
        gangServed[gang] = true;
        decisions.push(...cluster.placeGang(gang, fit, nvlink));
      }
      continue;
    }
    const want = cluster.want(pod);
    const over = cluster.overTenantLimit(want);
    if (over !== null) {
      decisions.push(over);
      continue;
    }
    if (dra) {
      decisions.push(placeClaimsEach(cluster, want, fit, params.preemption));
      continue;
    }
    const node = cluster.chooseNodeWith(want, fit, nvlink);
    let placed = node >= 0 ? cluster.place(node, want, fit, nvlink) : null;
    if (placed === null && params.preemption && !cluster.shortfallWith(want, nvlink).permanent) {
      placed = cluster.preempt(want, fit, nvlink);
    }
    if (placed === null) {
      placed = cluster.unplacedWith(want, nvlink);
      if (placed.tag === 'wait' && params.preemption) {
        const blocked = cluster.preemptionBlocked(want);
        if (blocked !== null) placed.val.reason = `${placed.val.reason}; ${blocked}`;
      }
    }
    decisions.push(placed);
  }
  return decisions;
}

/**
 * A DRA request's decision in `placeEach`: placed by `Cluster.placeClaims`;
 * else, when waiting could help and the config allows it (`preemption`), a
 * preemption of lower-priority pods (`Cluster.preempt`); else
 * `Cluster.claimsUnplaced`'s, a wait saying what keeps the pod from
 * preempting (`Cluster.preemptionBlocked`).
 */
function placeClaimsEach(cluster, want, fit, preemption) {
  const placed = cluster.placeClaims(want, fit);
  if (placed !== null) return placed;
  if (preemption && !cluster.claimsShortfall(want).permanent) {
    const preempted = cluster.preempt(want, fit, Nvlink.Ignore);
    if (preempted !== null) return preempted;
  }
  const decision = cluster.claimsUnplaced(want);
  if (decision.tag === 'wait' && preemption) {
    const blocked = cluster.preemptionBlocked(want);
    if (blocked !== null) decision.val.reason = `${decision.val.reason}; ${blocked}`;
  }
  return decision;
}

/** Claim choices as a decision carries them (`solveOn`'s, each one's `gpus` a `Uint32Array`). */
function claimChoices(choices) {
  return choices.map((c) => ({
    claim: c.claim,
    request: c.request,
    alternative: c.alternative,
    gpus: Uint32Array.from(c.gpus),
  }));
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
